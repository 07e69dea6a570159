package tqtest

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/tqgo/tqgo/tq"
)

// The model's groups past their deadline, Stragglers, Pace and Ratio: what
// GroupDeadline, Task.Stragglers, TaskStatus.Groups, Client.Pace and
// Client.AwaitInsert/AwaitSample promise.

// mgroup is a group of a group task's claimable rows: its whole units of
// groupSize (by index), its remainder (the rows past them) and when the
// remainder was born (the earliest since of its rows).
type mgroup struct {
	id     string
	chunks [][]*mrow
	rem    []*mrow
	born   time.Duration
}

// groupKey is the id the engine gives a uid value (see GroupWait.ID): its
// kind and value.
func groupKey(v any) string {
	switch x := v.(type) {
	case string:
		return "s" + x
	case int64:
		return fmt.Sprintf("i%d", x)
	}
	return fmt.Sprintf("?%v", v)
}

// groupsOf returns td's groups of claimable rows, by id.
func (m *model) groupsOf(td taskDef) []*mgroup {
	members := map[string][]*mrow{}
	for _, r := range m.candidates(td) {
		if v, ok := groupID(r); ok {
			k := groupKey(v)
			members[k] = append(members[k], r)
		}
	}
	var out []*mgroup
	for _, id := range slices.Sorted(mapKeys(members)) {
		rows := members[id]
		g := &mgroup{id: id}
		whole := len(rows) - len(rows)%groupSize
		for i := 0; i < whole; i += groupSize {
			g.chunks = append(g.chunks, rows[i:i+groupSize])
		}
		g.rem = rows[whole:]
		for i, r := range g.rem {
			if i == 0 || r.since < g.born {
				g.born = r.since
			}
		}
		out = append(out, g)
	}
	return out
}

func mapKeys[V any](mp map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range mp {
			if !yield(k) {
				return
			}
		}
	}
}

// overdue reports whether g's remainder has waited td's deadline.
func (m *model) overdue(td taskDef, g *mgroup) bool {
	return td.deadline && len(g.rem) > 0 && m.now-g.born >= m.groupDL
}

// waits are td's waiting groups as Status lists them (by id: the order by
// birth is the engine clock's, which a model without one cannot tell).
func (m *model) waits(td taskDef) []tq.GroupWait {
	var out []tq.GroupWait
	for _, g := range m.groupsOf(td) {
		if len(g.rem) > 0 {
			out = append(out, tq.GroupWait{ID: g.id, Rows: len(g.rem), Overdue: m.overdue(td, g)})
		}
	}
	return out
}

// pickDeadline is a claim of n rows, at least min, by a task with a
// partial deadline: the first ⌊n/2⌋ whole units of every group by first
// row, then the overdue remainders (oldest first), each taken whole while
// it fits in n; none when they come to fewer than min (capped at the rows
// of the whole groups n holds, not rounded up). partial flags the
// remainders.
func (m *model) pickDeadline(td taskDef, n, min int) (units [][]*mrow, partial []bool) {
	gs := m.groupsOf(td)
	var chunks [][]*mrow
	for _, g := range gs {
		chunks = append(chunks, g.chunks...)
	}
	slices.SortFunc(chunks, func(a, b []*mrow) int { return a[0].id - b[0].id })
	chunks = chunks[:minInt(len(chunks), n/groupSize)]
	var due []*mgroup
	for _, g := range gs {
		if m.overdue(td, g) {
			due = append(due, g)
		}
	}
	slices.SortFunc(due, func(a, b *mgroup) int { return cmp.Or(cmp.Compare(a.born, b.born), strings.Compare(a.id, b.id)) })
	due = due[:minInt(len(due), n)]
	rows := 0
	for k, u := range append(slices.Clone(chunks), remainders(due)...) {
		if rows+len(u) > n {
			continue
		}
		units = append(units, u)
		partial = append(partial, k >= len(chunks))
		rows += len(u)
		if rows == n {
			break
		}
	}
	if rows < minInt(min, n/groupSize*groupSize) || rows == 0 {
		return nil, nil
	}
	return units, partial
}

func remainders(gs []*mgroup) [][]*mrow {
	out := make([][]*mrow, len(gs))
	for i, g := range gs {
		out[i] = g.rem
	}
	return out
}

// sameWaits compares the groups an engine listed with the model's, by
// id, Since left out.
func sameWaits(got, want []tq.GroupWait) bool {
	norm := func(ws []tq.GroupWait) string {
		ws = slices.Clone(ws)
		for i := range ws {
			ws[i].Since = time.Time{}
		}
		slices.SortFunc(ws, func(a, b tq.GroupWait) int { return strings.Compare(a.ID, b.ID) })
		return fmt.Sprintf("%+v", ws)
	}
	return norm(got) == norm(want)
}

// checkWaits compares the groups listed for task (got) with the model's,
// where the model knows what the engine learned.
func (r *runner) checkWaits(what, task string, got []tq.GroupWait) *divergence {
	td := r.tasks[task]
	if !td.groups {
		if len(got) > 0 {
			return diverge(what+": groups of a task without groups", "none", fmt.Sprintf("%+v", got))
		}
		return nil
	}
	var want []tq.GroupWait
	switch r.m.learned[task] {
	case gUnknown:
		return nil
	case gLearned:
		want = r.m.waits(td)
	}
	if !sameWaits(got, want) {
		return diverge(what+": waiting groups", fmt.Sprintf("%+v", want), fmt.Sprintf("%+v", got))
	}
	return nil
}

