package tqtest

import (
	"slices"
	"time"
)

// The reference model of RunModel: one partition and its consumption, as
// docs/consuming.md, tq's doc comments (Task, Claim, Wait, Lease, Status,
// ResetConsumption, the samplers) and metadata.Queue's contract (row states,
// lazy expiry, Settle's ops, Batch for ranks) describe them. It is kept
// plain on purpose: maps and slices, a clock that is a duration since the
// history began, and rows identified by an id the model gives each row
// when it is created (a key put again after a Clear is a new row).

// mstate is a row's state for one task.
type mstate uint8

const (
	mReady mstate = iota
	mLeased
	mAcked
	mDead
	mDropped
)

func (s mstate) String() string {
	return [...]string{"ready", "leased", "acked", "dead", "dropped"}[s]
}

// mrow is a committed row: its fields' values as they read back, its tag.
type mrow struct {
	id     int // creation order: the index order
	key    string
	fields map[string]any
	tag    map[string]any
	// since is when the row last gained a field (its first commit, or
	// one adding a field it lacked): a group deadline counts from it.
	since time.Duration
}

// mrec is a task's record of a row. A row without one is ready, never
// delivered.
type mrec struct {
	state      mstate
	deliveries int
	// token is the lease holding a leased row, that acked an acked row, or
	// that returned (Nack) a ready or dead row not delivered since; 0 for
	// none. A lease whose deadline passed keeps its token (lazy expiry):
	// its holder may still settle it until the row is delivered again,
	// retried, dropped or reset.
	token int
	// until is a leased row's deadline, or a ready row's Nack delay (0:
	// none).
	until time.Duration
	max   int // the MaxDeliveries of the claim that last leased the row
	// ambNack is the token that had returned the row before a Retry: its
	// Nack sent again may be taken as a resend (not Lost) or not (Lost).
	// Open choice: the contract says a nack may be sent twice while the
	// row is "not delivered again since", and is silent on a Retry in
	// between.
	ambNack int
}

// mbatch is an open batch of the ranks task.
type mbatch struct {
	token int   // the batch's lease
	rows  []int // row ids as selected, index order
	// share holds the row ids of each rank's share once known: a rank's
	// first claim of the batch says which rows are its own (any balanced
	// split is allowed), the other rank's share is the rest.
	share [2][]int
	taken [2]bool
	// until is the latest end a rank's claim of it gave its lease: the
	// batch stays open till then even once its rows are settled.
	until time.Duration
	// tags are the rows' tags when the batch was selected: a rank's share
	// may give its rows' metadata as selected (metadata.Batch: the batch
	// "as it was selected") or as it is now (open choice).
	tags map[int]map[string]any
}

// taskDef is one of the history's tasks. The fields of a task's every
// handle are the same.
type taskDef struct {
	name   string
	fields []string
	max    int  // MaxDeliveries (0: none)
	groups bool // WithGroups(GroupTag("uid"), 2)
	// deadline adds GroupDeadline(model.groupDL, partial) to groups.
	deadline, partial bool
	ranks             bool // Ranks(2, rank, "")
	stale             bool // Staleness("ver", 1, drop)
}

const (
	groupSize  = 2
	staleBound = 1
)

func modelTasks() []taskDef {
	return []taskDef{
		{name: "plain", fields: []string{"a"}},
		{name: "two", fields: []string{"a", "b"}},
		{name: "maxdel", fields: []string{"a"}, max: 2},
		{name: "grp", fields: []string{"a"}, groups: true},
		{name: "gdl", fields: []string{"a"}, groups: true, deadline: true, partial: true},
		{name: "gst", fields: []string{"a"}, groups: true, deadline: true},
		{name: "rk", fields: []string{"a"}, ranks: true},
		{name: "stale", fields: []string{"a"}, stale: true},
	}
}

