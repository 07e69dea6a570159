package grpo

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/tqgo/tqgo/codec"
	"github.com/tqgo/tqgo/tq"
)

// againTries is how many times again runs an op whose outcome stays
// unknown before it gives up.
const againTries = 5

// again runs op, and runs it again, a little later each time, while it
// fails with tq.ErrOutcomeUnknown: its request went out, and whether it
// applied is not known (say, the partition's log was compacted past it
// before its writer read it back). A clear or an ack of what is gone is
// no error, and a claim whose outcome is unknown may have leased rows
// that come back when the lease ends, so those are made again as they
// are. A put is not: it is an upsert, so once a first attempt that
// applied was followed by another role consuming the rows and clearing
// them, the same put again would bring the rows back, or fail with
// tq.ErrConflict if they were cleared while it wrote. put and update
// look first.
func (r *runner) again(ctx context.Context, what string, op func() error) error {
	for try := 1; ; try++ {
		err := op()
		if err == nil || !errors.Is(err, tq.ErrOutcomeUnknown) || try == againTries || ctx.Err() != nil {
			return err
		}
		if err := r.pause(ctx, what, try, err); err != nil {
			return err
		}
	}
}

// pause logs that op what failed with err, whose outcome is unknown, on
// its try-th try, and waits before the next, a little longer each time;
// it returns err if ctx ends first.
func (r *runner) pause(ctx context.Context, what string, try int, err error) error {
	r.log.Warn("outcome unknown: once more", "op", what, "try", try, "err", err)
	select {
	case <-ctx.Done():
		return err
	case <-time.After(time.Duration(try) * 50 * time.Millisecond):
		return nil
	}
}

// put is Client.BatchPut of rows the put makes (keys no other caller
// writes), made again while its outcome is unknown unless it applied: a
// put is whole or absent, so if any of its rows is there it applied (the
// others may have been consumed and cleared since), and it is done. A
// lookup that fails leaves the outcome unknown: it looks again.
func (r *runner) put(ctx context.Context, partition string, keys []string, b tq.Batch, tags []tq.Tag) error {
	err := r.c.BatchPut(ctx, partition, keys, b, tags)
	for try := 1; errors.Is(err, tq.ErrOutcomeUnknown) && try < againTries; try++ {
		if err := r.pause(ctx, "put "+partition, try, err); err != nil {
			return err
		}
		there, lerr := r.present(ctx, partition, keys)
		switch {
		case lerr != nil:
			r.log.Warn("looking up the rows of a put of unknown outcome", "partition", partition, "err", lerr)
		case len(there) > 0:
			return nil
		default:
			err = r.c.BatchPut(ctx, partition, keys, b, tags)
		}
	}
	return err
}

// update is Client.BatchPut of fields and tags added to rows that exist
// (the rows of a lease the caller holds), made again, to the rows still
// there only, while its outcome is unknown or it fails with
// tq.ErrConflict (a row cleared while it wrote). A row gone was cleared
// by the roles after: done with it, the put having applied, or dropped
// it; either way nothing is left to write to it, and writing it again
// would make a row of the put's fields alone that no task ever finishes.
// A put whose rows are all gone writes nothing and is no error.
func (r *runner) update(ctx context.Context, partition string, keys []string, b tq.Batch, tags []tq.Tag) error {
	err := r.c.BatchPut(ctx, partition, keys, b, tags)
	for try := 1; err != nil && try < againTries; try++ {
		unknown := errors.Is(err, tq.ErrOutcomeUnknown)
		if !unknown && !errors.Is(err, tq.ErrConflict) {
			return err
		}
		if unknown {
			if err := r.pause(ctx, "update "+partition, try, err); err != nil {
				return err
			}
		}
		there, lerr := r.present(ctx, partition, keys)
		switch {
		case lerr != nil && !unknown:
			return errors.Join(err, lerr)
		case lerr != nil:
			r.log.Warn("looking up the rows of a put of unknown outcome", "partition", partition, "err", lerr)
			continue // still unknown: look again
		case len(there) == len(keys) && !unknown:
			return err // no row gone: a conflict of another kind
		case len(there) == 0:
			return nil
		}
		keys, b, tags = rowsOf(keys, b, tags, there)
		err = r.c.BatchPut(ctx, partition, keys, b, tags)
	}
	return err
}

// present returns the positions in keys of those that have a row in
// partition: one Lookup when all have, else the partition's list.
func (r *runner) present(ctx context.Context, partition string, keys []string) ([]int, error) {
	all := make([]int, len(keys))
	for i := range all {
		all[i] = i
	}
	_, err := r.c.Lookup(ctx, partition, keys)
	if err == nil {
		return all, nil
	}
	if !errors.Is(err, tq.ErrNotFound) {
		return nil, err
	}
	m, err := r.c.List(ctx, partition)
	if err != nil {
		return nil, err
	}
	there := map[string]bool{}
	for _, row := range m.Rows {
		there[row.Key] = true
	}
	return slices.DeleteFunc(all, func(i int) bool { return !there[keys[i]] }), nil
}

// rowsOf returns the rows at positions at of a put's keys, batch and
// tags.
func rowsOf(keys []string, b tq.Batch, tags []tq.Tag, at []int) ([]string, tq.Batch, []tq.Tag) {
	ks := make([]string, len(at))
	for j, i := range at {
		ks[j] = keys[i]
	}
	var ts []tq.Tag
	if tags != nil {
		ts = make([]tq.Tag, len(at))
		for j, i := range at {
			ts[j] = tags[i]
		}
	}
	out := make(tq.Batch, len(b))
	for f, c := range b {
		rows := make([]any, len(at))
		for j, i := range at {
			rows[j] = c.Row(i)
		}
		if k := c.Kind(); k == tq.KindStacked || k == tq.KindJagged {
			tensors := make([]codec.Tensor, len(at))
			for j, v := range rows {
				tensors[j] = v.(codec.Tensor)
			}
			out[f] = tq.Jagged(tensors)
		} else {
			out[f] = tq.Values(rows)
		}
	}
	return ks, out, ts
}

// clearKeys is Client.Clear, made again while its outcome is unknown.
func (r *runner) clearKeys(ctx context.Context, partition string, keys []string) error {
	return r.again(ctx, "clear "+partition, func() error { return r.c.Clear(ctx, partition, keys) })
}

// reset is Client.ResetConsumption of every row, made again while its
// outcome is unknown.
func (r *runner) reset(ctx context.Context, partition, task string) error {
	return r.again(ctx, "reset "+partition, func() error { return r.c.ResetConsumption(ctx, partition, task) })
}

// wait is t.Wait (t.Claim if claim), made again while its outcome is
// unknown.
func (r *runner) wait(ctx context.Context, t *tq.Task, claim bool, n int, opts ...tq.ClaimOption) (l *tq.Lease, err error) {
	err = r.again(ctx, "claim "+t.Partition(), func() error {
		if claim {
			l, err = t.Claim(ctx, n, opts...)
		} else {
			l, err = t.Wait(ctx, n, opts...)
		}
		return err
	})
	return l, err
}
