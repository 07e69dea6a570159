package metadata

import (
	"context"
	"encoding/binary"
	"hash/fnv"
	"iter"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Summarizer is an optional interface of a MetaStore that summarizes a
// partition where its rows are, so that what reaches the caller grows
// with the partition's tasks and leases, not with its rows (a tq server's
// clients: a status, a paced producer's look).
type Summarizer interface {
	// Summarize returns what View(partition, req.Tasks...).Summary(req)
	// would, as of one moment. Errors as View's; a malformed req (see
	// SummaryRequest.Check) fails with backends.ErrInvalid.
	Summarize(ctx context.Context, partition string, req SummaryRequest) (Summary, error)
}

// Summarize returns the Summary of req of partition through q: in one
// request where the rows are when q is a Summarizer, else from q's View.
func Summarize(ctx context.Context, q Queue, partition string, req SummaryRequest) (Summary, error) {
	if s, ok := q.(Summarizer); ok {
		return s.Summarize(ctx, partition, req)
	}
	if err := req.Check(); err != nil {
		return Summary{}, err
	}
	v, err := q.View(ctx, partition, req.Tasks...)
	if err != nil {
		return Summary{}, err
	}
	return v.Summary(req), nil
}

// SummaryRequest says what a Summary holds.
type SummaryRequest struct {
	// Tasks are the tasks summarized. None: every task with state in the
	// partition (View's), every task claiming groups some of which wait,
	// and every task that consumed rows since cleared (a Consumed count).
	Tasks []string
	// Fields are the fields the tasks wait for: a row in no other state
	// that lacks one is Waiting, not Ready. None: every such row is Ready.
	Fields []string
	// Counts asks for the counts that take a pass over the rows:
	// Summary.Fields and OldestRow, and each task's counts by state,
	// Leases and OldestReady. Without it a Summary holds Rows, the
	// partition's counters and each task's Consumed and Groups.
	Counts bool
	// Version, if set, asks for Summary.Oldest over the tag of that name.
	// It needs Tasks.
	Version string
	// Progress asks for each task's Progress and Missing (a Wait's look
	// for a stall).
	Progress bool
}

// Check reports a malformed request with an error wrapping
// backends.ErrInvalid.
func (r *SummaryRequest) Check() error {
	for _, t := range r.Tasks {
		if t == "" {
			return invalidf("summary: empty task name")
		}
	}
	for _, f := range r.Fields {
		if !ValidName(f, MaxFieldName) {
			return invalidf("summary: field name %q (want 1-%d bytes of [A-Za-z0-9_.:/-])", f, MaxFieldName)
		}
	}
	if r.Version != "" && len(r.Tasks) == 0 {
		return invalidf("summary: version tag %q without tasks", r.Version)
	}
	return nil
}

// Needs says what of a View the Summary of r reads, besides the number
// of its rows, its counters, capacity, mark and groups: rows, its Rows
// themselves (a pass over them); since, its Since; deliveries, its Tasks.
// A Summarizer may build a View without the others.
func (r *SummaryRequest) Needs() (rows, since, deliveries bool) {
	rows = r.Counts || r.Progress || r.Version != ""
	return rows, r.Counts, rows || len(r.Tasks) == 0
}

// SummaryHeld is v.Summary(req) for a store that made v under a lock
// unlock releases: with no pass over the rows, under the lock (v's maps
// are the store's); with one, on a copy of v's row list after the lock
// (the rows themselves are read-only). It releases the lock either way.
func SummaryHeld(v View, req SummaryRequest, unlock func()) Summary {
	if rows, _, _ := req.Needs(); !rows {
		defer unlock()
		return v.Summary(req)
	}
	v.Rows = slices.Clone(v.Rows)
	unlock()
	return v.Summary(req)
}

// SummaryIndexed is SummaryHeld for a store whose state answers
// Summary.Oldest itself, from an index (oldest, called under the lock),
// and knows its number of committed rows (rows): view builds the View of
// what else req asks (rows: its Rows; since and deliveries: see Needs),
// with no Rows when nothing else needs them, so that a paced producer's
// look (Tasks and Version) costs what the partition's tasks hold, not its
// rows. The caller holds the lock unlock releases.
func SummaryIndexed(req SummaryRequest, oldest func(tag string, tasks []string) float64, rows int,
	view func(rows, since, deliveries bool) View, unlock func()) Summary {
	version := req.Version
	req.Version = ""
	o := math.Inf(1)
	if version != "" {
		o = oldest(version, req.Tasks)
	}
	needRows, since, deliveries := req.Needs()
	s := SummaryHeld(view(needRows, since, deliveries), req, unlock)
	if !needRows {
		s.Rows = rows
	}
	s.Oldest = o
	return s
}

// Summary is a partition's rows counted for its tasks, as of one moment:
// what a status, a paced producer and a rate limiter read of it.
type Summary struct {
	Rows int // committed rows
	// Fields counts the rows that have each field, and OldestRow is when
	// the row that became ready longest ago did (its last commit adding a
	// field, as a time of this process; zero with no row, or a store that
	// does not tell). Counts only.
	Fields    map[string]int
	OldestRow time.Time
	// Tasks are the tasks of SummaryRequest.Tasks (see there for none
	// named).
	Tasks map[string]TaskSummary
	// Capacity, Used, Inserted and Mark are View's.
	Capacity Capacity
	Used     Usage
	Inserted uint64
	Mark     Mark
	// Oldest is, with SummaryRequest.Version, the lowest number in that
	// tag among the rows some of the tasks has still to consume (not
	// acknowledged, dropped or dead); +Inf with none, or no Version. A
	// value that is not a number (see TagNumber) counts as none.
	Oldest float64
}

// TaskSummary counts a task's rows by state. A lease that ended is
// counted as the next claim will find it (ready, or dead).
type TaskSummary struct {
	// The counts by state (Counts only). A row with no state is Ready,
	// or Waiting when it lacks one of SummaryRequest.Fields.
	Ready, Waiting, Leased, Acked, Dead, Dropped int
	// Redelivered counts the rows ready or leased that were delivered
	// before without an ack (Counts only).
	Redelivered int
	// DeadLeaseEnded counts the Dead rows whose last lease ended unsettled
	// (Reason ReasonLeaseEnded: a consumer too slow, or gone); the others
	// died of an error (a nack's reason, a handler's) or of none given.
	// LastDead is the Dead row that died last (the latest At; among rows
	// without one, the highest index), nil with none (Counts only).
	DeadLeaseEnded int
	LastDead       *DeadSummary
	// Leases are the running leases, earliest end first (Counts only).
	Leases []LeaseSummary
	// OldestReady is when the oldest of the Ready rows became ready (see
	// Summary.OldestRow; Counts only).
	OldestReady time.Time
	// Consumed is View.Consumed's count of the task, and Groups
	// View.Groups' groups of it.
	Consumed uint64
	Groups   []GroupWait
	// Progress sums up what a waiter counts as progress: the rows and
	// their fields, and the task's states and leases. Two Summaries with
	// the same Progress (but for a digest's collisions) saw none between
	// them. Missing counts, for each of SummaryRequest.Fields, the rows
	// the task has not acknowledged or dropped that lack it. Progress
	// only.
	Progress uint64
	Missing  map[string]int
}

// DeadSummary is one dead row of a task and why it died.
type DeadSummary struct {
	Key        string
	Index      uint64
	Deliveries int
	Reason     string    // Delivery.Reason: its last error, "" for none
	At         time.Time // when, as Delivery.At
}

// LeaseSummary is one running lease of a task.
type LeaseSummary struct {
	Holder string // the ClaimRequest.Holder of its claim
	Rows   int
	// Until is when the lease of its first rows ends, and Granted when
	// its claim leased its rows, as times of this process.
	Until   time.Time
	Granted time.Time
	// Deliveries is the highest delivery count among its rows.
	Deliveries int
	// ID is LeaseID of its token.
	ID string
}

// LeaseID names a lease without revealing its token (which settles its
// rows): a digest, the same for one token wherever it is taken.
func LeaseID(token string) string {
	h := fnv.New64a()
	h.Write([]byte(token))
	return strconv.FormatUint(h.Sum64(), 16)
}

// TagNumber returns a tag value as a number: an int64, a uint64 or a
// float64 that is not NaN; false for any other value.
func TagNumber(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case uint64:
		return float64(x), true
	case float64:
		return x, !math.IsNaN(x)
	}
	return 0, false
}

