package rules

import (
	"maps"
	"math"
	"slices"
	"time"

	"github.com/google/btree"

	"github.com/tqgo/tqgo/backends/metadata"
)

// CountsOnly reports whether Partition.Summary answers req: counts
// (Counts), for any Fields, with no Progress (a digest of every row).
func CountsOnly(req *metadata.SummaryRequest) bool {
	return req.Counts && !req.Progress
}

// Summary returns what metadata.View.Summary(req) returns of a View of the
// partition as of now (or the partition's clock, if later), for a req
// CountsOnly accepts: its rows, capacity, counters and mark (Seq, Consumed)
// are the partition's, its times by the partition's clock. The first call
// indexes the committed rows by their set of fields (rows of one put share
// one) and, in each set, by when they became ready (row.since), counts
// every task's entries by state and, per set, those that keep its rows
// from being ready, and indexes each task's leased and dead entries;
// commits, deletes, field deletions and every change of an entry keep
// them after. A call then costs the tasks' leased rows (a lease that
// ended is seen as the next claim finds it) and the sets of fields, not
// the partition's rows, but for OldestReady: a task's look for its oldest
// ready row in a set of fields that has req.Fields passes over the set's
// rows not ready for it (leased, or consumed but not deleted yet) from
// where its last look stopped, or from the earliest row that became ready
// before that point since (an entry that went back, was reset or retried;
// a row committed late or that changed its fields), as Oldest passes over
// the rows below its answer. With Version, Summary.Oldest costs what
// Oldest does. It changes nothing but those indexes. The first call's
// pass over the rows holds the partition (its caller's lock), as does the
// first after a restore from a snapshot.
func (p *Partition) Summary(now int64, req metadata.SummaryRequest) metadata.Summary {
	now = max(now, p.now)
	if p.sum == nil {
		p.buildSummary()
	}
	s := metadata.Summary{Rows: p.committed, Fields: map[string]int{},
		Tasks: map[string]metadata.TaskSummary{}, Inserted: p.inserted,
		Mark: metadata.Mark{Seq: p.seq, Consumed: p.consumed}, Oldest: math.Inf(1)}
	s.Capacity, s.Used = p.Capacity()
	var oldest summaryKey
	var match []*fieldSet // the sets of fields that have every one of req.Fields
	for fs := range p.sum.all() {
		for _, f := range fs.names {
			s.Fields[f] += fs.rows
		}
		if k, ok := fs.bySince.Min(); ok && (oldest == summaryKey{} || lessSummaryKey(k, oldest)) {
			oldest = k
		}
		if fs.has(req.Fields) {
			match = append(match, fs)
		}
	}
	if oldest != (summaryKey{}) {
		s.OldestRow = time.UnixMicro(oldest.at)
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
	all := len(req.Fields) == 0
	for _, name := range tasks {
		ts := p.taskSummary(p.tasks[name], now, match, all)
		ts.Consumed = consumed[name]
		ts.Groups = groups[name]
		s.Tasks[name] = ts
	}
	if req.Version != "" {
		s.Oldest = p.Oldest(now, req.Version, req.Tasks)
	}
	return s
}

// summaryIndex is what Summary keeps of the committed rows, once asked:
// the rows by their set of fields. There are few sets: the rows of one
// put share one.
type summaryIndex struct {
	sets map[uint64]*fieldSet // by setHash of their names
	// last is the Fields map setOf was last given and lastSet its set:
	// rows of one put share their map, so a run of them is looked up
	// once.
	last    map[string]metadata.FieldInfo
	lastSet *fieldSet
}

// fieldSet is the committed rows that have one set of fields, exactly.
type fieldSet struct {
	names   []string // sorted
	hash    uint64
	next    *fieldSet // another set of the same hash
	rows    int
	bySince *btree.BTreeG[summaryKey] // the rows with a since, by it
}

// has reports whether the set has every one of fields.
func (fs *fieldSet) has(fields []string) bool {
	for _, f := range fields {
		if _, ok := slices.BinarySearch(fs.names, f); !ok {
			return false
		}
	}
	return true
}

// is reports whether fields are the set's names.
func (fs *fieldSet) is(fields map[string]metadata.FieldInfo) bool {
	if len(fields) != len(fs.names) {
		return false
	}
	for _, f := range fs.names {
		if _, ok := fields[f]; !ok {
			return false
		}
	}
	return true
}

// add counts row i, which became ready at since (0: unknown), in the set;
// remove takes it out.
func (fs *fieldSet) add(since int64, i uint64) {
	fs.rows++
	if since != 0 {
		fs.bySince.ReplaceOrInsert(summaryKey{since, i})
	}
}

func (fs *fieldSet) remove(since int64, i uint64) {
	fs.rows--
	if since != 0 {
		fs.bySince.Delete(summaryKey{since, i})
	}
}

// setHash is a hash of the names of fields, whatever their order.
func setHash(fields map[string]metadata.FieldInfo) uint64 {
	var h uint64
	for f := range fields {
		// FNV-1a of the name, summed: a sum does not depend on the order.
		n := uint64(14695981039346656037)
		for i := 0; i < len(f); i++ {
			n ^= uint64(f[i])
			n *= 1099511628211
		}
		h += n
	}
	return h
}

// setOf returns the set of the names of fields, made (with no rows) if
// there is none.
func (s *summaryIndex) setOf(fields map[string]metadata.FieldInfo) *fieldSet {
	if s.lastSet != nil && metadata.SameMap(fields, s.last) {
		return s.lastSet
	}
	h := setHash(fields)
	fs := s.sets[h]
	for fs != nil && !fs.is(fields) {
		fs = fs.next
	}
	if fs == nil {
		names := slices.Sorted(maps.Keys(fields))
		fs = &fieldSet{names: names, hash: h, next: s.sets[h], bySince: btree.NewG(32, lessSummaryKey)}
		s.sets[h] = fs
	}
	s.last, s.lastSet = fields, fs
	return fs
}

// all yields every set.
func (s *summaryIndex) all() func(yield func(*fieldSet) bool) {
	return func(yield func(*fieldSet) bool) {
		for _, fs := range s.sets {
			for ; fs != nil; fs = fs.next {
				if !yield(fs) {
					return
				}
			}
		}
	}
}

// dropSet forgets fs, which has no rows left, and every task's counts of
// it.
func (p *Partition) dropSet(fs *fieldSet) {
	s := p.sum
	if s.sets[fs.hash] == fs {
		if fs.next == nil {
			delete(s.sets, fs.hash)
		} else {
			s.sets[fs.hash] = fs.next
		}
	} else {
		for o := s.sets[fs.hash]; o != nil; o = o.next {
			if o.next == fs {
				o.next = fs.next
				break
			}
		}
	}
	if s.lastSet == fs {
		s.last, s.lastSet = nil, nil
	}
	for _, t := range p.tasks {
		if t.cnt != nil {
			delete(t.cnt.sets, fs)
		}
	}
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
	// sets are the task's counts of each set of fields (none: nothing
	// counted, no look made).
	sets map[*fieldSet]*setCounts
}

// setCounts is a task's counts of one set of fields' rows.
type setCounts struct {
	// held counts the set's rows whose entry keeps them from being ready
	// (held: Leased, Acked, Dead or Dropped, as stored).
	held int
	// skip is where a look for the set's oldest ready row starts its walk
	// of the set's rows (where the last one stopped): every row of the
	// set below it (by summaryKey of its since) has an entry held. A row
	// of the set below it that becomes ready otherwise than by its lease
	// ending (committed late, its entry Ready or forgotten, its fields
	// changed) moves it back to that row.
	skip summaryKey
}

func newEntryCounts() *entryCounts {
	return &entryCounts{leased: map[uint64]*entry{}, dead: btree.NewG(8, lessSummaryKey), sets: map[*fieldSet]*setCounts{}}
}

// of returns the task's counts of fs, made if it has none.
func (c *entryCounts) of(fs *fieldSet) *setCounts {
	sc := c.sets[fs]
	if sc == nil {
		sc = &setCounts{}
		c.sets[fs] = sc
	}
	return sc
}

// held reports whether e (nil: none) keeps its row from being ready, as
// stored: a Leased one may read as ready once its lease ended.
func held(e *entry) bool { return e != nil && e.state != metadata.Ready }

// lower moves the walk of the set's rows for a task back to k (a row of
// the set that may be ready), if it starts above it.
func (sc *setCounts) lower(k summaryKey) {
	if lessSummaryKey(k, sc.skip) {
		sc.skip = k
	}
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
	s := &summaryIndex{sets: map[uint64]*fieldSet{}}
	rows := p.List()
	// By index, the order rows mostly became ready in (the B-trees take
	// them at the least cost), and put in (runs of rows share a map).
	for _, mr := range rows {
		s.setOf(mr.Fields).add(p.byIndex[mr.Index].since, mr.Index)
	}
	p.sum = s
	for _, t := range p.tasks {
		c := newEntryCounts()
		t.cnt = c
		if len(t.entries) < len(rows)/8 {
			// Few entries: each finds its row's set.
			for i, e := range t.entries {
				c.count(i, e, 1)
				if r := p.byIndex[i]; r != nil && held(e) {
					c.of(s.setOf(r.view.Fields)).held++
				}
			}
			continue
		}
		// Many: by the rows (every entry is of a committed row), whose
		// runs share a set.
		var fs *fieldSet
		var sc *setCounts
		for _, mr := range rows {
			e := t.entries[mr.Index]
			if e == nil {
				continue
			}
			c.count(mr.Index, e, 1)
			if held(e) {
				if f := s.setOf(mr.Fields); f != fs {
					fs, sc = f, c.of(f)
				}
				sc.held++
			}
		}
	}
}

// removedRow keeps Summary's index in step with committed row r being
// deleted (its entries go after it left p.byIndex: see noted).
func (p *Partition) removedRow(r *row) {
	s := p.sum
	if s == nil {
		return
	}
	fs := s.setOf(r.view.Fields)
	for _, t := range p.tasks {
		if t.cnt != nil && held(t.entries[r.index]) {
			t.cnt.of(fs).held--
		}
	}
	fs.remove(r.since, r.index)
	if fs.rows == 0 {
		p.dropSet(fs)
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
	to := s.setOf(r.view.Fields)
	k := summaryKey{r.since, r.index}
	if old == nil {
		// No task has an entry of a row not committed before.
		to.add(r.since, r.index)
		// Ready: below a skip when prepared before rows committed at the
		// same time.
		for _, t := range p.tasks {
			if t.cnt != nil {
				if sc := t.cnt.sets[to]; sc != nil {
					sc.lower(k)
				}
			}
		}
		return
	}
	from := s.setOf(old.Fields)
	if from == to && since == r.since {
		return
	}
	for _, t := range p.tasks {
		c := t.cnt
		if c == nil {
			continue
		}
		e := t.entries[r.index]
		switch {
		case !held(e):
			// Ready in its new set, maybe below the skip there (it
			// became ready at the same time as rows of the set above it,
			// or earlier: it lost a field).
			if sc := c.sets[to]; sc != nil {
				sc.lower(k)
			}
		case from != to:
			c.of(from).held--
			c.of(to).held++
		}
	}
	from.remove(since, r.index)
	to.add(r.since, r.index)
	if from.rows == 0 {
		p.dropSet(from)
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
	// A row ready before and after was not below the skip of its set,
	// and is not.
	was, is := held(old), held(e)
	if was == is {
		return
	}
	r := p.byIndex[i]
	if r == nil {
		return // being deleted: removedRow counted it out
	}
	sc := t.cnt.of(p.sum.setOf(r.view.Fields))
	if is {
		sc.held++
		return
	}
	sc.held--
	sc.lower(summaryKey{r.since, i})
}

// taskSummary is the counts of t (nil: a task with no state) as of now:
// View.Summary's countStates, from t's counts, its running leases and its
// oldest rows; match are the sets of fields that have every field the
// summary names (all: it names none), whose rows are Ready, the others'
// Waiting.
func (p *Partition) taskSummary(t *task, now int64, match []*fieldSet, all bool) metadata.TaskSummary {
	var ts metadata.TaskSummary
	if t == nil {
		var oldest summaryKey
		for _, fs := range match {
			ts.Ready += fs.rows
			if k, ok := fs.bySince.Min(); ok && (oldest == summaryKey{} || lessSummaryKey(k, oldest)) {
				oldest = k
			}
		}
		ts.Waiting = p.committed - ts.Ready
		if oldest != (summaryKey{}) {
			ts.OldestReady = time.UnixMicro(oldest.at)
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
	// ended is the oldest row of match whose lease ended ready, and
	// endedReady counts those rows.
	var ended summaryKey
	endedReady := 0
	var in map[*fieldSet]bool // match, unless all
	if !all {
		in = make(map[*fieldSet]bool, len(match))
		for _, fs := range match {
			in[fs] = true
		}
	}
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
			r := p.byIndex[i]
			if r == nil || !all && !in[p.sum.setOf(r.view.Fields)] {
				break
			}
			endedReady++
			if k := (summaryKey{r.since, i}); r.since != 0 && (ended == summaryKey{} || lessSummaryKey(k, ended)) {
				ended = k
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
	for token, l := range leases {
		ls := metadata.LeaseSummary{Holder: metadata.HolderOf(token), Rows: l.rows, Until: time.UnixMicro(l.until),
			Deliveries: l.deliveries, ID: metadata.LeaseID(token)}
		if l.granted != 0 {
			ls.Granted = time.UnixMicro(l.granted)
		}
		ts.Leases = append(ts.Leases, ls)
	}
	metadata.SortLeases(ts.Leases)
	// The rows of match with no entry held are ready, and those whose
	// lease ended; the other rows in neither state are waiting.
	ts.Ready = endedReady
	for _, fs := range match {
		ts.Ready += fs.rows
		if sc := c.sets[fs]; sc != nil {
			ts.Ready -= sc.held
		}
	}
	ts.Waiting = p.committed - ts.Leased - ts.Acked - ts.Dead - ts.Dropped - ts.Ready
	if ts.Ready == 0 {
		return ts
	}
	oldest := ended // the rows whose lease ended, wherever they are
	for _, fs := range match {
		sc := c.sets[fs]
		if sc != nil && sc.held == fs.rows {
			continue // none ready but by a lease that ended
		}
		if sc == nil {
			sc = c.of(fs)
		}
		// The rows of fs below sc.skip are held: from it, the first row
		// ready.
		found, walked := false, false
		var next summaryKey
		fs.bySince.AscendGreaterOrEqual(sc.skip, func(k summaryKey) bool {
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
			sc.skip = next
		}
		if found && (oldest == summaryKey{} || lessSummaryKey(next, oldest)) {
			oldest = next
		}
	}
	if oldest != (summaryKey{}) {
		ts.OldestReady = time.UnixMicro(oldest.at)
	}
	return ts
}
