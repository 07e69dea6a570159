package rules

import (
	"math"
	"time"

	"github.com/google/btree"

	"github.com/tqgo/tqgo/backends/metadata"
)

// CountsOnly reports whether Partition.Summary answers req: counts
// (Counts) with no Fields and no Progress.
func CountsOnly(req *metadata.SummaryRequest) bool {
	return req.Counts && len(req.Fields) == 0 && !req.Progress
}

// Summary returns what metadata.View.Summary(req) returns of a View of the
// partition as of now (or the partition's clock, if later), for a req
// CountsOnly accepts: its rows, capacity, counters and mark (Seq, Consumed)
// are the partition's, its times by the partition's clock. The first call
// indexes the committed rows by when they became ready (row.since), counts
// the rows per field and every task's entries by state, and indexes each
// task's leased and dead entries; commits, deletes and every change of an
// entry keep them after. A call then costs the tasks' leased rows (a lease
// that ended is seen as the next claim finds it), not the partition's
// rows, but for OldestReady: a task's look for its oldest ready row passes
// over the rows not ready for it (leased, or consumed but not deleted
// yet) from where its last look stopped, or from the earliest row that
// became ready before that point since (an entry that went back, was
// reset or retried; a row committed late), as Oldest passes over the rows
// below its answer. With Version, Summary.Oldest costs what Oldest does.
// It changes nothing but those indexes. The first call's pass over the
// rows holds the partition (its caller's lock), as does the first after a
// restore from a snapshot.
func (p *Partition) Summary(now int64, req metadata.SummaryRequest) metadata.Summary {
	now = max(now, p.now)
	if p.sum == nil {
		p.buildSummary()
	}
	s := metadata.Summary{Rows: p.committed, Fields: make(map[string]int, len(p.sum.fields)),
		Tasks: map[string]metadata.TaskSummary{}, Inserted: p.inserted,
		Mark: metadata.Mark{Seq: p.seq, Consumed: p.consumed}, Oldest: math.Inf(1)}
	s.Capacity, s.Used = p.Capacity()
	for f, n := range p.sum.fields {
		s.Fields[f] = n
	}
	if k, ok := p.sum.bySince.Min(); ok {
		s.OldestRow = time.UnixMicro(k.at)
	}
	_, consumed := p.Counts(req.Tasks...)
	groups := p.GroupWaits(now, req.Tasks...)
	tasks := req.Tasks
	if len(tasks) == 0 {
		withState := func(yield func(string) bool) {
			for name, t := range p.tasks {
				if len(t.entries) > 0 && !yield(name) {
					return
				}
			}
		}
		tasks = metadata.SummaryTasks(withState, groups, consumed)
	}
	for _, name := range tasks {
		ts := p.taskSummary(p.tasks[name], now)
		ts.Consumed = consumed[name]
		ts.Groups = groups[name]
		s.Tasks[name] = ts
	}
	if req.Version != "" {
		s.Oldest = p.Oldest(now, req.Version, req.Tasks)
	}
	return s
}

// summaryIndex is what Summary keeps of the committed rows, once asked.
type summaryIndex struct {
	fields  map[string]int            // the committed rows that have each field
	bySince *btree.BTreeG[summaryKey] // the committed rows with a since, by it
}

// summaryKey orders rows by a time (since, or a dead row's At), then by
// index.
type summaryKey struct {
	at int64
	i  uint64
}

func lessSummaryKey(a, b summaryKey) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.i < b.i
}

// entryCounts counts a task's entries as they are stored (before seen:
// a lease that ended is still Leased here, and Summary looks at each).
type entryCounts struct {
	states [metadata.Dropped + 1]int
	// redelivered counts the Ready entries with a delivery and the Leased
	// ones with more than one; deadLeaseEnded the Dead ones whose reason is
	// metadata.ReasonLeaseEnded.
	redelivered, deadLeaseEnded int
	leased                      map[uint64]*entry         // the Leased entries
	dead                        *btree.BTreeG[summaryKey] // the Dead ones, by deadKey
	// skip is where a look for the oldest ready row starts its walk of
	// Partition.sum's rows (where the last one stopped): every row below
	// it (by summaryKey of its since) has an entry Leased, Acked, Dead or
	// Dropped. A row below it that becomes ready otherwise than by its
	// lease ending (committed late, its entry Ready or forgotten) moves it
	// back to that row.
	skip summaryKey
}

