package rules

import (
	"container/heap"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/btree"

	"github.com/tqgo/tqgo/backends/metadata"
)

// Consumption: for each task, which rows it was delivered, which are
// leased to whom until when, which are acknowledged (metadata.Queue's
// rules). Each task keeps the rows it may be given now in an ordered
// index, updated as rows become ready (a commit that completes the
// task's fields, a Nack, a lease or delay ending, a Reset) and as they
// stop being so, so that a claim costs the rows it takes, not the rows
// the partition holds.

// Select, Group and Stale are backends'.
type (
	Select = metadata.Select
	Group  = metadata.Group
	Stale  = metadata.Stale
)

func selectEqual(s, o *Select) bool {
	return slices.Equal(s.Fields, o.Fields) && s.Group == o.Group && s.Stale == o.Stale
}

// ClaimArgs is a claim, as metadata.ClaimRequest with how it chooses.
type ClaimArgs struct {
	Task  string
	Token string // the lease token, chosen by the caller: random, never reused
	Lease time.Duration
	// Rows is the most rows to lease and Min the fewest worth leasing.
	Rows, Min     int
	MaxDeliveries int
	Batch         *metadata.Batch
	Select        Select
	// Floor is the staleness bound (with Select.Stale).
	Floor float64
	// Custom claims lease Units (row indexes, whole, in order of
	// preference) and drop Drop, as the caller picked them from
	// Candidates; others choose by Select.
	Custom bool
	Units  [][]uint64
	Drop   []uint64
	// Hold registers a claim that leases nothing, for up to Hold, to be
	// fulfilled by the first record after which it can lease (a standing
	// claim: see serve). Replaces is a standing claim of the caller's
	// this one replaces.
	Hold     time.Duration
	Replaces string
}

// Claimed is what a claim leased (see metadata.Claimed); times are by
// the partition's clock.
type Claimed = metadata.Claimed

// entry is a row's state for one task; a row without one is ready and was
// never delivered. An entry is never changed: a change replaces it, so
// that rows in the same state (those one claim leased, one settle acked)
// share one.
type entry struct {
	state      metadata.State
	deliveries int
	lease      string
	until      int64 // Leased: the lease's end; Ready: the end of a Nack's delay (0: none)
	granted    int64 // Leased: when its claim leased it (an Extend keeps it); 0 otherwise
	max        int
	// reason is why the row last went back (a Nack's reason; "" none),
	// at when: kept through later deliveries, cleared by an ack. A lease
	// that ended reads as metadata.ReasonLeaseEnded at its until.
	reason string
	at     int64
}

// entrySharer hands out an entry per run of equal ones it is given in
// turn, for the rows one change leaves alike to share.
type entrySharer struct{ last *entry }

func (s *entrySharer) of(e entry) *entry {
	if s.last == nil || *s.last != e {
		s.last = new(entry)
		*s.last = e
	}
	return s.last
}

// seen returns the entry as a claim at now finds it: an expired lease is
// ready again, or dead once it had its deliveries; a delay that passed is
// over.
func (e entry) seen(now int64) entry {
	switch {
	case e.state == metadata.Leased && now >= e.until:
		e.reason, e.at = metadata.ReasonLeaseEnded, e.until
		e.lease, e.until, e.granted = "", 0, 0
		e.state = metadata.Ready
		if e.max > 0 && e.deliveries >= e.max {
			e.state = metadata.Dead
		}
	case e.state == metadata.Ready && e.until != 0 && now >= e.until:
		e.until = 0
	}
	return e
}

// claimable reports whether a claim at now may lease a row whose entry
// is e (nil: never delivered).
func claimable(e *entry, now int64) bool {
	if e == nil {
		return true
	}
	s := e.seen(now)
	return s.state == metadata.Ready && s.until == 0
}

func (e *entry) delivery(index uint64, now int64) metadata.Delivery {
	s := e.seen(now)
	d := metadata.Delivery{Index: index, State: s.state, Deliveries: s.deliveries, Lease: s.lease, Holder: metadata.HolderOf(s.lease), Max: s.max}
	if s.until != 0 {
		d.Until = time.UnixMicro(s.until)
	}
	if s.state == metadata.Leased && s.granted != 0 {
		d.Granted = time.UnixMicro(s.granted)
	}
	if s.reason != "" {
		d.Reason, d.At = s.reason, time.UnixMicro(s.at)
	}
	// A Nack's token stays on a returned row until it is delivered again
	// (a nack resent finds its own); seen clears only an expired lease's.
	return d
}

type task struct {
	name    string // its key in Partition.tasks
	entries map[uint64]*entry
	// consumed counts the rows the task acknowledged or dropped, ever.
	consumed uint64
	batches  []*openBatch

	// The index, built for sel once a claim names it.
	indexed bool
	sel     Select
	ready   *btree.BTreeG[uint64] // claimable now, fields complete, not parked
	timers  timerHeap             // ends of leases and delays, to revisit
	groups  *groupIndex           // sel.Group's, when set
	// vers holds the ready rows with a numeric version (sel.Stale's tag),
	// by version, and verOf their versions as filed: a claim's stale
	// rows are the lowest versions.
	vers   *btree.BTreeG[verKey]
	verOf  map[uint64]float64
	parked map[uint64]float64 // stale rows passed over, by version
	parkq  parkHeap           // parked rows, highest version first

	// standing are the claims waiting to be fulfilled, oldest first;
	// served the ones fulfilled, by token, while their lease runs (a
	// claim replacing one finds it; an Unwait returns its rows).
	standing []*standing
	served   map[string]served

	// cnt counts the entries for Summary, once asked (nil before: see
	// Partition.sum).
	cnt *entryCounts
}