type model struct {
	holders   map[int]string // each lease token's holder: its client's ConsumerName
	now       time.Duration
	lease     time.Duration // every task's LeaseFor
	staleDrop bool
	nextID    int
	rows      map[string]*mrow
	cons      map[string]map[int]*mrec // task -> row id -> record
	batches   []*mbatch                // the ranks task's open batches, oldest first
	// idle are batches closed because none of their leases was running
	// (rather than taken by every rank, or forgotten by a reset).
	idle map[int]bool
	// capRows bounds the rows (0: none); clearAcked are the tasks whose
	// acks and drops, all of them, clear a row (the partition's Capacity).
	capRows    int
	clearAcked []string
	// groupDL is the deadline tasks' GroupDeadline.
	groupDL time.Duration
	// learned is, per group task, whether the engine lists its groups:
	// once a claim of it ran (gLearned); gUnknown once the partition held
	// no row since (an engine may forget an empty partition at once, or
	// a while later: open choice).
	learned map[string]int
	// inserted counts the rows committed anew, samples each task's acks
	// and drops ever (a Ratio's counts); countsKnown is cleared once the
	// partition held no row after its first (it may have been forgotten,
	// its counts with it).
	inserted    int64
	samples     map[string]int64
	countsKnown bool
}

const (
	gNone = iota
	gLearned
	gUnknown
)

func newModel(lease time.Duration, staleDrop bool) *model {
	return &model{lease: lease, staleDrop: staleDrop, nextID: 1,
		rows: map[string]*mrow{}, cons: map[string]map[int]*mrec{}, idle: map[int]bool{},
		learned: map[string]int{}, samples: map[string]int64{}, countsKnown: true}
}

// emptied notes that the partition may have been forgotten, once it holds
// no row: what the engine learned of it may be gone.
func (m *model) emptied() {
	if len(m.rows) > 0 {
		return
	}
	for task, l := range m.learned {
		if l == gLearned {
			m.learned[task] = gUnknown
		}
	}
	if m.inserted > 0 {
		m.countsKnown = false
	}
}

// sorted returns the rows in index order.
func (m *model) sorted() []*mrow {
	out := make([]*mrow, 0, len(m.rows))
	for _, r := range m.rows {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *mrow) int { return a.id - b.id })
	return out
}

func (m *model) rowByID(id int) *mrow {
	for _, r := range m.rows {
		if r.id == id {
			return r
		}
	}
	return nil
}

func (m *model) rec(task string, id int) *mrec {
	return m.cons[task][id]
}

func (m *model) setRec(task string, id int, r *mrec) {
	if m.cons[task] == nil {
		m.cons[task] = map[int]*mrec{}
	}
	m.cons[task][id] = r
}

// seen is a record as a claim at m.now finds it: its state, and whether
// a claim may lease the row (ready, and no Nack delay pending). An expired
// lease is ready again, or dead once the row had its MaxDeliveries.
func (m *model) seen(r *mrec) (mstate, bool) {
	if r == nil {
		return mReady, true
	}
	switch r.state {
	case mLeased:
		if r.until > m.now {
			return mLeased, false
		}
		if r.max > 0 && r.deliveries >= r.max {
			return mDead, false
		}
		return mReady, true
	case mReady:
		return mReady, r.until <= m.now
	}
	return r.state, false
}

func hasFields(r *mrow, fields []string) bool {
	for _, f := range fields {
		if _, ok := r.fields[f]; !ok {
			return false
		}
	}
	return true
}

// candidates are the rows a claim of td may lease, in index order.
func (m *model) candidates(td taskDef) []*mrow {
	var out []*mrow
	for _, r := range m.sorted() {
		if _, ok := m.seen(m.rec(td.name, r.id)); ok && hasFields(r, td.fields) {
			out = append(out, r)
		}
	}
	return out
}