func newEntryCounts() *entryCounts {
	return &entryCounts{leased: map[uint64]*entry{}, dead: btree.NewG(8, lessSummaryKey)}
}

// deadKey orders dead rows as TaskSummary.LastDead does: by At (none
// first), then by index.
func deadKey(i uint64, e *entry) summaryKey {
	if e.reason == "" {
		return summaryKey{math.MinInt64, i}
	}
	return summaryKey{e.at, i}
}

// count adds (d 1) or takes out (d -1) entry e of row i.
func (c *entryCounts) count(i uint64, e *entry, d int) {
	c.states[e.state] += d
	switch e.state {
	case metadata.Ready:
		if e.deliveries > 0 {
			c.redelivered += d
		}
	case metadata.Leased:
		if e.deliveries > 1 {
			c.redelivered += d
		}
		if d > 0 {
			c.leased[i] = e
		} else {
			delete(c.leased, i)
		}
	case metadata.Dead:
		if e.reason == metadata.ReasonLeaseEnded {
			c.deadLeaseEnded += d
		}
		if d > 0 {
			c.dead.ReplaceOrInsert(deadKey(i, e))
		} else {
			c.dead.Delete(deadKey(i, e))
		}
	}
}

// buildSummary indexes the partition for Summary.
func (p *Partition) buildSummary() {
	s := &summaryIndex{fields: map[string]int{}, bySince: btree.NewG(32, lessSummaryKey)}
	rows := p.List()
	metadata.CountFields(rows, s.fields)
	// By index, the order rows mostly became ready in (the B-tree takes
	// them at the least cost).
	for _, mr := range rows {
		if r := p.byIndex[mr.Index]; r.since != 0 {
			s.bySince.ReplaceOrInsert(summaryKey{r.since, r.index})
		}
	}
	p.sum = s
	for _, t := range p.tasks {
		t.cnt = newEntryCounts()
		for i, e := range t.entries {
			t.cnt.count(i, e, 1)
		}
	}
}

func (s *summaryIndex) add(r *row) {
	for f := range r.view.Fields {
		s.fields[f]++
	}
	if r.since != 0 {
		s.bySince.ReplaceOrInsert(summaryKey{r.since, r.index})
	}
}

// removedRow keeps Summary's index in step with committed row r being
// deleted.
func (p *Partition) removedRow(r *row) {
	s := p.sum
	if s == nil {
		return
	}
	for f := range r.view.Fields {
		s.uncount(f)
	}
	s.bySince.Delete(summaryKey{r.since, r.index})
}

func (s *summaryIndex) uncount(f string) {
	if s.fields[f]--; s.fields[f] <= 0 {
		delete(s.fields, f)
	}
}

// committedSummary keeps Summary's index in step with row r committed
// anew (old nil), updated, or left with fewer fields (DeleteFields);
// since was its since before.
func (p *Partition) committedSummary(r *row, old *metadata.Row, since int64) {
	s := p.sum
	if s == nil {
		return
	}
	if old == nil {
		s.add(r)
		// Ready: below a skip when prepared before rows committed at the
		// same time.
		p.unskip(summaryKey{r.since, r.index})
		return
	}
	if !metadata.SameMap(old.Fields, r.view.Fields) {
		for f := range old.Fields {
			if _, ok := r.view.Fields[f]; !ok {
				s.uncount(f)
			}
		}
		for f := range r.view.Fields {
			if _, ok := old.Fields[f]; !ok {
				s.fields[f]++
			}
		}
	}
	if since != r.since {
		// Moved up to now, it stays on its side of every task's skip:
		// one below it was not ready and is not, one at or above it was
		// and is.
		s.bySince.Delete(summaryKey{since, r.index})
		if r.since != 0 {
			s.bySince.ReplaceOrInsert(summaryKey{r.since, r.index})
		}
	}
}

// unskip has the tasks whose look for the oldest ready row would skip
// row k, ready, start from it.
func (p *Partition) unskip(k summaryKey) {
	for _, t := range p.tasks {
		if t.cnt != nil && lessSummaryKey(k, t.cnt.skip) {
			t.cnt.skip = k
		}
	}
}

// noted keeps t's counts in step with row i's entry, which was old and is
// e now (nil: none). old must not be e modified in place: a copy.
func (p *Partition) noted(t *task, i uint64, old, e *entry) {
	c := t.cnt
	if c == nil {
		return
	}
	if old != nil {
		c.count(i, old, -1)
	}
	if e != nil {
		c.count(i, e, 1)
	}
	if (e == nil || e.state == metadata.Ready) && c.skip != (summaryKey{}) {
		if r := p.byIndex[i]; r != nil && lessSummaryKey(summaryKey{r.since, i}, c.skip) {
			c.skip = summaryKey{r.since, i}
		}
	}
}

