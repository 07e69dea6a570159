package memory

import (
	"context"
	"fmt"
	"math/bits"
	"slices"
	"time"

	"github.com/tqgo/tqgo/backends"
)

// Garbage implements backends.MetaStore. It scans the partition's rows only
// when some reservation is pending; otherwise its cost is the garbage it
// returns.
func (m *MetaStore) Garbage(ctx context.Context, partition string, olderThan time.Duration) ([]backends.Ref, error) {
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	if olderThan < 0 {
		return nil, fmt.Errorf("%w: negative olderThan %v", backends.ErrInvalid, olderThan)
	}
	p := m.lockPart(partition, false, 0)
	if p == nil {
		return nil, nil
	}
	defer p.mu.Unlock()
	cutoff := time.Since(m.epoch) - olderThan // reserved at or before: aborted
	if p.pending > 0 {
		for _, r := range p.rows {
			for i := range r.gens {
				g := &r.gens[i]
				switch {
				case g.pend == 0:
				case g.at <= cutoff: // all of them
					g.eachPending(func(gen uint64) {
						p.garbage = append(p.garbage, backends.Ref{Index: r.index, Field: g.field, Gen: gen})
					})
					p.pending -= bits.OnesCount64(g.pend)
					g.pend = 0
				case g.old <= cutoff: // the oldest
					gen := g.oldest()
					g.drop(gen)
					p.garbage = append(p.garbage, backends.Ref{Index: r.index, Field: g.field, Gen: gen})
					p.pending--
				}
			}
		}
		p.far = slices.DeleteFunc(p.far, func(o pendingRef) bool {
			if o.at > cutoff {
				return false
			}
			p.garbage = append(p.garbage, o.ref)
			p.pending--
			return true
		})
	}
	p.orphans = slices.DeleteFunc(p.orphans, func(o pendingRef) bool {
		if o.at > cutoff {
			return false
		}
		p.garbage = append(p.garbage, o.ref)
		return true
	})
	return slices.Clone(p.garbage), nil
}

// Swept implements backends.MetaStore. Refs that are one run of the
// garbage, as a commit's Superseded and Stale are, or the cells of the
// rows a Delete returned in backends.AppendRowRefs order, cost their length;
// others cost the partition's garbage, and the scan of its rows when they
// name pending reservations (a rollback's).
func (m *MetaStore) Swept(ctx context.Context, partition string, refs []backends.Ref) error {
	if err := m.check(ctx); err != nil {
		return err
	}
	if len(refs) == 0 {
		return nil
	}
	p := m.lockPart(partition, false, 0)
	if p == nil {
		return nil
	}
	if !p.sweepRun(refs) {
		p.sweepSet(refs)
	}
	empty := p.empty()
	p.mu.Unlock()
	if empty {
		m.dropIfEmpty(partition)
	}
	return nil
}

// sweepRun removes refs from the garbage if they are a run of it, in
// order, and reports whether they were. The newest runs are tried first.
func (p *partition) sweepRun(refs []backends.Ref) bool {
	n := len(refs)
	for i := len(p.garbage) - n; i >= 0; i-- {
		if !sameCell(p.garbage[i], refs[0]) {
			continue
		}
		for j := 1; j < n; j++ {
			if !sameCell(p.garbage[i+j], refs[j]) {
				return false
			}
		}
		p.garbage = slices.Delete(p.garbage, i, i+n)
		return true
	}
	return false
}

// sweepSet removes the cells refs name from the garbage, the orphans and
// the rows' reservations, wherever they are.
func (p *partition) sweepSet(refs []backends.Ref) {
	set := backends.NewCellSet(refs)
	var inGarbage, inOrphans int
	p.garbage, inGarbage = backends.DeleteCells(set, p.garbage, backends.Ref.ID)
	p.orphans, inOrphans = backends.DeleteCells(set, p.orphans, pendingRef.id)
	found := inGarbage + inOrphans
	if found >= len(set) || p.pending == 0 {
		return // a cell is in one place only: nothing left to find
	}
	for _, r := range p.rows {
		for i := range r.gens {
			g := &r.gens[i]
			g.eachPending(func(gen uint64) {
				if set.Has(backends.CellID{Index: r.index, Gen: gen, Field: g.field}) {
					g.drop(gen)
					p.pending--
				}
			})
		}
	}
	var inFar int
	p.far, inFar = backends.DeleteCells(set, p.far, pendingRef.id)
	p.pending -= inFar
}

// Abandon implements backends.MetaStore. It scans the partition's rows
// for the reservations refs name: a rollback's, which is rare. It never
// reports a reservation lost.
func (m *MetaStore) Abandon(ctx context.Context, partition string, refs []backends.Ref) error {
	if err := m.check(ctx); err != nil {
		return err
	}
	if len(refs) == 0 {
		return nil
	}
	set := make(map[backends.CellID]backends.Ref, len(refs))
	for _, r := range refs {
		set[r.ID()] = r
	}
	// A cell it does not know was aborted and swept already (this store
	// loses no metadata, and never hands its key out again): the caller
	// may delete it.
	if p := m.lockPart(partition, false, 0); p != nil {
		p.abandon(set)
		p.mu.Unlock()
	}
	return nil
}

// abandon makes the reservations set names garbage.
func (p *partition) abandon(set map[backends.CellID]backends.Ref) {
	take := func(id backends.CellID) bool {
		r, ok := set[id]
		if ok {
			p.garbage = append(p.garbage, r)
		}
		return ok
	}
	p.orphans = slices.DeleteFunc(p.orphans, func(o pendingRef) bool { return take(o.ref.ID()) })
	if p.pending > 0 {
		for _, r := range p.rows {
			for i := range r.gens {
				g := &r.gens[i]
				g.eachPending(func(gen uint64) {
					if take(backends.CellID{Index: r.index, Gen: gen, Field: g.field}) {
						g.drop(gen)
						p.pending--
					}
				})
			}
		}
		p.far = slices.DeleteFunc(p.far, func(o pendingRef) bool {
			if take(o.ref.ID()) {
				p.pending--
				return true
			}
			return false
		})
	}
}

func sameCell(a, b backends.Ref) bool {
	return a.Index == b.Index && a.Gen == b.Gen && a.Field == b.Field
}
