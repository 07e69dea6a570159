package rules

import (
	"maps"
	"slices"

	"github.com/tqgo/tqgo/backends/metadata"
)

// DeleteFields removes fields from the rows of keys at time now: their
// committed cells become garbage, and every reservation of those fields
// of those rows still pending (committed or not) is aborted, becoming an
// orphan (garbage once old enough, as a removed row's are): a put of one
// of the fields prepared before the removal fails its Commit with
// backends.ErrConflict, as a put of a removed row does. Rows stay, with
// their other fields, their tag and every task's consumption of them
// (a leased row keeps its lease); a row left with no field is a row with
// no field, as a tag-only put makes one. Unknown keys, and fields a row
// does not have, are ignored.
//
// A task whose fields a row no longer has stops finding it ready: the row
// leaves the task's index (and its group and version indexes), at a cost
// of the tasks per row changed, never a scan of the partition; it is
// ready again once a commit gives it the fields back.
//
// It returns the cells it made garbage, in the order it recorded them
// (rows in keys' order, a row's cells by field name), so that Swept of
// them costs their length; nil when the partition replays (quiet).
func (p *Partition) DeleteFields(now int64, keys, fields []string) []metadata.Ref {
	p.tick(now)
	defer p.roomMade(p.held, p.bytes)
	if len(keys) == 0 || len(fields) == 0 {
		return nil
	}
	fs := slices.Compact(slices.Sorted(slices.Values(fields)))
	start := len(p.garbage)
	// Rows of one put mostly share their Fields map (see metadata.Merger):
	// the result of the last distinct map is kept for the next row.
	var cur, next map[string]metadata.FieldInfo
	var gone []string // the fields cur loses, in name order
	for _, k := range keys {
		r := p.rows[k]
		if r == nil {
			continue
		}
		if p.orphanFields(r, fs) {
			p.unhold(r)
		}
		old := r.view
		if old == nil {
			continue
		}
		if next == nil || !metadata.SameMap(old.Fields, cur) {
			cur, next, gone = old.Fields, nil, gone[:0]
			for _, f := range fs {
				if _, ok := old.Fields[f]; ok {
					gone = append(gone, f)
				}
			}
			if len(gone) > 0 {
				next = maps.Clone(old.Fields) // not nil: a row with no field has an empty table
				for _, f := range gone {
					delete(next, f)
				}
			} else {
				next = old.Fields
			}
		}
		if len(gone) == 0 {
			continue
		}
		for _, f := range gone {
			fi := old.Fields[f]
			p.garbage = append(p.garbage, metadata.Ref{Index: r.index, Field: f, Gen: fi.Gen, Tag: fi.BackendTag})
		}
		nv := &metadata.Row{Key: old.Key, Index: old.Index, Fields: next, Tag: old.Tag}
		r.view = nv
		p.sorted = nil
		p.committedSummary(r, old, r.since)
		p.lostFields(nv)
	}
	if p.quiet || len(p.garbage) == start {
		return nil
	}
	return slices.Clone(p.garbage[start:])
}

// orphanFields aborts r's pending reservations of fields (sorted), in
// the window and far, making them orphans with their times, and takes
// the fields out of the capacity's bytes. It reports whether it aborted
// one in the window.
func (p *Partition) orphanFields(r *row, fields []string) (took bool) {
	for _, f := range fields {
		i := r.find(f, -1)
		if i < 0 {
			continue
		}
		r.own()
		g := &r.gens[i]
		p.eachPending(g, func(gen uint64) {
			p.orphans = append(p.orphans, pendingRef{ref: metadata.Ref{Index: r.index, Field: f, Gen: gen}, at: p.when(g, gen)})
		})
		p.pending -= popcount(p.pend(g))
		took = took || g.w != 0
		p.freeWindow(g)
		p.sized(g, 0)
	}
	if len(p.far) == 0 {
		return took
	}
	p.far = slices.DeleteFunc(p.far, func(o pendingRef) bool {
		if o.ref.Index != r.index {
			return false
		}
		if _, found := slices.BinarySearch(fields, o.ref.Field); !found {
			return false
		}
		p.orphans = append(p.orphans, o)
		p.pending--
		return true
	})
	return took
}

// lostFields takes row (as it is now, having lost fields) out of the
// index of every task whose fields it no longer has. A row still ready
// for a task stays where it is: its tag, which files it in group and
// version indexes, did not change.
func (p *Partition) lostFields(row *metadata.Row) {
	for _, t := range p.tasks {
		if t.indexed && !hasFields(row, t.sel.Fields) {
			t.remove(row.Index)
		}
	}
}