// Summary computes req's Summary of the view, a view of req.Tasks (every
// task when none is named). It defines every Summary: a Summarizer
// computes it from a View where the rows are, or from counts it keeps
// that answer alike.
func (v *View) Summary(req SummaryRequest) Summary {
	s := Summary{Rows: len(v.Rows), Fields: map[string]int{}, Tasks: map[string]TaskSummary{},
		Capacity: v.Capacity, Used: v.Used, Inserted: v.Inserted, Mark: v.Mark, Oldest: math.Inf(1)}
	if req.Counts {
		CountFields(v.Rows, s.Fields)
		for i := range v.Rows {
			if t := v.since(i); !t.IsZero() && (s.OldestRow.IsZero() || t.Before(s.OldestRow)) {
				s.OldestRow = t
			}
		}
	}
	tasks := req.Tasks
	if len(tasks) == 0 {
		tasks = SummaryTasks(maps.Keys(v.Tasks), v.Groups, v.Consumed)
	}
	for _, task := range tasks {
		var ts TaskSummary
		if req.Counts {
			ts = v.countStates(v.Tasks[task], req.Fields)
		}
		ts.Consumed = v.Consumed[task]
		ts.Groups = v.Groups[task]
		if req.Progress {
			ts.Progress = v.progress(task)
			ts.Missing = v.missing(task, req.Fields)
		}
		s.Tasks[task] = ts
	}
	if req.Version != "" {
		s.Oldest = v.oldestUnconsumed(req.Version, req.Tasks)
	}
	return s
}

