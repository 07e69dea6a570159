package tq

import (
	"context"
	"maps"

	"github.com/tqgo/tqgo/backends/metadata"
)

// FieldInfo is what the metadata knows of one cell without reading it.
type FieldInfo struct {
	DType string // tensor dtype name, "" for a general value
	Shape []int  // tensor shape, nil for a general value (a 0-d tensor's DType is set)
}

// RowInfo is one row's metadata.
type RowInfo struct {
	Key    string
	Index  uint64 // global index: allocated on first put, never reused
	Fields map[string]FieldInfo
	Tag    Tag
}

// BatchMeta is the metadata of some rows of a partition, as List and
// Lookup return it: a copy, taken when they ran. BatchGetByMeta reads the
// rows it names (by partition and key) as they are when it runs.
type BatchMeta struct {
	Partition string
	Rows      []RowInfo
}

// Keys returns the rows' keys in order.
func (m *BatchMeta) Keys() []string {
	out := make([]string, len(m.Rows))
	for i, r := range m.Rows {
		out[i] = r.Key
	}
	return out
}

// rowInfo copies what the caller may change (tag, shapes) out of the
// store's record, which other readers share.
func rowInfo(r *metadata.Row) RowInfo {
	ri := RowInfo{Key: r.Key, Index: r.Index, Fields: make(map[string]FieldInfo, len(r.Fields)), Tag: Tag(maps.Clone(r.Tag))}
	for f, fi := range r.Fields {
		ri.Fields[f] = FieldInfo{DType: fi.DType, Shape: fieldShape(fi.Shape)}
	}
	return ri
}

// fieldShape is a stored shape as FieldInfo holds it: a fresh []int, nil
// for a general value.
func fieldShape(s []int64) []int {
	if s == nil {
		return nil
	}
	return shapeInt(s)
}

// List returns the metadata of every row of partition, by global index.
// An unknown partition gives an empty BatchMeta.
func (c *Client) List(ctx context.Context, partition string) (_ *BatchMeta, err error) {
	ctx, tr := c.trace(ctx, "List", partition, 0)
	defer func() { tr.done(err) }()
	release, err := c.enter(ctx, "List", partition)
	if err != nil {
		return nil, err
	}
	defer release()
	if err := checkPartition(partition); err != nil {
		return nil, err
	}
	rows, err := c.meta.List(ctx, partition)
	if err != nil {
		return nil, err
	}
	tr.add(len(rows), 0, 0)
	return batchMeta(partition, rows), nil
}

// Lookup returns the metadata of keys; an unknown key gives ErrNotFound.
func (c *Client) Lookup(ctx context.Context, partition string, keys []string) (_ *BatchMeta, err error) {
	ctx, tr := c.trace(ctx, "Lookup", partition, len(keys))
	defer func() { tr.done(err) }()
	release, err := c.enter(ctx, "Lookup", partition)
	if err != nil {
		return nil, err
	}
	defer release()
	rows, err := c.lookupRows(ctx, partition, keys)
	if err != nil {
		return nil, err
	}
	tr.add(len(rows), 0, 0)
	return batchMeta(partition, rows), nil
}

// batchMeta is the caller's copy of rows of partition.
func batchMeta(partition string, rows []*metadata.Row) *BatchMeta {
	m := &BatchMeta{Partition: partition, Rows: make([]RowInfo, len(rows))}
	for i, r := range rows {
		m.Rows[i] = rowInfo(r)
	}
	return m
}

// lookupRows returns the store's committed row of each key; an unknown key
// gives ErrNotFound. BatchGet reads the rows as they are, without copying
// them into a BatchMeta.
func (c *Client) lookupRows(ctx context.Context, partition string, keys []string) ([]*metadata.Row, error) {
	if err := c.check(ctx); err != nil {
		return nil, err
	}
	if err := checkPartition(partition); err != nil {
		return nil, err
	}
	if err := checkKeys(partition, keys); err != nil {
		return nil, err
	}
	return c.lookupValid(ctx, partition, keys)
}

