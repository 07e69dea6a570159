package rules

import (
	"slices"
	"strings"
	"time"

	"github.com/google/btree"

	"github.com/tqgo/tqgo/backends/metadata"
)

// groupIndex keeps a group task's ready rows by group, and the groups
// holding a complete group's worth of ready rows by their first ready
// row, so that a claim takes the oldest complete groups in what they cost.
type groupIndex struct {
	g        Group
	since    func(i uint64) int64 // when row i last gained a field
	of       map[uint64]string    // a ready row's group id, as indexed
	groups   map[string]*group
	complete *btree.BTreeG[*group] // groups with at least g.Size ready rows, by first row
	// chunks counts the whole units of g.Size the complete groups hold.
	chunks int
	// waiting are the groups with a remainder: ready rows beyond their
	// whole units of g.Size (every ready row of a group with fewer), by
	// when their remainder was born (then id): the oldest overdue first.
	waiting *btree.BTreeG[*group]
}

type group struct {
	id      string
	members []uint64 // ready rows, by index
	// born is the earliest since (when each last gained a field, so
	// became ready for the task) of the members of its remainder (the
	// members past its whole units, which take the members in index
	// order): a function of the ready rows alone, so that every copy of
	// the partition agrees however late its index learned of a lease that
	// ended.
	born int64
}

// remainder is gr's members past its whole units of size.
func (gr *group) remainder(size int) []uint64 {
	return gr.members[len(gr.members)-len(gr.members)%size:]
}

func newGroupIndex(g Group, since func(uint64) int64) *groupIndex {
	return &groupIndex{g: g, since: since, of: map[uint64]string{}, groups: map[string]*group{},
		complete: btree.NewG(16, func(a, b *group) bool { return a.members[0] < b.members[0] }),
		waiting: btree.NewG(16, func(a, b *group) bool {
			return a.born < b.born || a.born == b.born && a.id < b.id
		})}
}

// file puts gr in the complete groups, the waiting groups, or both, as
// its members say.
func (x *groupIndex) file(gr *group) {
	if x.full(gr) {
		x.complete.ReplaceOrInsert(gr)
		x.chunks += len(gr.members) / x.g.Size
	}
	if len(gr.members)%x.g.Size != 0 {
		x.waiting.ReplaceOrInsert(gr)
	}
}

// unfile takes gr out of the complete and waiting groups.
func (x *groupIndex) unfile(gr *group) {
	if x.full(gr) {
		x.complete.Delete(gr)
		x.chunks -= len(gr.members) / x.g.Size
	}
	if len(gr.members)%x.g.Size != 0 {
		x.waiting.Delete(gr)
	}
}

// overdue reports whether a remainder born at born has passed the
// deadline at now.
func (x *groupIndex) overdue(born, now int64) bool {
	return x.g.Deadline > 0 && now-born >= x.g.Deadline.Microseconds()
}

// partialUnits returns up to n waiting groups overdue at now, oldest
// first, each its remainder.
func (x *groupIndex) partialUnits(n int, now int64) [][]uint64 {
	var out [][]uint64
	x.waiting.Ascend(func(gr *group) bool {
		if len(out) >= n || !x.overdue(gr.born, now) {
			return false
		}
		out = append(out, gr.remainder(x.g.Size))
		return true
	})
	return out
}

// nextDue is when the next waiting group becomes overdue after now (0:
// none): the groups ahead of it in the waiting order are overdue already.
func (x *groupIndex) nextDue(now int64) int64 {
	if x.g.Deadline <= 0 {
		return 0
	}
	due := int64(0)
	x.waiting.Ascend(func(gr *group) bool {
		if d := gr.born + x.g.Deadline.Microseconds(); d > now {
			due = d
			return false
		}
		return true
	})
	return due
}