// standing is a registered claim: it lapses at until.
type standing struct {
	a     ClaimArgs
	until int64
}

// served is a standing claim's lease: its rows and its end.
type served struct {
	until int64
	rows  []uint64
}

type verKey struct {
	v float64
	i uint64
}

// openBatch is a data-parallel batch some ranks have not taken yet.
type openBatch struct {
	lease string
	rows  []*metadata.Row
	units [][]int
	taken []bool
	// takers are the tokens of the claims that took the ranks' shares
	// ("" for a rank that did not, or taken before tokens were kept):
	// a claim whose writer lost its result finds its share by its token
	// (Partition.Share). A batch every rank took stays listed till its
	// end for that.
	takers []string
	// partial flags the units that are groups released past their
	// deadline (nil: none), for every rank's share.
	partial []bool
	// until is the latest end a rank's claim of it gave its lease: till
	// then it stays open for the ranks that did not take it, even once
	// the other ranks settled every row (an empty share is a turn too).
	until int64
}

func (p *Partition) task(name string) *task {
	t := p.tasks[name]
	if t == nil {
		t = &task{name: name, entries: map[uint64]*entry{}}
		if p.sum != nil {
			t.cnt = newEntryCounts()
		}
		p.tasks[name] = t
	}
	return t
}

func newReady() *btree.BTreeG[uint64] {
	return btree.NewG(32, func(a, b uint64) bool { return a < b })
}

// configure builds t's index for sel, unless it has one for it: a scan of
// the partition, once per task (and again if its claims change sel).
func (p *Partition) configure(t *task, sel Select) {
	if t.indexed && selectEqual(&t.sel, &sel) {
		return
	}
	sel.Fields = slices.Clone(sel.Fields)
	t.indexed, t.sel = true, sel
	t.ready = newReady()
	t.timers = nil
	t.parked, t.parkq = nil, nil
	t.groups, t.vers, t.verOf = nil, nil, nil
	if sel.Group.Size > 0 {
		t.groups = newGroupIndex(sel.Group, p.since)
	}
	if sel.Stale.Tag != "" {
		t.vers = btree.NewG(32, func(a, b verKey) bool { return a.v < b.v || a.v == b.v && a.i < b.i })
		t.verOf = map[uint64]float64{}
	}
	ends := map[int64][]uint64{}
	// By index: the B-tree takes rows in order at the least cost.
	for _, r := range p.List() {
		i := r.Index
		e := t.entries[i]
		if e != nil && e.until > p.now && (e.state == metadata.Leased || e.state == metadata.Ready) {
			ends[e.until] = append(ends[e.until], i)
		}
		if claimable(e, p.now) && hasFields(r, sel.Fields) {
			t.add(i, r)
		}
	}
	for until, rows := range ends {
		t.timers = append(t.timers, timer{until: until, rows: rows})
	}
	heap.Init(&t.timers)
}

// addTimer has rows looked at again at until, when their lease or delay
// ends.
func (t *task) addTimer(until int64, rows []uint64) {
	if t.indexed && len(rows) > 0 {
		heap.Push(&t.timers, timer{until: until, rows: rows})
	}
}

func hasFields(r *metadata.Row, fields []string) bool {
	for _, f := range fields {
		if _, ok := r.Fields[f]; !ok {
			return false
		}
	}
	return true
}

// add puts a ready row in t's index.
func (t *task) add(i uint64, r *metadata.Row) {
	if _, dup := t.ready.ReplaceOrInsert(i); dup {
		return
	}
	if t.groups != nil {
		t.groups.add(i, r)
	}
	if t.vers != nil {
		if v, ok := metadata.TagNumber(r.Tag[t.sel.Stale.Tag]); ok {
			t.vers.ReplaceOrInsert(verKey{v, i})
			t.verOf[i] = v
		}
	}
}

// remove takes a row out of t's index (ready or parked).
func (t *task) remove(i uint64) {
	if _, ok := t.ready.Delete(i); ok {
		if t.groups != nil {
			t.groups.remove(i)
		}
		if v, ok := t.verOf[i]; ok {
			t.vers.Delete(verKey{v, i})
			delete(t.verOf, i)
		}
	}
	if t.parked != nil {
		delete(t.parked, i)
	}
}

// advance brings t's index to time now: rows whose lease or delay ended
// are ready again (or dead).
func (p *Partition) advance(t *task, now int64) {
	for len(t.timers) > 0 && t.timers[0].until <= now {
		tm := heap.Pop(&t.timers).(timer)
		for _, i := range tm.rows {
			e := t.entries[i]
			r := p.byIndex[i]
			if e == nil || r == nil || e.until != tm.until || !claimable(e, now) {
				continue // settled, moved or dead since: not this timer's
			}
			if _, parked := t.parked[i]; !parked && hasFields(r.view, t.sel.Fields) {
				t.add(i, r.view)
			}
		}
	}
}

// setEntry records e for row i of t, whose entry was old, and keeps the
// index in step: a row claimable under neither entry was not in it and
// stays out, with no lookup.
func (p *Partition) setEntry(t *task, i uint64, old, e *entry) {
	if e == nil {
		delete(t.entries, i)
	} else {
		t.entries[i] = e
	}
	p.reindex(t, i, old, e)
}

// reindex keeps t's index and counts in step with row i's entry, which
// was old and is e now (the map already holding e; old not e changed in
// place, a copy).
func (p *Partition) reindex(t *task, i uint64, old, e *entry) {
	p.noted(t, i, old, e)
	if !t.indexed {
		return
	}
	was, is := claimable(old, p.now), claimable(e, p.now)
	switch {
	case !was && !is:
	case !is:
		t.remove(i)
	default:
		r := p.byIndex[i]
		if r == nil || !hasFields(r.view, t.sel.Fields) {
			t.remove(i)
			return
		}
		if _, parked := t.parked[i]; !parked {
			t.add(i, r.view)
		}
	}
}

