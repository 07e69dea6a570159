package tq

import (
	"cmp"
	"container/heap"
	"fmt"
	"math"
	"runtime/debug"
	"slices"

	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/internal/rules"
)

// Candidate is a row a claim may lease: committed with every field its
// task names, not consumed by the task, and not leased to another of its
// consumers. It reads the store's record of the row, without a copy.
type Candidate struct {
	row        *metadata.Row
	deliveries int
}

// Key is the row's key.
func (c Candidate) Key() string { return c.row.Key }

// Index is the row's global index.
func (c Candidate) Index() uint64 { return c.row.Index }

// Deliveries is how many times the row was delivered to the task before.
func (c Candidate) Deliveries() int { return c.deliveries }

// Tag returns the value of the row's tag key (nil, false if it has none).
// The value is the store's: treat it as read-only.
func (c Candidate) Tag(key string) (any, bool) {
	v, ok := c.row.Tag[key]
	return v, ok
}

// Number returns the row's tag key as a number, if it is one (an int64,
// a uint64, or a float64 that is not NaN).
func (c Candidate) Number(key string) (float64, bool) {
	return tagNumber(c.row.Tag[key])
}

// Fields reports whether the row has committed each of fields.
func (c Candidate) Fields(fields ...string) bool { return hasFields(c.row, fields) }

// tagNumber is a tag value as a number, as the rules read one (a NaN is
// none).
func tagNumber(v any) (float64, bool) { return metadata.TagNumber(v) }

// Sampler chooses what a claim leases among the candidates, which come in
// index order. It returns units, each a set of positions into ready leased
// together or not at all, in order of preference; the claim leases whole
// units in that order, skipping any that another consumer took meanwhile
// or that would bring the rows past the claim's n. n is how many rows to
// offer units for: the claim's n at first, more when the engine calls
// again for the same claim because candidates were taken (see askFor); a
// sampler offers some more than n (the built-in ones 2n+16 units), so
// that a few taken rows cost no second call. It may also name positions
// to drop (consumed by the task without delivery). A Sampler must be
// quick, must not call the client, and must be safe for concurrent use;
// it may be called more than once for one claim (the engine's view of the
// rows was stale, or candidates were taken), only the last call counting.
// A Sampler that panics fails that claim with a *SamplerPanicError,
// leasing nothing; the partition and the task's next claims are as if it
// had not been called.
type Sampler interface {
	Sample(ready []Candidate, n int) (units [][]int, drop []int)
}

// SamplerPanicError is a claim whose Sampler panicked: the claim failed,
// leasing and dropping nothing, and the task's other claims go on. It
// matches ErrInvalid (the sampler is the caller's code); Value is what the
// sampler panicked with, and the client's logger has its stack.
type SamplerPanicError struct {
	Value any
}

func (e *SamplerPanicError) Error() string {
	return fmt.Sprintf("%v: sampler panicked: %v", ErrInvalid, e.Value)
}

// Is reports whether target is ErrInvalid.
func (e *SamplerPanicError) Is(target error) bool { return target == ErrInvalid }

// sample calls the task's sampler, turning a panic of it into a
// *SamplerPanicError: the engine calls pick under its lock on the
// partition, which a panic must not leave held.
func (t *Task) sample(ready []Candidate, n int) (units [][]int, drop []int, err error) {
	defer func() {
		if v := recover(); v != nil {
			t.c.opts.logger.Error("tq: sampler panicked; the claim fails", "partition", t.partition, "task", t.name,
				"panic", v, "stack", string(debug.Stack()))
			units, drop, err = nil, nil, &SamplerPanicError{Value: v}
		}
	}()
	units, drop = t.sampler.Sample(ready, n)
	return units, drop, nil
}

// SamplerFunc is a function that is a Sampler.
type SamplerFunc func(ready []Candidate, n int) (units [][]int, drop []int)

// Sample calls f.
func (f SamplerFunc) Sample(ready []Candidate, n int) ([][]int, []int) { return f(ready, n) }

// Sequential is the sampler of rows in index order, one unit each: the
// oldest ready rows first. It is a task's default.
func Sequential() Sampler { return sequential{} }

type sequential struct{}

func (sequential) Sample(ready []Candidate, n int) ([][]int, []int) {
	units := make([][]int, min(len(ready), offered(n)))
	flat := make([]int, len(units))
	for i := range units {
		flat[i] = i
		units[i] = flat[i : i+1 : i+1]
	}
	return units, nil
}

// A GroupBy names the group a row belongs to: GroupTag or GroupKeyPrefix.
type GroupBy struct {
	tag, sep string
}

// GroupTag groups rows by the value of a tag key (GRPO: the prompt's id);
// a row without the key is in no group and never leased by a Groups task.
// Values of different kinds are different groups (1, 1.0 and "1"; -0.0
// and 0.0); lists, maps and bytes are grouped by their encoding.
func GroupTag(key string) GroupBy { return GroupBy{tag: key} }

// GroupKeyPrefix groups rows by their key up to the last sep ("p7/3" and
// "p7/4" are both in group "p7" with sep "/"); a key without sep is in no
// group.
func GroupKeyPrefix(sep string) GroupBy { return GroupBy{sep: sep} }

func (g GroupBy) valid() bool { return (g.tag == "") != (g.sep == "") }

func (g GroupBy) String() string {
	if g.tag != "" {
		return fmt.Sprintf("tag %q", g.tag)
	}
	return fmt.Sprintf("key prefix before %q", g.sep)
}

// id returns the row's group id, or false when it is in no group: the
// same ids the engines' rules form for a task's Groups.
func (g GroupBy) id(r *metadata.Row) (string, bool) { return rules.GroupID(g.tag, g.sep, r) }

