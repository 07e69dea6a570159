package rules

import (
	"slices"

	"github.com/tqgo/tqgo/backends/metadata"
)

// Capacity: the bounds of a partition (metadata.Capacity), the room a
// Prepare takes, and the rows cleared once every named task consumed
// them. What it counts is kept as rows change (Prepare, Commit, the
// removal of rows and of reservations), so a check costs the put's own
// cells, never a scan of the partition.

// Capacity returns the partition's capacity and what it holds.
func (p *Partition) Capacity() (metadata.Capacity, metadata.Usage) {
	return p.capacity, metadata.Usage{Rows: int64(p.committed + p.held), Bytes: p.bytes}
}

// SetCapacity sets the partition's capacity (c is checked by the caller)
// and removes, as Delete does, the rows every task of c.ClearAcked has
// consumed already; it returns them.
func (p *Partition) SetCapacity(now int64, c metadata.Capacity) []*metadata.Row {
	p.tick(now)
	c.ClearAcked = slices.Clone(c.ClearAcked)
	p.capacity = c
	p.bump() // a bound raised or lifted makes room: blocked puts look again
	if len(c.ClearAcked) == 0 {
		return nil
	}
	// Only rows the first named task consumed can qualify.
	t := p.tasks[c.ClearAcked[0]]
	if t == nil {
		return nil
	}
	var cand []uint64
	for i, e := range t.entries {
		if consumed(e) {
			cand = append(cand, i)
		}
	}
	slices.Sort(cand) // the removed rows' order shows in the garbage
	return p.clearConsumed(cand)
}

func consumed(e *entry) bool {
	return e != nil && (e.state == metadata.Acked || e.state == metadata.Dropped)
}

// clearConsumed removes the rows of indexes that every task of the
// capacity's ClearAcked has acknowledged or dropped, and returns them.
func (p *Partition) clearConsumed(indexes []uint64) []*metadata.Row {
	var keys []string
	for _, i := range indexes {
		r := p.byIndex[i]
		if r == nil {
			continue
		}
		all := true
		for _, name := range p.capacity.ClearAcked {
			t := p.tasks[name]
			if t == nil || !consumed(t.entries[i]) {
				all = false
				break
			}
		}
		if all {
			keys = append(keys, r.view.Key)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	return p.Delete(p.now, keys)
}

// room checks that a Prepare of keys and fields, whose cells have sizes
// (see metadata.MetaStore.Prepare), fits the capacity, given newRows of
// keys have no row (NewKeys); it returns the refusal (its Partition for
// the caller to fill, its Mark's Seq the partition's own), or nil.
func (p *Partition) room(keys, fields []string, sizes []int64, newRows int) *metadata.FullError {
	c := &p.capacity
	if !c.Bounded() {
		return nil
	}
	used := metadata.Usage{Rows: int64(p.committed + p.held), Bytes: p.bytes}
	asked := metadata.Usage{Rows: int64(newRows), Bytes: p.growth(keys, fields, sizes)}
	if c.Rows > 0 && asked.Rows > 0 && used.Rows+asked.Rows > c.Rows ||
		c.Bytes > 0 && asked.Bytes > 0 && used.Bytes+asked.Bytes > c.Bytes {
		return &metadata.FullError{Capacity: *c, Used: used, Asked: asked, Mark: metadata.Mark{Seq: p.seq}}
	}
	return nil
}

// growth returns how many bytes a Prepare with sizes adds to the
// partition's count: each cell's size beyond what its field counts now
// (a field counts the largest of its cell and its pending writes until
// the newest commits).
func (p *Partition) growth(keys, fields []string, sizes []int64) int64 {
	if sizes == nil {
		return 0
	}
	var n int64
	for i, k := range keys {
		r := p.rows[k]
		for j, f := range fields {
			s := sizes[j*len(keys)+i]
			if r != nil {
				if g := r.find(f, j); g >= 0 {
					s -= min(s, r.gens[g].size)
				}
			}
			n += s
		}
	}
	return n
}

// sized records size as the newest write of r's field at g.
func (p *Partition) sized(g *fieldGen, size int64) {
	p.bytes += size - g.size
	g.size = size
}

// unhold ends r's hold on a row of the capacity, if it has one and no
// longer needs it: committed, or with no reservation left (its puts
// failed). A row that holds none counts its bytes from then on only if
// committed.
func (p *Partition) unhold(r *row) {
	if !r.held {
		return
	}
	if r.view == nil {
		for i := range r.gens {
			if r.gens[i].w != 0 { // a reservation pending
				return
			}
		}
		r.own()
		for i := range r.gens {
			p.sized(&r.gens[i], 0)
		}
	}
	r.held = false
	p.held--
}

// release takes a row being removed out of the capacity's counts.
func (p *Partition) release(r *row) {
	if r.held {
		r.held = false
		p.held--
	}
	if r.shared { // the other rows keep their sizes: r lets go of its gens
		for i := range r.gens {
			p.bytes -= r.gens[i].size
		}
		r.gens, r.shared = nil, false
		return
	}
	for i := range r.gens {
		p.sized(&r.gens[i], 0)
	}
}

// roomMade raises the change count when the rows or bytes the capacity
// counts went down since they were held and bytes: a put blocked on the
// capacity waits for a change, and may fit now.
func (p *Partition) roomMade(held int, bytes int64) {
	if p.held < held || p.bytes < bytes {
		p.bump()
	}
}