// committedRow keeps every task's index in step with a row committed
// anew (old nil) or updated.
func (p *Partition) committedRow(old, next *metadata.Row) {
	p.numbered(old, next)
	i := next.Index
	for _, t := range p.tasks {
		if !t.indexed {
			continue
		}
		if old != nil {
			if _, ok := t.ready.Get(i); ok {
				if t.groups != nil || t.vers != nil {
					t.remove(i)
					t.add(i, next) // its tag may have moved it
				}
				continue
			}
			// Its version may have moved: a claim parks it again if it is
			// still stale.
			delete(t.parked, i)
		}
		if _, parked := t.parked[i]; !parked && claimable(t.entries[i], p.now) && hasFields(next, t.sel.Fields) {
			t.add(i, next)
		}
	}
}

// deleted takes removed rows out of every task.
func (p *Partition) deleted(rows []*metadata.Row) {
	for _, r := range rows {
		p.numbered(r, nil)
	}
	for _, t := range p.tasks {
		for _, r := range rows {
			if e := t.entries[r.Index]; e != nil {
				p.noted(t, r.Index, e, nil)
			}
			delete(t.entries, r.Index)
			if t.indexed {
				t.remove(r.Index)
			}
		}
	}
}

// Claim leases rows to a.Token for a.Task, by metadata.Queue.Claim's
// rules; a.Custom claims lease a.Units as the caller picked them.
func (p *Partition) Claim(now int64, a *ClaimArgs) Claimed {
	p.tick(now)
	now = p.now
	if _, undone := p.undone[a.Token]; undone {
		// Its caller undid it before it came (metadata.Undo).
		return Claimed{Mark: metadata.Mark{Seq: p.seq}}
	}
	t := p.task(a.Task)
	p.configure(t, a.Select)
	p.advance(t, now)
	before := p.seq // the count before this claim's own hand-back, if any
	if a.Replaces != "" {
		// What the claim it replaces was fulfilled with goes back
		// undelivered, and this claim leases afresh: its writer may
		// never have seen that fulfilment (its copy restarted from a
		// snapshot past it), and must not leave it held by nobody.
		p.unwait(t, a.Replaces, nil)
	}
	if a.Batch != nil {
		if c, ok := p.takeShare(t, a, now); ok {
			return c
		}
	}
	var c Claimed
	units, drop := a.Units, a.Drop
	if t.sel.Stale.Tag != "" {
		p.unpark(t, a.Floor)
		var stale []uint64
		stale, c.Skipped = p.sweepStale(t, a.Floor)
		drop = append(slices.Clip(drop), stale...)
	}
	var dropped []uint64
	var set entrySharer
	for _, i := range drop {
		if e := t.entries[i]; p.byIndex[i] != nil && claimable(e, now) {
			ne := entry{state: metadata.Dropped}
			if e != nil {
				s := e.seen(now)
				ne.deliveries, ne.reason, ne.at = e.deliveries, s.reason, s.at
			}
			p.setEntry(t, i, e, set.of(ne))
			p.consume(t)
			c.Dropped++
			dropped = append(dropped, i)
		}
	}
	if len(dropped) > 0 && p.capacity.Clears(t.name) {
		c.Cleared = p.clearConsumed(dropped)
	}
	// plain: a claim of the oldest ready rows, each a unit of its own,
	// which are the first rows of the index.
	plain := !a.Custom && t.groups == nil
	var take []uint64
	var bounds []int // where each unit taken ends in take (nil: each row a unit)
	if plain {
		take = make([]uint64, 0, min(a.Rows, t.ready.Len()))
		t.ready.Ascend(func(i uint64) bool {
			take = append(take, i)
			return len(take) < a.Rows
		})
	} else {
		var partial int // the first units of units are partial groups
		if !a.Custom {
			units, partial = p.choose(t, a, now)
		}
		var taken map[uint64]bool // a caller's units may repeat a row: a unit with a taken row is skipped
		if a.Custom {
			taken = map[uint64]bool{}
		}
		for k, u := range units {
			if len(take)+len(u) > a.Rows || a.Custom && !p.leasable(t, u, taken) {
				continue
			}
			for _, i := range u {
				if taken != nil {
					taken[i] = true
				}
			}
			take = append(take, u...)
			bounds = append(bounds, len(take))
			if partial > 0 {
				c.Partial = append(c.Partial, k >= len(units)-partial)
			}
			if len(take) == a.Rows {
				break
			}
		}
	}
	if len(take) < a.Min {
		c.Mark = p.mark(t, now)
		if a.Custom && p.seq != before {
			// Its units were picked before the rows the claim it
			// replaces held went back ready here: a mark counting that
			// hand-back would let its Wait sleep past them. The mark
			// before it wakes the Wait at once, to pick again.
			c.Mark.Seq = before
		}
		if a.Hold > 0 && a.Batch == nil {
			// A rank's claim never stands: its share is served to no
			// one. A share served to a standing claim whose writer
			// never saw the fulfilment (its copy restarted from a
			// snapshot past it) could not be handed back, the other
			// ranks holding its rows, and the rank would wait for the
			// batch's lease to end. The change that gives it a share
			// (a batch opened, rows ready) raises the count, which
			// wakes its Wait, whose next claim takes the share in its
			// own record.
			st := &standing{a: *a, until: now + a.Hold.Microseconds()}
			st.a.Hold, st.a.Replaces = 0, ""
			t.standing = append(t.standing, st)
			c.Waiting = a.Token
		}
		return c
	}
	until := now + a.Lease.Microseconds()
	c.Lease = a.Token
	c.Until = time.UnixMicro(until)
	if p.quiet && (a.Batch == nil || a.Batch.Ranks <= 1) {
		// Another process's claim: what it leased matters, not the reply.
		p.lease(t, take, plain, a, until, nil)
		t.addTimer(until, take)
		c.Mark.Seq = p.seq
		return c
	}
	c.Rows = make([]*metadata.Row, len(take))
	c.Deliveries = make([]metadata.Delivery, len(take))
	flat := make([]int, len(take))
	for j := range flat {
		flat[j] = j
	}
	if bounds == nil {
		c.Units = make([][]int, len(take))
		for k := range take {
			c.Units[k] = flat[k : k+1 : k+1]
		}
	} else {
		c.Units = make([][]int, len(bounds))
		for k, end := range bounds {
			start := 0
			if k > 0 {
				start = bounds[k-1]
			}
			c.Units[k] = flat[start:end:end]
		}
	}
	p.lease(t, take, plain, a, until, c.Deliveries)
	for j, i := range take {
		c.Rows[j] = p.byIndex[i].view
	}
	t.addTimer(until, take)
	if b := a.Batch; b != nil && b.Ranks > 1 {
		ob := &openBatch{lease: a.Token, rows: c.Rows, units: c.Units, taken: make([]bool, b.Ranks), partial: c.Partial, until: until}
		ob.taken[b.Rank] = true
		ob.take(b.Rank, a.Token)
		t.batches = append(t.batches, ob)
		p.bump() // the other ranks have a share to take
	}
	c.Mark.Seq = p.seq
	return c
}