// stepStragglers compares Task.Stragglers: the overdue waiting groups.
func (r *runner) stepStragglers(op *mop) *divergence {
	ctx, cancel := r.ctx()
	defer cancel()
	got, err := r.handle(op.slot, op.task, 0).Stragglers(ctx)
	if d := wantErr(op.task+".Stragglers", err, "nil"); d != nil {
		return d
	}
	td := r.tasks[op.task]
	var want []tq.GroupWait
	switch r.m.learned[op.task] {
	case gUnknown:
		return nil
	case gLearned:
		for _, w := range r.m.waits(td) {
			if w.Overdue {
				want = append(want, w)
			}
		}
	}
	if !sameWaits(got, want) {
		return diverge(op.task+".Stragglers", fmt.Sprintf("%+v", want), fmt.Sprintf("%+v", got))
	}
	return nil
}

// waitFor is how long a call the model predicts blocks is given: short,
// and (with a clock) ending before any lease, delay or group deadline
// does; 0 when one is too close.
func (r *runner) waitFor() time.Duration {
	waited := 60 * time.Millisecond
	if r.clock {
		waited = 200 * time.Millisecond
		for dl := range r.m.deadlines() {
			if dl-r.m.now <= waited {
				waited = (dl - r.m.now) / 2
			}
		}
		if waited < time.Millisecond {
			return 0
		}
	}
	return waited
}

// oldestUnconsumed is the lowest "ver" among the rows some of tasks has
// still to consume (not acked, dropped or dead), +Inf for none.
func (m *model) oldestUnconsumed(tasks []string) float64 {
	oldest := math.Inf(1)
	for _, row := range m.sorted() {
		v, ok := number(row.tag["ver"])
		if !ok || v >= oldest {
			continue
		}
		for _, task := range tasks {
			if st, _ := m.seen(m.rec(task, row.id)); st != mAcked && st != mDropped && st != mDead {
				oldest = v
				break
			}
		}
	}
	return oldest
}

// stepPace runs Client.Pace: at once when no row the tasks have still to
// consume is older than v-k, else it waits until its context ends.
func (r *runner) stepPace(op *mop) *divergence {
	what := fmt.Sprintf("Pace(v %d, k %d, %q)", op.version, op.n, op.fields)
	free := r.m.oldestUnconsumed(op.fields) >= float64(op.version-int64(op.n))
	return r.blocking(op, what, free, func(ctx context.Context) error {
		return r.clients[op.slot].Pace(ctx, modelPartition, "ver", op.version, int64(op.n), op.fields...)
	})
}

// modelRatio is the Ratio of the histories' AwaitInsert and AwaitSample:
// a backlog of MinSize ± ErrorBuffer.
func modelRatio(op *mop) tq.Ratio {
	return tq.Ratio{SamplesPerInsert: 1, MinSize: int64(op.min), ErrorBuffer: float64(op.version)}
}

// stepRatio runs AwaitInsert or AwaitSample of op.n rows for op.task:
// at once when the counts allow it, else it waits until its context ends.
func (r *runner) stepRatio(op *mop) *divergence {
	if !r.m.countsKnown {
		op.note = "skipped" // the partition may have been forgotten, its counts with it
		return nil
	}
	rt := modelRatio(op)
	ins, smp, n := float64(r.m.inserted), float64(r.m.samples[op.task]), float64(op.n)
	floor := float64(rt.MinSize) * rt.SamplesPerInsert
	var free bool
	var call func(ctx context.Context) error
	if op.kind == "insert" {
		free = ins+n <= float64(rt.MinSize) || (ins+n)*rt.SamplesPerInsert-smp <= floor+rt.ErrorBuffer
		call = func(ctx context.Context) error {
			return r.clients[op.slot].AwaitInsert(ctx, modelPartition, op.task, rt, op.n)
		}
	} else {
		free = ins >= float64(rt.MinSize) && ins*rt.SamplesPerInsert-(smp+n) >= floor-rt.ErrorBuffer
		call = func(ctx context.Context) error {
			return r.clients[op.slot].AwaitSample(ctx, modelPartition, op.task, rt, op.n)
		}
	}
	what := fmt.Sprintf("Await%s(%s, %+v, %d) at %v inserts, %v samples", map[bool]string{true: "Insert", false: "Sample"}[op.kind == "insert"], op.task, rt, op.n, ins, smp)
	return r.blocking(op, what, free, call)
}

// blocking runs call, which the model predicts returns nil at once (free)
// or blocks until its context ends.
func (r *runner) blocking(op *mop, what string, free bool, call func(ctx context.Context) error) *divergence {
	if free {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return wantErr(what+" with nothing to wait for", call(ctx), "nil")
	}
	waited := r.waitFor()
	if waited == 0 {
		op.note = "skipped"
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), waited)
	defer cancel()
	err := call(ctx)
	op.note = fmt.Sprintf("waits: ends with its context after %v", waited)
	if r.clock {
		r.m.now += waited
	}
	return wantErr(what+" that must wait", err, "context.DeadlineExceeded")
}
