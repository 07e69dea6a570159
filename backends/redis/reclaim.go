package redis

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tqgo/tqgo/backends"
)

// Garbage implements backends.MetaStore. It appends an abort record whose
// cutoff the script computes from the server's clock (its time less
// olderThan), so that every client judges reservation ages alike and
// replays the abort the same way; the garbage returned is the view's
// after that record.
func (m *Meta) Garbage(ctx context.Context, partition string, olderThan time.Duration) ([]backends.Ref, error) {
	ctx = m.s.traced(ctx)
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	if olderThan < 0 {
		return nil, fmt.Errorf("%w: negative olderThan %v", backends.ErrInvalid, olderThan)
	}
	var v *view
	_, err := m.write(ctx, "garbage", partition, func(cur *view) (change, error) {
		v = cur
		if cur.epoch == "" && cur.empty() {
			return change{}, nil // no log as far as the view knows: check that
		}
		return change{record: bareRecord(recAbort), age: olderThan.Microseconds(), install: func(_ uint64, cutoff int64) {
			cur.abort(cutoff)
		}}, nil
	})
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.garbage), nil
}

// Swept implements backends.MetaStore. It appends a record naming the
// cells; when they are the last the partition's log remembers (no rows,
// no other garbage), it deletes the log instead.
func (m *Meta) Swept(ctx context.Context, partition string, refs []backends.Ref) error {
	ctx = m.s.traced(ctx)
	if err := m.check(ctx); err != nil {
		return err
	}
	if len(refs) == 0 {
		return nil
	}
	_, err := m.write(ctx, "swept", partition, func(v *view) (change, error) {
		if v.epoch == "" && v.empty() {
			return change{}, nil
		}
		if v.emptyAfterSweep(refs) {
			return change{drop: true}, nil
		}
		return change{record: sweptRecord(refs), install: func(uint64, int64) { v.sweep(refs) }}, nil
	})
	return err
}

// Abandon implements backends.MetaStore. It appends a record naming the
// cells, computed against the view; the cells the view does not know make
// the error.
func (m *Meta) Abandon(ctx context.Context, partition string, refs []backends.Ref) error {
	ctx = m.s.traced(ctx)
	if err := m.check(ctx); err != nil {
		return err
	}
	if len(refs) == 0 {
		return nil
	}
	distinct := make(map[backends.CellID]struct{}, len(refs))
	for _, r := range refs {
		distinct[r.ID()] = struct{}{}
	}
	known := 0
	_, err := m.write(ctx, "abandon", partition, func(v *view) (change, error) {
		known = v.knownCells(refs)
		if known == 0 {
			return change{}, nil // nothing to record: check the view is current
		}
		return change{record: abandonRecord(refs), install: func(uint64, int64) { v.abandon(refs) }}, nil
	})
	if err != nil {
		return err
	}
	if known < len(distinct) {
		return fmt.Errorf("%w: %d of %d cells of partition %q", backends.ErrReservationLost, len(distinct)-known, len(distinct), partition)
	}
	return nil
}