// lease leases the rows of take to a.Token until until, and sets ds
// (nil, or one per row) to their deliveries. plain says take is the first
// rows of t's index, in order (they leave it from its start). Rows whose
// new entries are equal share one.
func (p *Partition) lease(t *task, take []uint64, plain bool, a *ClaimArgs, until int64, ds []metadata.Delivery) {
	leased := func(old *entry) entry {
		e := entry{state: metadata.Leased, lease: a.Token, until: until, granted: p.now, max: a.MaxDeliveries}
		if old != nil {
			s := old.seen(p.now)
			e.deliveries, e.reason, e.at = old.deliveries, s.reason, s.at
		}
		e.deliveries++
		return e
	}
	// One entry per run of rows alike: the first alone, the others in
	// one allocation, room made for every row left when a second is
	// needed (rows alike are the rule: never delivered before).
	var (
		e    *entry
		more []entry
	)
	for j, i := range take {
		old := t.entries[i]
		switch ne := leased(old); {
		case e != nil && ne == *e:
		case e == nil:
			e = new(entry)
			*e = ne
		default:
			if more == nil {
				more = make([]entry, 0, len(take)-j)
			}
			more = append(more, ne)
			e = &more[len(more)-1]
		}
		if ds != nil {
			ds[j] = e.delivery(i, p.now)
		}
		if !plain {
			p.setEntry(t, i, old, e)
			continue
		}
		t.entries[i] = e
		p.noted(t, i, old, e)
		if m, _ := t.ready.DeleteMin(); m != i {
			panic("rules: a plain claim's rows are not the first of the index")
		}
		if t.vers != nil {
			if v, ok := t.verOf[i]; ok {
				t.vers.Delete(verKey{v, i})
				delete(t.verOf, i)
			}
		}
	}
}

// leasable reports whether every row of unit u is ready and not in
// taken (nil: the units cannot repeat a row), nor twice in u.
func (p *Partition) leasable(t *task, u []uint64, taken map[uint64]bool) bool {
	for k, i := range u {
		if _, ok := t.ready.Get(i); !ok || taken[i] || taken != nil && slices.Contains(u[:k], i) {
			return false
		}
	}
	return true
}

// choose picks a claim's units by t's Select: the oldest ready rows, or
// the oldest complete groups (stale rows were taken out before: see
// sweepStale), then the groups overdue at now that a Partial deadline
// releases; partial is how many units of those come last. Complete
// groups come first: an overdue group is released where it does not
// hold back a step that complete groups fill.
func (p *Partition) choose(t *task, a *ClaimArgs, now int64) (units [][]uint64, partial int) {
	if t.groups != nil {
		units = t.groups.units(a.Rows / t.sel.Group.Size)
		if t.sel.Group.Partial {
			more := t.groups.partialUnits(a.Rows, now)
			units, partial = append(units, more...), len(more)
		}
		return units, partial
	}
	flat := make([]uint64, 0, min(a.Rows, t.ready.Len()))
	t.ready.Ascend(func(i uint64) bool {
		flat = append(flat, i)
		return len(flat) < a.Rows
	})
	units = make([][]uint64, len(flat))
	for k := range flat {
		units[k] = flat[k : k+1 : k+1]
	}
	return units, 0
}

// sweepStale takes every ready row stale under floor out of t's ready rows
// (those a version index finds, oldest version first): parked, or with
// Stale.Drop returned to be dropped. skipped is the stale rows passed
// over without dropping them: all parked ones (none with Stale.Drop,
// whose stale rows the claim counts as dropped).
func (p *Partition) sweepStale(t *task, floor float64) (drop []uint64, skipped int) {
	var stale []verKey
	t.vers.Ascend(func(k verKey) bool {
		if k.v >= floor {
			return false
		}
		stale = append(stale, k)
		return true
	})
	for _, k := range stale {
		if t.sel.Stale.Drop {
			drop = append(drop, k.i)
			continue
		}
		t.park(k.i, k.v)
	}
	if t.sel.Stale.Drop {
		return drop, 0
	}
	return nil, len(t.parked)
}

