package rules

import (
	"slices"

	"github.com/google/btree"

	"github.com/tqgo/tqgo/backends/metadata"
)

// groupIndex keeps a group task's ready rows by group, and the groups
// holding a complete group's worth of ready rows by their first ready
// row, so that a claim takes the oldest complete groups in what they cost.
type groupIndex struct {
	g        Group
	of       map[uint64]string // a ready row's group id, as indexed
	groups   map[string]*group
	complete *btree.BTreeG[*group] // groups with at least g.Size ready rows, by first row
}

type group struct {
	id      string
	members []uint64 // ready rows, by index
}

func newGroupIndex(g Group) *groupIndex {
	return &groupIndex{g: g, of: map[uint64]string{}, groups: map[string]*group{},
		complete: btree.NewG(16, func(a, b *group) bool { return a.members[0] < b.members[0] })}
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
	}
	if x.full(gr) {
		x.complete.Delete(gr)
	}
	at, _ := slices.BinarySearch(gr.members, i)
	gr.members = slices.Insert(gr.members, at, i)
	x.of[i] = id
	if x.full(gr) {
		x.complete.ReplaceOrInsert(gr)
	}
}

// remove takes row i out of its group.
func (x *groupIndex) remove(i uint64) {
	id, ok := x.of[i]
	if !ok {
		return
	}
	delete(x.of, i)
	gr := x.groups[id]
	if x.full(gr) {
		x.complete.Delete(gr)
	}
	if at, found := slices.BinarySearch(gr.members, i); found {
		gr.members = slices.Delete(gr.members, at, at+1)
	}
	switch {
	case len(gr.members) == 0:
		delete(x.groups, id)
	case x.full(gr):
		x.complete.ReplaceOrInsert(gr)
	}
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