// number is a tag value as a number, if it is one (int64, uint64, float64).
func number(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case uint64:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

// pickSequential is a Sequential claim of n rows, at least min, by td at
// version (for a staleness task): the rows to lease (nil when fewer than
// min are ready) and the stale rows the claim drops (a dropping staleness
// task drops them even when it leases nothing).
func (m *model) pickSequential(td taskDef, version int64, n, min int) (lease, drop []*mrow) {
	var ready []*mrow
	for _, r := range m.candidates(td) {
		if td.stale {
			if v, ok := number(r.tag["ver"]); ok && v < float64(version-staleBound) {
				if m.staleDrop {
					drop = append(drop, r)
				}
				continue
			}
		}
		ready = append(ready, r)
	}
	if len(ready) < min {
		return nil, drop
	}
	return ready[:minInt(n, len(ready))], drop
}

// groupID is a row's group: its "uid" tag, when it is a string or an
// int64 (the only kinds the histories put there).
func groupID(r *mrow) (any, bool) {
	v, ok := r.tag["uid"]
	if !ok || v == nil {
		return nil, false
	}
	return v, true
}

// pickGroups is a claim of n rows in whole groups of groupSize, at least
// min (rounded up to whole groups, no further than n holds): the complete
// groups in the order of their first row, as many as n holds.
func (m *model) pickGroups(td taskDef, n, min int) [][]*mrow {
	open := map[any][]*mrow{}
	var complete [][]*mrow
	for _, r := range m.candidates(td) {
		id, ok := groupID(r)
		if !ok {
			continue
		}
		g := append(open[id], r)
		if len(g) == groupSize {
			complete = append(complete, g)
			g = nil
		}
		open[id] = g
	}
	// In the order of each group's first row (a group completes at its
	// last row, so completion order is not that).
	slices.SortStableFunc(complete, func(a, b []*mrow) int { return a[0].id - b[0].id })
	want := minInt((min+groupSize-1)/groupSize, n/groupSize) * groupSize
	var out [][]*mrow
	rows := 0
	for _, g := range complete {
		if rows+len(g) > n {
			break
		}
		out = append(out, g)
		rows += len(g)
	}
	if rows < want {
		return nil
	}
	return out
}

// leaseRows leases rows to token for td: a delivery each.
func (m *model) leaseRows(td taskDef, rows []*mrow, token int) {
	for _, r := range rows {
		d := 0
		if old := m.rec(td.name, r.id); old != nil {
			d = old.deliveries
		}
		m.setRec(td.name, r.id, &mrec{state: mLeased, deliveries: d + 1, token: token, until: m.now + m.lease, max: td.max})
	}
}

// dropRows makes rows dropped for td: consumed without delivery.
func (m *model) dropRows(td taskDef, rows []*mrow) {
	for _, r := range rows {
		d := 0
		if old := m.rec(td.name, r.id); old != nil {
			d = old.deliveries
		}
		m.setRec(td.name, r.id, &mrec{state: mDropped, deliveries: d})
		m.samples[td.name]++
	}
	if slices.Contains(m.clearAcked, td.name) {
		m.clearConsumed(idsOf(rows))
	}
}

// setCapacity sets the partition's capacity: a bound on its rows, and the
// tasks whose consumption clears a row; the rows they all consumed
// already are cleared.
func (m *model) setCapacity(rows int, clearAcked []string) {
	m.capRows, m.clearAcked = rows, clearAcked
	var ids []int
	for _, r := range m.rows {
		ids = append(ids, r.id)
	}
	m.clearConsumed(ids)
}

// clearConsumed clears the rows of ids every task of clearAcked has
// acknowledged or dropped.
func (m *model) clearConsumed(ids []int) {
	if len(m.clearAcked) == 0 {
		return
	}
	for _, id := range ids {
		row := m.rowByID(id)
		if row == nil {
			continue
		}
		all := true
		for _, task := range m.clearAcked {
			if rec := m.rec(task, id); rec == nil || rec.state != mAcked && rec.state != mDropped {
				all = false
			}
		}
		if all {
			m.clear([]string{row.key})
		}
	}
}

// full reports whether a put of keys adds rows past the bound.
func (m *model) full(keys []string) bool {
	if m.capRows == 0 {
		return false
	}
	n := 0
	for _, k := range keys {
		if m.rows[k] == nil {
			n++
		}
	}
	return n > 0 && len(m.rows)+n > m.capRows
}

// held reports whether the batch's token still holds row id (leased to
// it, its deadline passed or not: lazy expiry), and running whether that
// lease is still running.
func (m *model) held(b *mbatch, id int) (held, running bool) {
	r := m.rec("rk", id)
	if r == nil || r.state != mLeased || r.token != b.token {
		return false, false
	}
	return true, r.until > m.now
}

// closeIdle closes the open batches past their end none of whose leases
// is running (rows settled early keep a batch open: an empty share is a
// turn). The
// model closes them as soon as that holds (after every step); an engine
// may find out only at the next claim, which agrees as long as no lease
// of a closed batch runs again: Extend on one is therefore left out of
// histories (see the extend step).
func (m *model) closeIdle() {
	m.batches = slices.DeleteFunc(m.batches, func(b *mbatch) bool {
		if b.until > m.now {
			return false
		}
		for _, id := range b.rows {
			if _, running := m.held(b, id); running {
				return false
			}
		}
		m.idle[b.token] = true
		return true
	})
}

// openBatch is the oldest open batch rank has not taken, or nil.
func (m *model) openBatch(rank int) *mbatch {
	m.closeIdle()
	for _, b := range m.batches {
		if !b.taken[rank] {
			return b
		}
	}
	return nil
}

// takeShare takes rank's share of b: the rows of its share b's token still
// holds. The claim renews the lease of every row b's token still holds.
func (m *model) takeShare(b *mbatch, rank int) []int {
	var out []int
	for _, id := range b.share[rank] {
		if h, _ := m.held(b, id); h {
			out = append(out, id)
		}
	}
	for _, id := range b.rows {
		if h, _ := m.held(b, id); h {
			m.rec("rk", id).until = m.now + m.lease
		}
	}
	b.taken[rank] = true
	b.until = max(b.until, m.now+m.lease)
	if b.taken[0] && b.taken[1] {
		m.batches = slices.DeleteFunc(m.batches, func(x *mbatch) bool { return x == b })
	}
	return out
}

// settle applies a lease's Ack, Nack or Extend to rows (ids; 0 for a row
// that is gone) and returns the positions of the rows it reports Lost,
// and those it may report Lost or not (amb: the state is the same either
// way).
func (m *model) settle(task, op string, token int, ids []int, d time.Duration) (lost, amb []int) {
	var acked []int
	defer func() {
		if slices.Contains(m.clearAcked, task) {
			m.clearConsumed(acked)
		}
	}()
	for i, id := range ids {
		r := m.rec(task, id)
		if id == 0 || m.rowByID(id) == nil || r == nil {
			lost = append(lost, i)
			continue
		}
		switch op {
		case "ack":
			// An ack sent twice finds the row acked by its own token.
			if (r.state == mLeased || r.state == mAcked) && r.token == token {
				if r.state != mAcked {
					m.samples[task]++
				}
				r.state, r.until = mAcked, 0
				acked = append(acked, id)
				continue
			}
		case "nack":
			if r.state == mLeased && r.token == token {
				r.until = 0
				r.state = mReady
				if r.max > 0 && r.deliveries >= r.max {
					r.state = mDead
				} else if d > 0 {
					r.until = m.now + d
				}
				continue
			}
			// A nack sent twice finds the row it returned, not delivered
			// since: not Lost, and nothing changes (histories never
			// resend a nack where a second delay would show).
			if (r.state == mReady || r.state == mDead) && r.token == token {
				continue
			}
			if r.ambNack == token {
				amb = append(amb, i)
				continue
			}
		case "extend":
			if r.state == mLeased && r.token == token {
				r.until = m.now + d
				continue
			}
		}
		lost = append(lost, i)
	}
	return lost, amb
}

// retry makes the dead rows of ids ready with no deliveries; it returns
// the positions of the rows that were not dead.
func (m *model) retry(task string, ids []int) (lost []int) {
	for i, id := range ids {
		r := m.rec(task, id)
		if st, _ := m.seen(r); st != mDead {
			lost = append(lost, i)
			continue
		}
		amb := 0
		if r.state == mDead {
			amb = r.token // returned dead by a Nack of that token
		}
		m.setRec(task, id, &mrec{state: mReady, ambNack: amb})
	}
	return lost
}

// dropState says what a Drop may do to a row of td: drop it (ok), report
// it Lost (!ok), or either (amb: a row waiting for a field of the task:
// ready for the engine's queue, which does not know the task's fields,
// "waiting" for the task's Status; the contract lets Drop take "ready or
// dead" rows without saying which of the two a waiting row is).
func (m *model) dropState(td taskDef, row *mrow) (ok, amb bool) {
	st, _ := m.seen(m.rec(td.name, row.id))
	switch {
	case st == mReady || st == mDead: // ready with the task's fields or still waiting for one (Task.Drop)
		return true, false
	}
	return false, false
}

// reset forgets td's consumption of ids (every row when ids is nil) and
// the task's open batches.
func (m *model) reset(task string, ids []int) {
	if ids == nil {
		delete(m.cons, task)
	} else {
		for _, id := range ids {
			delete(m.cons[task], id)
		}
	}
	if task == "rk" {
		m.batches = nil
	}
}

// clear removes the rows of keys (unknown ones ignored) from the
// partition and from every task's consumption.
func (m *model) clear(keys []string) {
	for _, k := range keys {
		r := m.rows[k]
		if r == nil {
			continue
		}
		delete(m.rows, k)
		for _, recs := range m.cons {
			delete(recs, r.id)
		}
	}
}

// clearFields removes fields from the rows of keys (unknown keys and
// fields a row lacks ignored): the rows, their tags and every task's
// consumption of them stay; a task needing a removed field finds the row
// waiting (see candidates).
func (m *model) clearFields(keys, fields []string) {
	for _, k := range keys {
		if r := m.rows[k]; r != nil {
			for _, f := range fields {
				delete(r.fields, f)
			}
		}
	}
}

func (m *model) clearPartition() {
	m.rows = map[string]*mrow{}
	m.cons = map[string]map[int]*mrec{}
	m.batches = nil
}

// put applies a put: new keys get rows in slice order; fields are set or
// replaced; a tag merges into the row's (its keys overwrite). It returns
// the rows it made.
func (m *model) put(keys []string, fields map[string][]any, tags [][]tagEntry, tagsGiven bool) (made []*mrow) {
	for i, k := range keys {
		r := m.rows[k]
		if r == nil {
			r = &mrow{id: m.nextID, key: k, fields: map[string]any{}, tag: map[string]any{}, since: m.now}
			m.nextID++
			m.rows[k] = r
			m.inserted++
			made = append(made, r)
		}
		for f, col := range fields {
			if _, had := r.fields[f]; !had {
				r.since = m.now
			}
			r.fields[f] = col[i]
		}
		if tagsGiven && tags[i] != nil {
			for _, e := range tags[i] {
				r.tag[e.k] = e.want
			}
		}
	}
	return made
}

// deadlines are the times at which some lease or delay ends after now.
func (m *model) deadlines() map[time.Duration]bool {
	out := map[time.Duration]bool{}
	for _, recs := range m.cons {
		for _, r := range recs {
			if (r.state == mLeased || r.state == mReady) && r.until > m.now {
				out[r.until] = true
			}
		}
	}
	for _, td := range modelTasks() {
		if !td.deadline {
			continue
		}
		for _, g := range m.groupsOf(td) {
			if due := g.born + m.groupDL; len(g.rem) > 0 && due > m.now {
				out[due] = true
			}
		}
	}
	return out
}

// stateful reports whether the task has a record of some row that the
// contract says it must report (Status lists "each task with state in the
// partition"): delivered, dropped, or any state other than ready.
func (m *model) stateful(task string) bool {
	for id, r := range m.cons[task] {
		if m.rowByID(id) == nil {
			continue
		}
		if r.state != mReady || r.deliveries > 0 {
			return true
		}
	}
	return false
}

func minInt(a, b int) int {
	if a < b {
		return a
	}
	return b
}