// waits lists the waiting groups, oldest first, as of now, had the
// rows of more (ready by now, by their group id) been added: the index
// as of now, without changing it.
func (x *groupIndex) waits(now int64, more map[string][]uint64) []metadata.GroupWait {
	out := make([]metadata.GroupWait, 0, x.waiting.Len()+len(more))
	x.waiting.Ascend(func(gr *group) bool {
		if _, moved := more[gr.id]; !moved {
			out = append(out, x.wait(gr, now))
		}
		return true
	})
	if len(more) == 0 {
		return out
	}
	for id, rows := range more {
		gr := &group{id: id}
		if old := x.groups[id]; old != nil {
			gr.members = slices.Clone(old.members)
		}
		for _, i := range rows {
			if at, found := slices.BinarySearch(gr.members, i); !found {
				gr.members = slices.Insert(gr.members, at, i)
			}
		}
		if len(gr.members)%x.g.Size != 0 {
			x.setBorn(gr)
			out = append(out, x.wait(gr, now))
		}
	}
	slices.SortFunc(out, func(a, b metadata.GroupWait) int {
		if c := a.Since.Compare(b.Since); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

func (x *groupIndex) wait(gr *group, now int64) metadata.GroupWait {
	return metadata.GroupWait{ID: gr.id, Rows: len(gr.remainder(x.g.Size)), Since: time.UnixMicro(gr.born), Overdue: x.overdue(gr.born, now)}
}

// setBorn sets gr's born from its remainder (0 for none).
func (x *groupIndex) setBorn(gr *group) {
	gr.born = 0
	for k, i := range gr.remainder(x.g.Size) {
		if s := x.since(i); k == 0 || s < gr.born {
			gr.born = s
		}
	}
}

func (x *groupIndex) full(gr *group) bool { return len(gr.members) >= x.g.Size }

// add files ready row i (whose row is r) under its group.
func (x *groupIndex) add(i uint64, r *metadata.Row) {
	id, ok := groupID(&x.g, r)
	if !ok {
		return
	}
	gr := x.groups[id]
	if gr == nil {
		gr = &group{id: id}
		x.groups[id] = gr
	} else {
		x.unfile(gr)
	}
	at, _ := slices.BinarySearch(gr.members, i)
	gr.members = slices.Insert(gr.members, at, i)
	x.of[i] = id
	x.setBorn(gr)
	x.file(gr)
}

// remove takes row i out of its group.
func (x *groupIndex) remove(i uint64) {
	id, ok := x.of[i]
	if !ok {
		return
	}
	delete(x.of, i)
	gr := x.groups[id]
	x.unfile(gr)
	if at, found := slices.BinarySearch(gr.members, i); found {
		gr.members = slices.Delete(gr.members, at, at+1)
	}
	if len(gr.members) == 0 {
		delete(x.groups, id)
		return
	}
	x.setBorn(gr)
	x.file(gr)
}

// units returns up to n complete groups of Size ready rows, oldest first
// by first row, each group's rows in index order: a group holding k
// times Size ready rows gives k of them.
func (x *groupIndex) units(n int) [][]uint64 {
	if n <= 0 {
		return nil
	}
	size := x.g.Size
	var out [][]uint64
	// Groups come by their first ready row; a group's later chunks start
	// later than its first, so chunks are final in order once every
	// group whose first row precedes them was looked at.
	var pending [][]uint64
	flush := func(before uint64, all bool) {
		slices.SortFunc(pending, func(a, b []uint64) int { return compareIndex(a[0], b[0]) })
		k := 0
		for ; k < len(pending) && len(out) < n && (all || pending[k][0] < before); k++ {
			out = append(out, pending[k])
		}
		pending = pending[k:]
	}
	x.complete.Ascend(func(gr *group) bool {
		flush(gr.members[0], false)
		if len(out) >= n {
			return false
		}
		var cur []uint64
		for _, i := range gr.members {
			cur = append(cur, i)
			if len(cur) == size {
				pending = append(pending, cur)
				cur = nil
			}
		}
		return true
	})
	flush(0, true)
	return out
}

// since is when row i last gained a field (0 for no row).
func (p *Partition) since(i uint64) int64 {
	if r := p.byIndex[i]; r != nil {
		return r.since
	}
	return 0
}

// GroupWaits returns, for each of tasks (every task when none) whose
// claims take groups, the groups waiting incomplete as of now (see
// metadata.View.Groups). It changes nothing.
func (p *Partition) GroupWaits(now int64, tasks ...string) map[string][]metadata.GroupWait {
	now = max(now, p.now)
	var out map[string][]metadata.GroupWait
	for name, t := range p.tasks {
		if t.groups == nil || len(tasks) > 0 && !slices.Contains(tasks, name) {
			continue
		}
		// The leases that ended by the log's time are in the index, as
		// the next record would find them (never by now: the index must
		// be every copy's); those that end by now are added to a copy of
		// their groups, as Consumption counts them ready.
		p.advance(t, p.now)
		if out == nil {
			out = map[string][]metadata.GroupWait{}
		}
		out[name] = t.groups.waits(now, p.endedBy(t, now))
	}
	return out
}

// endedBy returns the rows whose lease or delay ends after the log's time
// and by now that a claim at now finds ready for t (not in its index
// yet), by group id. It changes nothing.
func (p *Partition) endedBy(t *task, now int64) map[string][]uint64 {
	var out map[string][]uint64
	for _, tm := range t.timers {
		if tm.until > now {
			continue
		}
		for _, i := range tm.rows {
			e, r := t.entries[i], p.byIndex[i]
			if e == nil || r == nil || e.until != tm.until || !claimable(e, now) || !hasFields(r.view, t.sel.Fields) {
				continue
			}
			if _, in := t.ready.Get(i); in {
				continue
			}
			if _, parked := t.parked[i]; parked {
				continue
			}
			if id, ok := groupID(&t.groups.g, r.view); ok {
				if out == nil {
					out = map[string][]uint64{}
				}
				out[id] = append(out[id], i)
			}
		}
	}
	return out
}