// CountFields adds to fields, for each field, the rows that have it.
// Rows share their maps (see Merger): each run of rows of one map is
// counted at once.
func CountFields(rows []*Row, fields map[string]int) {
	var run map[string]FieldInfo
	n := 0
	for _, r := range rows {
		if n > 0 && SameMap(r.Fields, run) {
			n++
			continue
		}
		for f := range run {
			fields[f] += n
		}
		run, n = r.Fields, 1
	}
	for f := range run {
		fields[f] += n
	}
}

// SummaryTasks lists the tasks a Summary that names none holds: the
// tasks with state (withState), every task claiming groups some of which
// wait (a group task that has leased nothing yet waits on its groups),
// and every task that consumed rows since cleared (it keeps its count).
func SummaryTasks(withState iter.Seq[string], groups map[string][]GroupWait, consumed map[string]uint64) []string {
	var tasks []string
	seen := map[string]bool{}
	add := func(task string, listed bool) {
		if listed && !seen[task] {
			seen[task] = true
			tasks = append(tasks, task)
		}
	}
	for task := range withState {
		add(task, true)
	}
	for task, gs := range groups {
		add(task, len(gs) > 0)
	}
	for task, n := range consumed {
		add(task, n > 0)
	}
	return tasks
}

// since is when row i became ready (see View.Since), zero if unknown.
func (v *View) since(i int) time.Time {
	if i < len(v.Since) {
		return v.Since[i]
	}
	return time.Time{}
}