// taskSummary is the counts of t (nil: a task with no state) as of now:
// View.Summary's countStates with no fields, from t's counts, its running
// leases and its oldest rows.
func (p *Partition) taskSummary(t *task, now int64) metadata.TaskSummary {
	var ts metadata.TaskSummary
	if t == nil {
		ts.Ready = p.committed
		if k, ok := p.sum.bySince.Min(); ok {
			ts.OldestReady = time.UnixMicro(k.at)
		}
		return ts
	}
	c := t.cnt
	ts.Acked, ts.Dead, ts.Dropped = c.states[metadata.Acked], c.states[metadata.Dead], c.states[metadata.Dropped]
	ts.Redelivered, ts.DeadLeaseEnded = c.redelivered, c.deadLeaseEnded
	var last *metadata.DeadSummary
	lastKey, haveLast := c.dead.Max()
	type lease struct {
		rows, deliveries int
		until, granted   int64 // the earliest (a grant time 0: none, the earliest)
	}
	leases := map[string]*lease{}
	var ended summaryKey // the oldest row below c.skip whose lease ended ready
	for i, e := range c.leased {
		if e.deliveries > 1 {
			ts.Redelivered-- // counted again as it reads now
		}
		s := e.seen(now)
		switch s.state {
		case metadata.Leased:
			ts.Leased++
			if s.deliveries > 1 {
				ts.Redelivered++
			}
			l := leases[e.lease]
			if l == nil {
				l = &lease{until: e.until, granted: e.granted}
				leases[e.lease] = l
			}
			l.rows++
			l.deliveries = max(l.deliveries, e.deliveries)
			l.until, l.granted = min(l.until, e.until), min(l.granted, e.granted)
		case metadata.Ready: // its lease ended
			if s.deliveries > 0 {
				ts.Redelivered++
			}
			if r := p.byIndex[i]; r != nil && r.since != 0 {
				if k := (summaryKey{r.since, i}); lessSummaryKey(k, c.skip) && (ended == summaryKey{} || lessSummaryKey(k, ended)) {
					ended = k
				}
			}
		case metadata.Dead: // its lease ended, its last delivery
			ts.Dead++
			ts.DeadLeaseEnded++ // s.reason is metadata.ReasonLeaseEnded
			if k := deadKey(i, &s); !haveLast || lessSummaryKey(lastKey, k) {
				lastKey, haveLast = k, true
			}
		}
	}
	if haveLast {
		i := lastKey.i
		s := t.entries[i].seen(now)
		last = &metadata.DeadSummary{Index: i, Deliveries: s.deliveries, Reason: s.reason}
		if r := p.byIndex[i]; r != nil {
			last.Key = r.view.Key
		}
		if s.reason != "" {
			last.At = time.UnixMicro(s.at)
		}
	}
	ts.LastDead = last
	ts.Ready = p.committed - ts.Leased - ts.Acked - ts.Dead - ts.Dropped
	for token, l := range leases {
		ls := metadata.LeaseSummary{Holder: metadata.HolderOf(token), Rows: l.rows, Until: time.UnixMicro(l.until),
			Deliveries: l.deliveries, ID: metadata.LeaseID(token)}
		if l.granted != 0 {
			ls.Granted = time.UnixMicro(l.granted)
		}
		ts.Leases = append(ts.Leases, ls)
	}
	metadata.SortLeases(ts.Leases)
	if ts.Ready > 0 {
		// The rows below c.skip are ready only as their lease ended
		// (ended); from it, the first row ready.
		found, walked := false, false
		var next summaryKey
		p.sum.bySince.AscendGreaterOrEqual(c.skip, func(k summaryKey) bool {
			walked, next = true, k
			e := t.entries[k.i]
			if e == nil || e.seen(now).state == metadata.Ready {
				found = true
				return false
			}
			return true
		})
		if walked && !found {
			next.i++ // past every row: the next one committed is above it
		}
		if walked {
			c.skip = next
		}
		oldest := ended
		if found && (ended == summaryKey{} || lessSummaryKey(next, ended)) {
			oldest = next
		}
		if oldest != (summaryKey{}) {
			ts.OldestReady = time.UnixMicro(oldest.at)
		}
	}
	return ts
}