// park takes stale row i (of version v) out of t's ready rows.
func (t *task) park(i uint64, v float64) {
	t.remove(i)
	if t.parked == nil {
		t.parked = map[uint64]float64{}
	}
	t.parked[i] = v
	heap.Push(&t.parkq, parkedRow{index: i, version: v})
}

// unpark makes parked rows no longer stale under floor ready again.
func (p *Partition) unpark(t *task, floor float64) {
	for len(t.parkq) > 0 && t.parkq[0].version >= floor {
		pr := heap.Pop(&t.parkq).(parkedRow)
		if v, ok := t.parked[pr.index]; !ok || v != pr.version {
			continue
		}
		delete(t.parked, pr.index)
		r := p.byIndex[pr.index]
		if r == nil {
			continue
		}
		if v, ok := metadata.TagNumber(r.view.Tag[t.sel.Stale.Tag]); ok && v < floor {
			t.parked[pr.index] = v // its tag moved since: still stale
			heap.Push(&t.parkq, parkedRow{index: pr.index, version: v})
			continue
		}
		if claimable(t.entries[pr.index], p.now) && hasFields(r.view, t.sel.Fields) {
			t.add(pr.index, r.view)
		}
	}
}

// takeShare gives rank a.Batch.Rank its share of the task's oldest open
// batch it has not taken, forgetting batches whose lease ended (past the
// latest end a rank's claim gave it, none of its rows still leased to it
// past now: rows settled early do not close it).
func (p *Partition) takeShare(t *task, a *ClaimArgs, now int64) (Claimed, bool) {
	t.batches = slices.DeleteFunc(t.batches, func(b *openBatch) bool {
		return now >= b.until && !slices.ContainsFunc(b.rows, func(r *metadata.Row) bool {
			e := t.held(b, r)
			return e != nil && now < e.until
		})
	})
	for _, b := range t.batches {
		if len(b.taken) != a.Batch.Ranks || b.taken[a.Batch.Rank] {
			// Taken, or a batch of another number of ranks (a job
			// restarted with more or fewer within its lease): not
			// this claim's.
			continue
		}
		b.taken[a.Batch.Rank] = true
		b.take(a.Batch.Rank, a.Token)
		until := now + a.Lease.Microseconds()
		b.until = max(b.until, until)
		var renewed []uint64
		var set entrySharer
		for _, r := range b.rows {
			if e := t.held(b, r); e != nil {
				ne := *e
				ne.until = until
				p.setEntry(t, r.Index, e, set.of(ne))
				renewed = append(renewed, r.Index)
			}
		}
		t.addTimer(until, renewed)
		c := t.share(b, until, now)
		c.Mark.Seq = p.seq
		return c, true
	}
	return Claimed{}, false
}

// live reports whether b still matters at now: a rank has yet to take
// its share, or a row is still leased to its token (a rank whose claim's
// result was lost may look its share up, Partition.Share).
func (t *task) live(b *openBatch, now int64) bool {
	if b.until <= now {
		return false
	}
	if slices.Contains(b.taken, false) {
		return true
	}
	return slices.ContainsFunc(b.rows, func(r *metadata.Row) bool { return t.held(b, r) != nil })
}

// take records that the claim token took rank's share of b.
func (b *openBatch) take(rank int, token string) {
	if b.takers == nil {
		b.takers = make([]string, len(b.taken))
	}
	b.takers[rank] = token
}

// held returns the entry of b's row r if it is leased to b's token.
func (t *task) held(b *openBatch, r *metadata.Row) *entry {
	if e := t.entries[r.Index]; e != nil && e.state == metadata.Leased && e.lease == b.lease {
		return e
	}
	return nil
}

// share is a rank's share of b, under b's token until until: the whole
// batch, each row's delivery as its entry shows it now.
func (t *task) share(b *openBatch, until, now int64) Claimed {
	c := Claimed{Lease: b.lease, Until: time.UnixMicro(until), Rows: b.rows, Units: b.units,
		Deliveries: make([]metadata.Delivery, len(b.rows)), Partial: b.partial}
	for i, r := range b.rows {
		if e := t.entries[r.Index]; e != nil {
			c.Deliveries[i] = e.delivery(r.Index, now)
		} else {
			c.Deliveries[i] = metadata.Delivery{Index: r.Index}
		}
	}
	return c
}

// Share returns the share of a data-parallel batch that the rank claim of
// task with token took (it opened the batch, or took a share of it), as
// that claim returned it, while the batch is listed (till its end): for a
// writer whose copy lost the claim's result (restarted from a snapshot
// past its record), which cannot hand the share back, the other ranks
// holding the batch. ok is false when no listed batch names the token.
func (p *Partition) Share(taskName, token string) (c Claimed, ok bool) {
	t := p.tasks[taskName]
	if t == nil || token == "" {
		return Claimed{}, false
	}
	for _, b := range t.batches {
		if !slices.Contains(b.takers, token) {
			continue
		}
		until := b.until
		for _, r := range b.rows {
			if e := t.held(b, r); e != nil {
				until = e.until
				break
			}
		}
		c = t.share(b, until, p.now)
		c.Mark.Seq = p.seq
		return c, true
	}
	return Claimed{}, false
}