// countStates counts the rows by their state in ds; a row with no state
// is Ready, or Waiting when it lacks one of fields.
func (v *View) countStates(ds []Delivery, fields []string) TaskSummary {
	byIndex := make(map[uint64]*Delivery, len(ds))
	for i := range ds {
		byIndex[ds[i].Index] = &ds[i]
	}
	var ts TaskSummary
	leases := map[string]*LeaseSummary{}
	var last map[string]FieldInfo // the map whose fields has tells
	has, seen := false, false
	for i, r := range v.Rows {
		s := Ready
		d := byIndex[r.Index]
		if d != nil {
			s = d.State
		}
		switch s {
		case Ready:
			if !seen || !SameMap(r.Fields, last) {
				last, has, seen = r.Fields, hasFields(r, fields), true
			}
			if has {
				ts.Ready++
				if t := v.since(i); !t.IsZero() && (ts.OldestReady.IsZero() || t.Before(ts.OldestReady)) {
					ts.OldestReady = t
				}
			} else {
				ts.Waiting++
			}
			if d != nil && d.Deliveries > 0 {
				ts.Redelivered++
			}
		case Leased:
			ts.Leased++
			if d.Deliveries > 1 {
				ts.Redelivered++
			}
			l := leases[d.Lease]
			if l == nil {
				l = &LeaseSummary{Holder: d.Holder, Until: d.Until, Granted: d.Granted, ID: LeaseID(d.Lease)}
				leases[d.Lease] = l
			}
			l.Rows++
			l.Deliveries = max(l.Deliveries, d.Deliveries)
			if d.Until.Before(l.Until) {
				l.Until = d.Until
			}
			if d.Granted.Before(l.Granted) {
				l.Granted = d.Granted
			}
		case Acked:
			ts.Acked++
		case Dead:
			ts.Dead++
			if d.Reason == ReasonLeaseEnded {
				ts.DeadLeaseEnded++
			}
			if l := ts.LastDead; l == nil || d.At.After(l.At) || d.At.Equal(l.At) && d.Index > l.Index {
				ts.LastDead = &DeadSummary{Key: r.Key, Index: d.Index, Deliveries: d.Deliveries, Reason: d.Reason, At: d.At}
			}
		case Dropped:
			ts.Dropped++
		}
	}
	for _, l := range leases {
		ts.Leases = append(ts.Leases, *l)
	}
	SortLeases(ts.Leases)
	return ts
}

// SortLeases puts leases in a TaskSummary's order: earliest end first,
// then by holder and ID.
func SortLeases(leases []LeaseSummary) {
	slices.SortFunc(leases, func(a, b LeaseSummary) int {
		if c := a.Until.Compare(b.Until); c != 0 {
			return c
		}
		if c := strings.Compare(a.Holder, b.Holder); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

func hasFields(r *Row, fields []string) bool {
	for _, f := range fields {
		if _, ok := r.Fields[f]; !ok {
			return false
		}
	}
	return true
}

// progress is TaskSummary.Progress of task.
func (v *View) progress(task string) uint64 {
	h := fnv.New64a()
	var b []byte
	for _, r := range v.Rows {
		b = binary.LittleEndian.AppendUint64(b[:0], r.Index)
		b = binary.LittleEndian.AppendUint64(b, uint64(len(r.Fields)))
		h.Write(b)
	}
	for _, d := range v.Tasks[task] {
		b = binary.LittleEndian.AppendUint64(b[:0], d.Index)
		b = append(b, byte(d.State))
		b = binary.LittleEndian.AppendUint64(b, uint64(d.Deliveries))
		// Coarse: a store with a server moves its times with the clock
		// skew it measures at each request; a lease extended moves by
		// more.
		b = binary.LittleEndian.AppendUint64(b, uint64(d.Until.UnixMilli()/250))
		h.Write(b)
	}
	return h.Sum64()
}

// missing is TaskSummary.Missing of task.
func (v *View) missing(task string, fields []string) map[string]int {
	done := map[uint64]bool{}
	for _, d := range v.Tasks[task] {
		if d.State == Acked || d.State == Dropped {
			done[d.Index] = true
		}
	}
	out := map[string]int{}
	for _, r := range v.Rows {
		if done[r.Index] {
			continue
		}
		for _, f := range fields {
			if _, ok := r.Fields[f]; !ok {
				out[f]++
			}
		}
	}
	return out
}

// oldestUnconsumed is Summary.Oldest.
func (v *View) oldestUnconsumed(versionTag string, tasks []string) float64 {
	oldest := math.Inf(1)
	done := make([]map[uint64]bool, len(tasks))
	for i, t := range tasks {
		done[i] = map[uint64]bool{}
		for _, d := range v.Tasks[t] {
			if d.State == Acked || d.State == Dropped || d.State == Dead {
				done[i][d.Index] = true
			}
		}
	}
	for _, r := range v.Rows {
		ver, ok := TagNumber(r.Tag[versionTag])
		if !ok || ver >= oldest {
			continue
		}
		for i := range tasks {
			if !done[i][r.Index] {
				oldest = ver
				break
			}
		}
	}
	return oldest
}