// Groups is the sampler of complete groups of size rows sharing a group
// id, in the order of each group's first row: a group is a unit, leased
// whole or not at all, and a group with fewer than size ready rows is not
// offered (its rows wait for the rest). More than size ready rows of one
// id make several groups, in index order.
func Groups(by GroupBy, size int) Sampler { return groups{by: by, size: size} }

type groups struct {
	by   GroupBy
	size int
}

func (g groups) Sample(ready []Candidate, n int) ([][]int, []int) {
	open := map[string][]int{} // the rows of each id not yet in a complete group
	var complete [][]int
	for i, c := range ready {
		id, ok := g.by.id(c.row)
		if !ok {
			continue
		}
		rows := append(open[id], i)
		if len(rows) == g.size {
			complete = append(complete, rows)
			rows = nil
		}
		open[id] = rows
	}
	// By each group's first row: the oldest group first.
	slices.SortFunc(complete, func(a, b []int) int { return cmp.Compare(a[0], b[0]) })
	return complete[:min(len(complete), offered((n+g.size-1)/g.size))], nil
}

// offered is how many units a sampler offers for a claim that needs
// need: more than it needs, so that a claim whose engine passed rows
// another consumer took meanwhile (a server engine's cached view) still
// fills up in one request.
func offered(need int) int { return 2*need + 16 }

// weight is a unit's load for the rank split: the sum of its rows' length
// tag, or its row count when there is no length tag.
func unitWeight(rows []*metadata.Row, unit []int, lengthTag string) float64 {
	if lengthTag == "" {
		return float64(len(unit))
	}
	var w float64
	for _, i := range unit {
		w += rowLength(rows[i], lengthTag)
	}
	return w
}

// rowLength is a row's length for the rank split and a token budget: its
// lengthTag when that is a positive finite number, else 0.
func rowLength(r *metadata.Row, lengthTag string) float64 {
	if v, ok := tagNumber(r.Tag[lengthTag]); ok && v > 0 && !math.IsInf(v, 0) {
		return v
	}
	return 0
}

// splitRanks splits units (positions into rows) into ranks shares of
// similar weight by Karmarkar-Karp's largest differencing method, and
// returns the share of each rank as positions into rows, each in index
// order. Units are never split. The split depends only on the rows'
// indexes and weights, never on their order or the process: every rank
// computes the same one.
func splitRanks(rows []*metadata.Row, units [][]int, ranks int, lengthTag string) [][]int {
	type item struct {
		first uint64 // the unit's lowest row index: the tie-breaker
		w     float64
		unit  []int
	}
	items := make([]item, len(units))
	for i, u := range units {
		first := uint64(math.MaxUint64)
		for _, p := range u {
			first = min(first, rows[p].Index)
		}
		items[i] = item{first: first, w: unitWeight(rows, u, lengthTag), unit: u}
	}
	slices.SortFunc(items, func(a, b item) int {
		if c := cmp.Compare(b.w, a.w); c != 0 {
			return c
		}
		return cmp.Compare(a.first, b.first)
	})
	// Each partial solution is ranks subsets sorted by weight, heaviest
	// first; merging two pairs the heaviest of one with the lightest of
	// the other, which is the largest differencing step for k subsets.
	h := &kkHeap{}
	for i, it := range items {
		s := &kkSolution{seq: i, sets: make([]kkSet, ranks)}
		s.sets[0] = kkSet{w: it.w, units: [][]int{it.unit}, first: it.first}
		for j := 1; j < ranks; j++ {
			s.sets[j].first = math.MaxUint64
		}
		heap.Push(h, s)
	}
	seq := len(items)
	for h.Len() > 1 {
		a := heap.Pop(h).(*kkSolution)
		b := heap.Pop(h).(*kkSolution)
		merged := &kkSolution{seq: seq, sets: make([]kkSet, ranks)}
		seq++
		for j := range ranks {
			x, y := a.sets[j], b.sets[ranks-1-j]
			merged.sets[j] = kkSet{w: x.w + y.w, units: append(append([][]int{}, x.units...), y.units...), first: min(x.first, y.first)}
		}
		merged.sort()
		heap.Push(h, merged)
	}
	shares := make([][]int, ranks)
	if h.Len() == 0 {
		return shares
	}
	final := heap.Pop(h).(*kkSolution)
	// Shares go to ranks in the order of their lowest row index (empty
	// ones last), so the assignment is as deterministic as the split.
	sets := final.sets
	slices.SortStableFunc(sets, func(a, b kkSet) int { return cmp.Compare(a.first, b.first) })
	for r, s := range sets {
		for _, u := range s.units {
			shares[r] = append(shares[r], u...)
		}
		slices.SortFunc(shares[r], func(a, b int) int { return cmp.Compare(rows[a].Index, rows[b].Index) })
	}
	return shares
}

type kkSet struct {
	w     float64
	units [][]int
	first uint64
}

type kkSolution struct {
	seq  int
	sets []kkSet
}

func (s *kkSolution) sort() {
	slices.SortStableFunc(s.sets, func(a, b kkSet) int {
		if c := cmp.Compare(b.w, a.w); c != 0 {
			return c
		}
		return cmp.Compare(a.first, b.first)
	})
}

func (s *kkSolution) spread() float64 { return s.sets[0].w - s.sets[len(s.sets)-1].w }

type kkHeap []*kkSolution

func (h kkHeap) Len() int { return len(h) }
func (h kkHeap) Less(i, j int) bool {
	if a, b := h[i].spread(), h[j].spread(); a != b {
		return a > b
	}
	return h[i].seq < h[j].seq
}
func (h kkHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *kkHeap) Push(x any)   { *h = append(*h, x.(*kkSolution)) }
func (h *kkHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