// mark is where a claim that leased nothing looked: the change count,
// and the end of the earliest lease or delay still to end.
func (p *Partition) mark(t *task, now int64) metadata.Mark {
	mk := metadata.Mark{Seq: p.seq, Consumed: p.consumed}
	for len(t.timers) > 0 {
		tm := &t.timers[0]
		tm.rows = slices.DeleteFunc(tm.rows, func(i uint64) bool {
			e := t.entries[i]
			return e == nil || e.until != tm.until || e.state != metadata.Leased && e.state != metadata.Ready
		})
		if len(tm.rows) > 0 && tm.until > now {
			mk.Wake = time.UnixMicro(tm.until)
			break
		}
		heap.Pop(&t.timers) // settled or moved since, or passed
	}
	if t.groups != nil && t.sel.Group.Partial {
		// A group falling due is released by the claim after it.
		if due := t.groups.nextDue(now); due > now && (mk.Wake.IsZero() || due < mk.Wake.UnixMicro()) {
			mk.Wake = time.UnixMicro(due)
		}
	}
	return mk
}

// Candidates returns up to limit rows a claim of the task with sel and
// floor may lease now, oldest first, with their deliveries: for a claim
// that picks its own units (ClaimArgs.Custom). Stale rows are left out;
// stale lists those found, for a Stale.Drop task to drop. It changes
// nothing (not even the partition's clock), so that a process may pick
// from its copy of the state before it appends the claim.
func (p *Partition) Candidates(now int64, taskName string, sel Select, floor float64, limit int) (rows []*metadata.Row, ds []metadata.Delivery) {
	// As of now (the caller's estimate of the server's clock, which may
	// run ahead of the log) without moving the partition's clock or
	// index: a record applied later must find them as every other copy
	// does.
	now = max(now, p.now)
	t := p.tasks[taskName]
	isStale := func(r *metadata.Row) bool {
		if sel.Stale.Tag == "" {
			return false
		}
		v, ok := metadata.TagNumber(r.Tag[sel.Stale.Tag])
		return ok && v < floor
	}
	take := func(i uint64, r *metadata.Row) bool {
		if isStale(r) {
			return true
		}
		rows = append(rows, r)
		d := metadata.Delivery{Index: i}
		if t != nil {
			if e := t.entries[i]; e != nil {
				d = e.delivery(i, now)
			}
		}
		ds = append(ds, d)
		return len(rows) < limit
	}
	if t == nil || !t.indexed || !selectEqual(&t.sel, &sel) || len(t.timers) > 0 && t.timers[0].until <= now {
		// No index for sel (yet): the claim builds it; or leases ended
		// that the index learns of at the next record: this scans.
		for _, r := range p.List() {
			var e *entry
			if t != nil {
				e = t.entries[r.Index]
			}
			if claimable(e, now) && hasFields(r, sel.Fields) && !take(r.Index, r) {
				break
			}
		}
		return rows, ds
	}
	// The ready rows, and the parked ones the claim's floor unparks.
	var back []uint64
	for i, v := range t.parked {
		if v >= floor && claimable(t.entries[i], now) {
			back = append(back, i)
		}
	}
	slices.Sort(back)
	t.ready.Ascend(func(i uint64) bool {
		for len(back) > 0 && back[0] < i {
			if !take(back[0], p.byIndex[back[0]].view) {
				return false
			}
			back = back[1:]
		}
		return take(i, p.byIndex[i].view)
	})
	for _, i := range back {
		if len(rows) >= limit || !take(i, p.byIndex[i].view) {
			break
		}
	}
	return rows, ds
}

// Ready returns how many rows of the task are in its index (ready, fields
// complete, not parked), or -1 if no claim built it yet.
func (p *Partition) Ready(taskName string) int {
	t := p.tasks[taskName]
	if t == nil || !t.indexed {
		return -1
	}
	p.advance(t, p.now)
	return t.ready.Len()
}

// SettleArgs is metadata.SettleRequest.
type SettleArgs = metadata.SettleRequest

