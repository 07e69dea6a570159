package tq

import (
	"context"
	"slices"
)

// ClearFields removes fields from the rows of keys, metadata first and
// then the cells, as TransferQueue's clear of single fields does: the
// rows stay, with their other fields, their tag and their consumption. A
// row left with no field stays too (a row with a tag and no field, as a
// tag-only BatchPut makes one); Clear removes rows. Unknown keys, and
// fields a row does not have, are ignored, as Clear ignores unknown keys.
//
// A task that needs a removed field no longer finds the row ready (it
// waits for the field, as a row never given it does) until a put writes
// the field again. A row leased when its field goes keeps its lease: its
// holder may still Ack it, which consumes it for the task as any Ack does
// (the field's value was read, or was not needed), Nack it, which returns
// it to wait for the field, or Extend it; a read of the removed field
// finds it missing (ErrNotReady). A put of one of the fields to one of
// the rows prepared before ClearFields applied fails with ErrConflict
// (it applied nothing and deleted its cells), as a put racing Clear
// does: a put never brings back a value older than the removal.
//
// Everything is validated before anything changes: no field, a bad or
// repeated field name, a bad partition or key, or a repeated key fails
// with ErrInvalid. Like every write it returns nil once applied (for
// every client), an error that applied nothing, or one matching
// ErrOutcomeUnknown. Cells it could not delete once the fields were gone
// are logged and left to Reclaim, as Clear's are.
func (c *Client) ClearFields(ctx context.Context, partition string, keys []string, fields ...string) (err error) {
	ctx, tr := c.trace(ctx, "ClearFields", partition, len(keys))
	defer func() { tr.done(err) }()
	release, err := c.enter(ctx, "ClearFields", partition)
	if err != nil {
		return err
	}
	defer release()
	if err := checkPartition(partition); err != nil {
		return err
	}
	if err := checkKeys(partition, keys); err != nil {
		return err
	}
	if len(fields) == 0 {
		return invalidf("clear fields: no field named")
	}
	for i, f := range fields {
		if err := checkField(f); err != nil {
			return err
		}
		if slices.Contains(fields[:i], f) {
			return invalidf("field %q appears twice", f)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	refs, err := c.meta.DeleteFields(ctx, partition, keys, slices.Clone(fields))
	if err != nil || len(refs) == 0 {
		return err
	}
	// The fields are gone for readers either way: the deletes run even
	// when ctx ends, bounded, as Clear's do.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	c.deleteCleared(dctx, tr, partition, len(keys), refs, "cleared fields")
	return nil
}
