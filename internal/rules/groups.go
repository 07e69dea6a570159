package rules

import (
	"slices"
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
	// waiting are the groups with fewer than g.Size ready rows, by when
	// they were born (then id): the oldest overdue first.
	waiting *btree.BTreeG[*group]
}

type group struct {
	id      string
	members []uint64 // ready rows, by index
	// born is the earliest of its members' since (when each last gained
	// a field, so became ready for the task): a function of the ready
	// rows alone, so that every copy of the partition agrees however late
	// its index learned of a lease that ended.
	born int64
}

func newGroupIndex(g Group, since func(uint64) int64) *groupIndex {
	return &groupIndex{g: g, since: since, of: map[uint64]string{}, groups: map[string]*group{},
		complete: btree.NewG(16, func(a, b *group) bool { return a.members[0] < b.members[0] }),
		waiting: btree.NewG(16, func(a, b *group) bool {
			return a.born < b.born || a.born == b.born && a.id < b.id
		})}
}

// file puts gr in the complete or the waiting groups, as its members say.
func (x *groupIndex) file(gr *group) {
	if x.full(gr) {
		x.complete.ReplaceOrInsert(gr)
	} else {
		x.waiting.ReplaceOrInsert(gr)
	}
}

// unfile takes gr out of the complete or waiting groups.
func (x *groupIndex) unfile(gr *group) {
	if x.full(gr) {
		x.complete.Delete(gr)
	} else {
		x.waiting.Delete(gr)
	}
}

// overdue reports whether gr, waiting incomplete, has passed the
// deadline at now.
func (x *groupIndex) overdue(gr *group, now int64) bool {
	return x.g.Deadline > 0 && now-gr.born >= x.g.Deadline.Microseconds()
}

// partialUnits returns up to n waiting groups overdue at now, oldest
// first, each its ready rows.
func (x *groupIndex) partialUnits(n int, now int64) [][]uint64 {
	var out [][]uint64
	x.waiting.Ascend(func(gr *group) bool {
		if len(out) >= n || !x.overdue(gr, now) {
			return false
		}
		out = append(out, gr.members)
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

// waits lists the waiting groups, oldest first, as of now.
func (x *groupIndex) waits(now int64) []metadata.GroupWait {
	out := make([]metadata.GroupWait, 0, x.waiting.Len())
	x.waiting.Ascend(func(gr *group) bool {
		out = append(out, metadata.GroupWait{ID: gr.id, Rows: len(gr.members), Since: time.UnixMicro(gr.born), Overdue: x.overdue(gr, now)})
		return true
	})
	return out
}

// setBorn sets gr's born from its members.
func (x *groupIndex) setBorn(gr *group) {
	gr.born = x.since(gr.members[0])
	for _, i := range gr.members[1:] {
		gr.born = min(gr.born, x.since(i))
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
	if s := x.since(i); len(gr.members) == 1 || s < gr.born {
		gr.born = s
	}
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
		// be every copy's).
		p.advance(t, p.now)
		if out == nil {
			out = map[string][]metadata.GroupWait{}
		}
		out[name] = t.groups.waits(now)
	}
	return out
}