// Settle applies req.Op to each row of req.Indexes in the state the op
// needs and reports the others Lost (see metadata.Queue.Settle).
func (p *Partition) Settle(now int64, req *SettleArgs) metadata.SettleResult {
	p.tick(now)
	now = p.now
	var res metadata.SettleResult
	t := p.task(req.Task)
	if t.indexed {
		p.advance(t, now)
	}
	if req.Op == metadata.Unwait {
		p.unwait(t, req.Lease, req.Indexes)
		return res
	}
	if req.Op == metadata.Undo {
		p.unwait(t, req.Lease, p.LeasedTo(req.Task, req.Lease))
		if p.undone == nil {
			p.undone = map[string]int64{}
		}
		p.undone[req.Lease] = now
		return res
	}
	if req.Op == metadata.EndBatch {
		n := len(t.batches)
		if t.batches = slices.DeleteFunc(t.batches, func(b *openBatch) bool { return b.lease == req.Lease }); len(t.batches) < n {
			p.seq++
		}
		return res
	}
	changed := false
	var until int64
	var timed []uint64 // rows whose lease or delay now ends later
	var done []uint64  // rows acked or dropped, for the capacity's ClearAcked
	clears := (req.Op == metadata.Ack || req.Op == metadata.Drop) && p.capacity.Clears(req.Task)
	if req.Op == metadata.Extend {
		until = now + req.Delay.Microseconds()
		res.Until = time.UnixMicro(until)
	}
	var set entrySharer
	for _, i := range req.Indexes {
		e := t.entries[i]
		ok := false
		switch req.Op {
		case metadata.Ack:
			// An ack resent (its reply lost) finds its own: applied.
			ok = e != nil && (e.state == metadata.Leased || e.state == metadata.Acked) && e.lease == req.Lease
		case metadata.Nack:
			// A nack resent finds its own (ready or dead, not delivered
			// again since): applied.
			ok = e != nil && e.lease == req.Lease && e.state != metadata.Acked && e.state != metadata.Dropped
			if ok && e.state != metadata.Leased {
				continue
			}
		case metadata.Extend:
			ok = e != nil && e.state == metadata.Leased && e.lease == req.Lease
		case metadata.Retry:
			ok = e != nil && e.seen(now).state == metadata.Dead
		case metadata.Drop:
			ok = p.byIndex[i] != nil && (e == nil || e.seen(now).state == metadata.Ready || e.seen(now).state == metadata.Dead)
		}
		if !ok {
			res.Lost = append(res.Lost, i)
			continue
		}
		if clears {
			done = append(done, i)
		}
		switch req.Op {
		case metadata.Ack:
			if e.state != metadata.Acked {
				p.setEntry(t, i, e, set.of(entry{state: metadata.Acked, deliveries: e.deliveries, lease: e.lease, max: e.max}))
				p.consume(t)
			}
		case metadata.Nack:
			ne := entry{state: metadata.Ready, deliveries: e.deliveries, lease: e.lease, max: e.max, reason: e.reason, at: e.at}
			if req.Reason != "" {
				ne.reason, ne.at = req.Reason, now
			}
			if ne.max > 0 && ne.deliveries >= ne.max {
				ne.state = metadata.Dead
			} else if req.Delay > 0 {
				ne.until = now + req.Delay.Microseconds()
				timed = append(timed, i)
			}
			p.setEntry(t, i, e, set.of(ne))
			changed = true
		case metadata.Extend:
			ne := *e
			ne.until = until
			p.setEntry(t, i, e, set.of(ne))
			timed = append(timed, i)
		case metadata.Retry:
			p.setEntry(t, i, e, nil)
			changed = true
		case metadata.Drop:
			ne := entry{state: metadata.Dropped}
			if e != nil {
				s := e.seen(now)
				ne.deliveries, ne.reason, ne.at = e.deliveries, s.reason, s.at
			}
			p.setEntry(t, i, e, set.of(ne))
			p.consume(t)
		}
	}
	if req.Op == metadata.Extend && len(timed) == 0 {
		res.Until = time.Time{} // no lease renewed: none ends later
	}
	if len(timed) > 0 {
		end := until
		if req.Op == metadata.Nack {
			end = now + req.Delay.Microseconds()
		}
		t.addTimer(end, timed)
	}
	if changed {
		p.bump()
	}
	if len(done) > 0 {
		res.Cleared = p.clearConsumed(done)
	}
	return res
}

// unwait cancels the standing claim token and hands back the rows leased
// to token that its waiter never received: those of its served claim, if
// it was fulfilled, and those of indexes (a lease whose caller gave up
// before it learnt of it, or could not read its data). A row handed back
// is as before its delivery: ready at once, its delivery count as it was
// (so never dead for it), its entry forgotten if that was its first.
func (p *Partition) unwait(t *task, token string, indexes []uint64) {
	t.unstand(token)
	rows := indexes
	sv, served := t.served[token]
	if served {
		delete(t.served, token)
		rows = append(slices.Clip(sv.rows), indexes...)
	}
	changed := served
	var set entrySharer
	for _, i := range rows {
		e := t.entries[i]
		if e == nil || e.state != metadata.Leased || e.lease != token {
			continue // settled, expired and delivered again, or never this token's
		}
		changed = true
		if e.deliveries <= 1 {
			p.setEntry(t, i, e, nil)
			continue
		}
		p.setEntry(t, i, e, set.of(entry{state: metadata.Ready, deliveries: e.deliveries - 1, lease: token, max: e.max, reason: e.reason, at: e.at}))
	}
	if changed {
		p.bump()
	}
}