// lookupValid is lookupRows of a partition and keys already checked.
func (c *Client) lookupValid(ctx context.Context, partition string, keys []string) ([]*metadata.Row, error) {
	if err := c.check(ctx); err != nil {
		return nil, err
	}
	rows, err := c.meta.Lookup(ctx, partition, keys)
	if err != nil {
		return nil, err
	}
	for i, r := range rows {
		if r == nil {
			return nil, &KeyError{Partition: partition, Key: keys[i], Err: ErrNotFound}
		}
	}
	return rows, nil
}

// Partitions returns the names of partitions that have rows, sorted.
func (c *Client) Partitions(ctx context.Context) (_ []string, err error) {
	ctx, tr := c.trace(ctx, "Partitions", "", 0)
	defer func() { tr.done(err) }()
	release, err := c.enter(ctx, "Partitions", "")
	if err != nil {
		return nil, err
	}
	defer release()
	return c.meta.Partitions(ctx)
}

// Clear removes keys from partition, metadata first and then their data;
// unknown keys are ignored. Their global indexes are never reused. Like
// every write it returns nil once applied (the rows are gone for every
// client), an error that applied nothing, or one matching
// ErrOutcomeUnknown. Cells it could not delete once the rows were gone
// are logged and left to Reclaim, which finds them: they are unreferenced
// garbage, not part of the outcome.
func (c *Client) Clear(ctx context.Context, partition string, keys []string) (err error) {
	ctx, tr := c.trace(ctx, "Clear", partition, len(keys))
	defer func() { tr.done(err) }()
	release, err := c.enter(ctx, "Clear", partition)
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
	rows, err := c.meta.Delete(ctx, partition, keys)
	if err != nil {
		return err
	}
	return c.deleteRows(ctx, tr, partition, rows)
}

// ClearPartition removes every row of partition and its data, and returns
// as Clear does. Puts of the partition in flight fail with ErrConflict and
// delete their own cells. Cells it fails to delete (logged), and cells of
// puts whose client died mid-way, are deleted by a later Reclaim of the
// partition (the latter once older than its olderThan), where the engine
// tracks garbage: once both succeed, no cell of the partition is left.
func (c *Client) ClearPartition(ctx context.Context, partition string) (err error) {
	ctx, tr := c.trace(ctx, "ClearPartition", partition, 0)
	defer func() { tr.done(err) }()
	release, err := c.enter(ctx, "ClearPartition", partition)
	if err != nil {
		return err
	}
	defer release()
	if err := checkPartition(partition); err != nil {
		return err
	}
	rows, err := c.meta.DeletePartition(ctx, partition)
	if err != nil {
		return err
	}
	return c.deleteRows(ctx, tr, partition, rows)
}

// deleteRows deletes the cells of rows already removed from the metadata
// of partition. The rows are gone for readers either way, so the deletes
// run even when ctx ends (bounded, as rollbacks are); a failure leaves
// data behind, which is logged and which Reclaim deletes where the store
// tracks garbage (it is told which deletes succeeded).
func (c *Client) deleteRows(ctx context.Context, tr *callTrace, partition string, rows []*metadata.Row) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	cells := 0
	for _, r := range rows {
		cells += len(r.Fields)
	}
	// In the order a MetaStore recorded them, so Swept finds them as one run.
	refs := metadata.AppendRowRefs(make([]metadata.Ref, 0, cells), rows)
	c.deleteCleared(ctx, tr, partition, len(rows), refs, "cleared rows")
	return nil
}

// deleteCleared deletes the cells refs of partition, which a clear of
// rows of it unreferenced, and reports those deleted swept; a failure is
// logged, and leaves the rest to Reclaim.
func (c *Client) deleteCleared(ctx context.Context, tr *callTrace, partition string, rows int, refs []metadata.Ref, why string) {
	deleted, err := c.deleteRefs(ctx, refs)
	tr.add(rows, len(deleted), 0)
	c.swept(ctx, partition, deleted, why)
	if err != nil {
		c.opts.logger.Warn("tq: clear applied, but deleting its cells failed; Reclaim deletes them", "why", why, "partition", partition, "cells", len(refs), "deleted", len(deleted), "err", err)
	}
}