// LeasedTo returns the rows of the task leased to token (their lease
// ended or not), by index: what a claim of that token leased, for a writer
// that lost its result. It changes nothing.
func (p *Partition) LeasedTo(taskName, token string) []uint64 {
	t := p.tasks[taskName]
	if t == nil || token == "" {
		return nil
	}
	var out []uint64
	for i, e := range t.entries {
		if e.state == metadata.Leased && e.lease == token {
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return out
}

// unstand removes the standing claim token, if it is waiting.
func (t *task) unstand(token string) {
	t.standing = slices.DeleteFunc(t.standing, func(s *standing) bool { return s.a.Token == token })
}

// serve fulfils the standing claims that can lease now, oldest first in
// each task, after a record (whatever it was: a commit, a settle, time
// passing); each fulfilment is kept for TakeFulfilled. Lapsed ones go.
func (p *Partition) serve() {
	now := p.now
	var names []string // in name order: a fulfilment may bump the count others' marks show
	for name, t := range p.tasks {
		if len(t.standing) > 0 || len(t.served) > 0 {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		t := p.tasks[name]
		for tok, sv := range t.served {
			if sv.until <= now {
				delete(t.served, tok)
			}
		}
		if len(t.standing) == 0 {
			continue
		}
		t.standing = slices.DeleteFunc(t.standing, func(s *standing) bool { return s.until <= now })
		if len(t.standing) == 0 || !t.indexed {
			continue
		}
		p.advance(t, now)
		for k := 0; k < len(t.standing); k++ {
			s := t.standing[k]
			if s.a.Batch != nil || !p.mayLease(t, &s.a) {
				// A rank's claim never stands (see Claim); one that a
				// snapshot written otherwise holds is not served either.
				continue
			}
			quiet := p.quiet
			p.quiet = false // the waiter reads this claim's result
			c := p.Claim(now, &s.a)
			p.quiet = quiet
			if c.Lease == "" {
				continue
			}
			if t.served == nil {
				t.served = map[string]served{}
			}
			rows := make([]uint64, len(c.Rows))
			for j, r := range c.Rows {
				rows[j] = r.Index
			}
			// Filed under the waiter's token, which its replacing claim
			// or its Unwait names.
			t.served[s.a.Token] = served{until: c.Until.UnixMicro(), rows: rows}
			c.Waiting = s.a.Token
			p.fulfilled = append(p.fulfilled, c)
			t.standing = slices.Delete(t.standing, k, k+1)
			k--
		}
	}
}

// mayLease reports, cheaply, whether a claim of a might lease now.
func (p *Partition) mayLease(t *task, a *ClaimArgs) bool {
	if t.groups != nil {
		if !t.sel.Group.Partial {
			return t.groups.chunks*t.sel.Group.Size >= a.Min
		}
		// As the claim takes units: whole, while they fit.
		units, _ := p.choose(t, a, p.now)
		n := 0
		for _, u := range units {
			if n+len(u) <= a.Rows {
				n += len(u)
			}
		}
		return n >= a.Min
	}
	return t.ready.Len()+len(t.parked) >= a.Min
}

// TakeFulfilled returns the standing claims the last records applied
// fulfilled (Waiting set to each one's token), and forgets them.
func (p *Partition) TakeFulfilled() []Claimed {
	out := p.fulfilled
	p.fulfilled = nil
	return out
}

// Consumption returns, for each of tasks (every task with state when none
// is named), the Delivery of every row that has state, in index order, as
// metadata.Queue.Consumption does, as of now (or the partition's clock, if
// later); times are by the partition's clock. It changes nothing.
func (p *Partition) Consumption(now int64, tasks ...string) map[string][]metadata.Delivery {
	now = max(now, p.now) // as of now, changing nothing
	out := map[string][]metadata.Delivery{}
	for _, name := range tasks {
		out[name] = []metadata.Delivery{}
	}
	for name, t := range p.tasks {
		if _, want := out[name]; !want && len(tasks) > 0 {
			continue
		}
		if len(t.entries) == 0 {
			continue
		}
		ds := make([]metadata.Delivery, 0, len(t.entries))
		for i, e := range t.entries {
			ds = append(ds, e.delivery(i, now))
		}
		slices.SortFunc(ds, func(a, b metadata.Delivery) int { return compareIndex(a.Index, b.Index) })
		out[name] = ds
	}
	return out
}

// Reset forgets task's consumption of the rows of indexes, or of every
// row when indexes is nil (an empty non-nil indexes forgets nothing):
// they are ready again with no deliveries, leases on them are lost, and
// the task's open batches are forgotten.
func (p *Partition) Reset(now int64, taskName string, indexes []uint64) {
	p.tick(now)
	if indexes != nil && len(indexes) == 0 {
		return
	}
	t := p.tasks[taskName]
	if t == nil {
		return
	}
	if indexes == nil {
		t.entries = map[uint64]*entry{}
		if t.cnt != nil {
			t.cnt = newEntryCounts()
		}
		t.batches = nil
		if t.indexed {
			t.indexed = false
			p.configure(t, t.sel)
		}
	} else {
		for _, i := range indexes {
			if e, ok := t.entries[i]; ok {
				p.setEntry(t, i, e, nil)
			}
		}
		t.batches = nil
	}
	p.bump()
}

// Wake returns when the earliest lease or delay of the task still to end
// at the partition's clock ends (zero if none): a Wait's deadline.
func (p *Partition) Wake(taskName string) time.Time {
	t := p.tasks[taskName]
	if t == nil {
		return time.Time{}
	}
	return p.mark(t, p.now).Wake
}

// groupID returns the row's group id (a string naming the value and its
// kind), or false when it is in no group.
func groupID(g *Group, r *metadata.Row) (string, bool) { return GroupID(g.Tag, g.Sep, r) }

// GroupID returns the id of the group r is in when rows are grouped by
// the value of their tag tag (when tag is not empty) or by the key's part
// before its last sep, or false when it is in no group. Values of
// different kinds are different ids (1 and 1.0 and "1" too, and -0.0 and
// 0.0); lists, maps and bytes are grouped by their tag encoding.
func GroupID(tag, sep string, r *metadata.Row) (string, bool) {
	if tag != "" {
		v, ok := r.Tag[tag]
		if !ok || v == nil {
			return "", false
		}
		switch x := v.(type) {
		case string:
			return "s" + x, true
		case int64:
			return fmt.Sprintf("i%d", x), true
		case uint64:
			return fmt.Sprintf("u%d", x), true
		case float64:
			return fmt.Sprintf("f%v", x), true
		case bool:
			return fmt.Sprintf("b%v", x), true
		}
		// Lists, maps, bytes: by their tag encoding (LOG.md section 4),
		// which every process, and a reader in another language, forms
		// alike.
		b, err := appendTagValue([]byte{'t'}, v, 1)
		if err != nil {
			return "", false
		}
		return string(b), true
	}
	i := strings.LastIndex(r.Key, sep)
	if i < 0 {
		return "", false
	}
	return "k" + r.Key[:i], true
}

// timer is when the leases or delays of rows end (one per claim or
// settle, not per row): the rows to look at again then.
type timer struct {
	until int64
	rows  []uint64
}

type timerHeap []timer

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].until < h[j].until }
func (h timerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)        { *h = append(*h, x.(timer)) }
func (h *timerHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

type parkedRow struct {
	index   uint64
	version float64
}

type parkHeap []parkedRow

func (h parkHeap) Len() int { return len(h) }
func (h parkHeap) Less(i, j int) bool {
	if h[i].version != h[j].version {
		return h[i].version > h[j].version
	}
	return h[i].index < h[j].index
}
func (h parkHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *parkHeap) Push(x any)   { *h = append(*h, x.(parkedRow)) }
func (h *parkHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
