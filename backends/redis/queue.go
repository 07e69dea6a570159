package redis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
)

// The consumption state of a partition (backends.Queue) lives in keys of
// its own in the partition's hash slot (see queue_scripts.go and
// LAYOUT.md section 7): per task a hash of row states, a sorted set of
// deadlines and a list of open batches, a registry of the tasks, and a
// change counter with a wake stream for Wait. Every transition is one
// script, judged by the server's clock.
//
// A Claim calls pick with rows from the partition's view (see view.go):
// its committed rows, less those the Meta's cache of the task's states
// knows are not ready. The claim script then checks, atomically, that the
// view lacks no record that removes rows and that the cache is current
// (no Nack, Retry or Reset of the task since it was filled), leases the
// picked units whose rows are all still ready, and replies with what the
// view lacks and the states of candidates another consumer holds. So a
// claim on a current view is one round trip; a view or cache that was not
// current costs one more (the reply brings what was missing), and so does
// a claim that found too few of its candidates ready (the cache learned
// their states).

var _ backends.Queue = (*Meta)(nil)

// maxClaimAttempts bounds how often a Claim calls pick again: after a
// catch-up of its view or cache, or after finding candidates another
// consumer held.
const maxClaimAttempts = 8

// qKeys are the consumption keys of one task of a partition.
type qKeys struct {
	t, s, z, b, seq, w string
	q                  string // base:q:, for the keys of a claim (receipt)
}

func (m *Meta) qKeys(partition, task string) qKeys {
	p := m.s.opts.prefix
	q := p + ":{" + p + ":" + partEscaper.Replace(partition) + "}:q:"
	return qKeys{t: q + "t", s: q + "s:" + task, z: q + "z:" + task, b: q + "b:" + task, seq: q + "seq", w: q + "w", q: q}
}

// qEntry is a row's state entry (see qLuaLib), its deadline converted to
// this process's time.
type qEntry struct {
	state backends.State
	d     int
	until time.Time // zero: none
	max   int
	tok   string
}

var entryStates = map[byte]backends.State{'R': backends.Ready, 'L': backends.Leased, 'A': backends.Acked, 'D': backends.Dead, 'X': backends.Dropped}

// parseEntry decodes entry v, read when the server's clock said now (ms)
// and this process's said local.
func parseEntry(v string, now int64, local time.Time) (qEntry, error) {
	f := strings.SplitN(v, ":", 5)
	if len(f) != 5 || len(f[0]) != 1 {
		return qEntry{}, fmt.Errorf("%w: consumption entry %q", ErrCorrupt, v)
	}
	st, ok := entryStates[f[0][0]]
	d, err1 := strconv.Atoi(f[1])
	u, err2 := strconv.ParseInt(f[2], 10, 64)
	mx, err3 := strconv.Atoi(f[3])
	if !ok || err1 != nil || err2 != nil || err3 != nil {
		return qEntry{}, fmt.Errorf("%w: consumption entry %q", ErrCorrupt, v)
	}
	e := qEntry{state: st, d: d, max: mx, tok: f[4]}
	if u > 0 {
		e.until = local.Add(time.Duration(u-now) * time.Millisecond)
	}
	return e, nil
}

// at is e as of local time t: an ended lease is ready, or dead once it
// had its max deliveries.
func (e qEntry) at(t time.Time) qEntry {
	if e.state == backends.Leased && !e.until.After(t) {
		e.state, e.until, e.tok = backends.Ready, time.Time{}, ""
		if e.max > 0 && e.d >= e.max {
			e.state = backends.Dead
		}
	}
	return e
}

// delivery is e as a backends.Delivery of index.
func (e qEntry) delivery(index uint64) backends.Delivery {
	d := backends.Delivery{Index: index, State: e.state, Deliveries: e.d, Max: e.max}
	switch e.state {
	case backends.Leased:
		d.Lease, d.Until = e.tok, e.until
	case backends.Acked:
		d.Lease = e.tok
	case backends.Ready:
		d.Until = e.until
	}
	return d
}

// taskCache is what this Meta knows of a task's states in a partition:
// exact as of the release mark rel, but for rows other consumers have
// leased, acked, dropped or let die since (a claim finds those and
// learns them). valid false: nothing known, "" is sent.
type taskCache struct {
	mu    sync.Mutex
	valid bool
	rel   string
	ents  map[uint64]qEntry
	// floor: every row of floorOf before floorPos is acked, dropped or
	// dead for the task (none is ready again but by a Retry or Reset,
	// which reset the floor), so a claim over the same rows skips them.
	floorOf  *sortedRows
	floorPos int
	floorIdx uint64 // the index of floorOf.rows[floorPos], if any
}

// terminal reports a state a row leaves only by a Retry or Reset.
func terminal(s backends.State) bool {
	return s == backends.Acked || s == backends.Dropped || s == backends.Dead
}

// setEnt sets index i's entry, lowering the floor if i is below it and
// e is not terminal.
func (c *taskCache) setEnt(i uint64, e qEntry) {
	if c.floorOf != nil && i < c.floorIdx && !terminal(e.state) {
		c.floorOf = nil
	}
	c.ents[i] = e
}

func (c *taskCache) load(rel string, flat []any, now int64, local time.Time) error {
	ents := make(map[uint64]qEntry, len(flat)/2)
	if err := eachEntry(flat, now, local, func(i uint64, e qEntry, ok bool) {
		if ok {
			ents[i] = e
		}
	}); err != nil {
		return err
	}
	c.valid, c.rel, c.ents, c.floorOf = true, rel, ents, nil
	return nil
}

// learn applies the entries of flat (index, entry, ...; "" none).
func (c *taskCache) learn(flat []any, now int64, local time.Time) error {
	if c.ents == nil {
		c.ents = map[uint64]qEntry{}
	}
	return eachEntry(flat, now, local, func(i uint64, e qEntry, ok bool) {
		if ok {
			c.setEnt(i, e)
		} else {
			delete(c.ents, i)
			c.floorOf = nil
		}
	})
}

// eachEntry calls f with each index and entry of flat (ok false: "").
func eachEntry(flat []any, now int64, local time.Time, f func(uint64, qEntry, bool)) error {
	if len(flat)%2 != 0 {
		return fmt.Errorf("%w: consumption entries %v", ErrCorrupt, flat)
	}
	for j := 0; j < len(flat); j += 2 {
		is, ok1 := flat[j].(string)
		vs, ok2 := flat[j+1].(string)
		i, err := strconv.ParseUint(is, 10, 64)
		if !ok1 || !ok2 || err != nil {
			return fmt.Errorf("%w: consumption entries %v", ErrCorrupt, flat)
		}
		if vs == "" {
			f(i, qEntry{}, false)
			continue
		}
		e, err := parseEntry(vs, now, local)
		if err != nil {
			return err
		}
		f(i, e, true)
	}
	return nil
}

// queueState is a Meta's consumption side: task caches, the committed
// rows of views in index order, and Wait's watchers.
type queueState struct {
	mu     sync.Mutex
	caches map[[2]string]*taskCache
	sorted map[string]*sortedRows
	// Wait's side (queue_wait.go): the watchers by partition, the client
	// they read (ownWaits: made for them, closed with the Meta), and what
	// ends them.
	watches  map[string]*qWatch
	waits    goredis.UniversalClient
	ownWaits bool
	stop     chan struct{} // closed when the Meta closes
	ctx      context.Context
	cancel   context.CancelFunc
	closed   bool
}

// sortedRows are a view's committed rows by index, as of (epoch, n, era).
type sortedRows struct {
	v     *view
	epoch string
	n     int64
	era   uint64
	rows  []*backends.Row
}

// sortedRows returns v's committed rows by index (read-only), sorting
// them only when v changed since the last call. The caller holds v.mu.
func (m *Meta) sortedRows(partition string, v *view) *sortedRows {
	q := &m.q
	q.mu.Lock()
	sr := q.sorted[partition]
	q.mu.Unlock()
	if sr != nil && sr.v == v && sr.epoch == v.epoch && sr.n == v.n && sr.era == v.era {
		return sr
	}
	sr = &sortedRows{v: v, epoch: v.epoch, n: v.n, era: v.era, rows: v.committed()}
	q.mu.Lock()
	if q.sorted == nil || len(q.sorted) >= maxViews {
		q.sorted = map[string]*sortedRows{}
	}
	q.sorted[partition] = sr
	q.mu.Unlock()
	return sr
}

func (m *Meta) taskCache(partition, task string) *taskCache {
	q := &m.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.caches == nil {
		q.caches = map[[2]string]*taskCache{}
	}
	k := [2]string{partition, task}
	c := q.caches[k]
	if c == nil {
		if len(q.caches) >= maxViews*4 {
			for old := range q.caches {
				delete(q.caches, old) // forget one: it is refilled when used
				break
			}
		}
		c = &taskCache{}
		q.caches[k] = c
	}
	return c
}

// queueError classes a consumption script's failure. A server's error
// reply is definite, unless it is a script's runtime error (a state entry
// that does not decode: another program writing under the prefix), which
// may come after some of the script's writes. Any other failure (no
// reply) may have applied: unknown, with what that means for op.
func (m *Meta) queueError(ctx context.Context, op string, err error, unknown string) error {
	var re goredis.Error
	if errors.As(err, &re) {
		msg := re.Error()
		if strings.Contains(msg, "tq:") || strings.Contains(msg, "user_script") {
			return &unknownOutcome{m.s.wrap(ctx, op, fmt.Errorf("%w: %v", ErrCorrupt, err))}
		}
		return m.s.wrap(ctx, op, err)
	}
	return &unknownOutcome{m.s.wrap(ctx, op, fmt.Errorf("%w; %s", err, unknown))}
}

// Claim implements backends.Queue (see the comment at the top of this
// file for its round trips). A Claim whose reply was lost (its error
// matches backends.ErrOutcomeUnknown) leased at most rows to a token the
// caller never learned: they are ready again (or dead) once req.Lease
// has passed. pick is called without any lock held.
func (m *Meta) Claim(ctx context.Context, partition string, req backends.ClaimRequest, pick backends.Pick) (backends.Claimed, error) {
	ctx = m.s.traced(ctx)
	if err := m.check(ctx); err != nil {
		return backends.Claimed{}, err
	}
	if err := req.Check(); err != nil {
		return backends.Claimed{}, err
	}
	qk := m.qKeys(partition, req.Task)
	pk := m.keys(partition)
	v := m.view(partition)
	tc := m.taskCache(partition, req.Task)
	token := newID()
	keys := []string{pk.l, pk.e, pk.h, qk.t, qk.s, qk.z, qk.seq, qk.b, qk.q + "r:" + token}
	ranks, rank := 0, 0
	if req.Batch != nil {
		ranks, rank = req.Batch.Ranks, req.Batch.Rank
	}
	for attempt := 1; ; attempt++ {
		v.mu.Lock()
		at := pos{epoch: v.epoch, n: v.n, head: v.head, era: v.era}
		sr := m.sortedRows(partition, v)
		v.mu.Unlock()
		local := time.Now()
		tc.mu.Lock()
		rel := ""
		if tc.valid {
			rel = tc.rel
		}
		from := 0
		if tc.valid && tc.floorOf == sr {
			from = tc.floorPos
		}
		all := sr.rows[from:]
		rows := make([]*backends.Row, 0, len(all))
		dels := make([]backends.Delivery, 0, len(all))
		floor := from
		for k, r := range all {
			d := backends.Delivery{Index: r.Index, State: backends.Ready}
			if e, ok := tc.ents[r.Index]; ok {
				e = e.at(local)
				if floor == from+k && terminal(e.state) {
					floor++
				}
				if e.state != backends.Ready || e.until.After(local) {
					continue
				}
				d.Deliveries, d.Max = e.d, e.max
			}
			rows = append(rows, r)
			dels = append(dels, d)
		}
		if tc.valid {
			tc.floorOf, tc.floorPos = sr, floor
			if floor < len(sr.rows) {
				tc.floorIdx = sr.rows[floor].Index
			} else {
				tc.floorIdx = ^uint64(0)
			}
		}
		tc.mu.Unlock()
		picked, err := pick(rows, dels)
		if err != nil {
			return backends.Claimed{}, err
		}
		if err := backends.CheckPicked(picked, len(rows)); err != nil {
			return backends.Claimed{}, err
		}
		args := []any{at.epoch, at.n, at.head, req.Task, rel, req.Lease.Milliseconds(), req.Rows, req.Min, req.MaxDeliveries, token, ranks, rank, len(picked.Drop)}
		if req.Lease < time.Millisecond {
			args[5] = 1
		}
		for _, p := range picked.Drop {
			args = append(args, rows[p].Index)
		}
		for _, u := range picked.Units {
			args = append(args, len(u))
			for _, p := range u {
				args = append(args, rows[p].Index)
			}
		}
		if err := m.check(ctx); err != nil {
			return backends.Claimed{}, err
		}
		sent := time.Now()
		reply, err := m.runQueue(ctx, claimScript, keys, args...)
		var short *notReplicated
		if errors.As(err, &short) && !claimWrote(reply) {
			err = nil // nothing to replicate
		}
		if errors.As(err, &short) || (err == nil && m.s.opts.replicas > 0 && isResent(reply)) {
			if err == nil {
				err = &notReplicated{want: m.s.opts.replicas, err: errAckLost}
			}
			return backends.Claimed{}, &unknownOutcome{m.s.wrap(ctx, "claim", fmt.Errorf("%w; the claim's leases may be lost by a failover, and its rows are ready again once the lease ends", err))}
		}
		if err != nil {
			return backends.Claimed{}, m.queueError(ctx, "claim", err,
				"the claim may have leased rows to a token never returned: they are ready again once the lease ends")
		}
		status, _ := replyString(reply, 0)
		if len(reply) < 5 {
			return backends.Claimed{}, m.s.wrap(ctx, "claim", fmt.Errorf("%w: claim replied %v", ErrCorrupt, reply))
		}
		// The records the view lacks: replaying them may fail only on a
		// log that changed under the view, which the next attempt reads.
		_, cerr := m.catchUp(v, at.era, at.n, reply[1:5])
		switch status {
		case "stale":
			if cerr != nil {
				return backends.Claimed{}, m.s.wrap(ctx, "claim", cerr)
			}
		case "state":
			if len(reply) < 8 {
				return backends.Claimed{}, m.s.wrap(ctx, "claim", fmt.Errorf("%w: claim replied %v", ErrCorrupt, reply))
			}
			r, _ := replyString(reply, 5)
			now, _ := reply[6].(int64)
			flat, _ := reply[7].([]any)
			tc.mu.Lock()
			err := tc.load(r, flat, now, sent)
			tc.mu.Unlock()
			if err != nil {
				return backends.Claimed{}, m.s.wrap(ctx, "claim", err)
			}
		case "ok":
			c, again, err := m.claimed(ctx, partition, v, tc, req, reply, rows, sent)
			// Nothing leased, but the view caught up on rows pick never
			// saw: pick again.
			recs, _ := reply[4].([]any)
			again = again || (len(c.Rows) == 0 && len(recs) > 0 && cerr == nil)
			if err != nil || !again || attempt >= maxClaimAttempts {
				return c, err
			}
		default:
			return backends.Claimed{}, m.s.wrap(ctx, "claim", fmt.Errorf("%w: claim replied %v", ErrCorrupt, reply))
		}
		if attempt >= maxClaimAttempts {
			return backends.Claimed{}, m.s.wrap(ctx, "claim", fmt.Errorf("%w: %d attempts on partition %q", ErrContention, maxClaimAttempts, partition))
		}
	}
}

// claimed decodes an "ok" claim reply, updates the task's cache, and
// returns the claim; again: nothing was leased but candidates were found
// held by others, so a pick over the cache as it now is may do better.
// (A claim leases nothing rather than fewer than req.Min, so "nothing"
// is the only case where asking again may change the outcome.)
func (m *Meta) claimed(ctx context.Context, partition string, v *view, tc *taskCache, req backends.ClaimRequest, reply []any, rows []*backends.Row, sent time.Time) (backends.Claimed, bool, error) {
	bad := func() (backends.Claimed, bool, error) {
		return backends.Claimed{}, false, m.s.wrap(ctx, "claim", fmt.Errorf("%w: claim replied %v", ErrCorrupt, reply))
	}
	if len(reply) < 15 {
		return bad()
	}
	rel, _ := replyString(reply, 5)
	now, ok1 := reply[6].(int64)
	token, ok2 := replyString(reply, 7)
	leased, ok3 := reply[8].([]any)
	sizes, ok4 := reply[9].([]any)
	unavail, ok5 := reply[10].([]any)
	dropped, ok6 := reply[11].(int64)
	wake, ok7 := reply[12].(int64)
	seq, ok8 := reply[13].(int64)
	expired, ok9 := reply[14].([]any)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || !ok7 || !ok8 || !ok9 || len(leased)%2 != 0 {
		return bad()
	}
	until := sent.Add(req.Lease)
	c := backends.Claimed{Dropped: int(dropped), Mark: backends.Mark{Seq: uint64(seq)}}
	if recs, _ := reply[4].([]any); len(recs) > 0 {
		// pick did not see the records the view lacked: a mark the
		// counter does not hold wakes a Wait given it at once.
		c.Mark.Seq--
	}
	// rows are in index order: the candidates pick was given.
	find := func(rows []*backends.Row, i uint64) *backends.Row {
		if k, ok := slices.BinarySearchFunc(rows, i, func(r *backends.Row, i uint64) int { return cmp.Compare(r.Index, i) }); ok {
			return rows[k]
		}
		return nil
	}
	tc.mu.Lock()
	defer tc.mu.Unlock()
	switch {
	case rel == "?":
		// A resent claim: what else changed since is not known.
		tc.valid = false
	case !tc.valid:
		// The script accepted a claim without a cache only if the task
		// had no state: now it has what this reply says.
		tc.valid, tc.rel, tc.ents, tc.floorOf = true, rel, map[uint64]qEntry{}, nil
	case tc.rel != rel:
		tc.valid = false // another goroutine's settle moved it meanwhile
	}
	if err := tc.learn(unavail, now, sent); err != nil {
		return backends.Claimed{}, false, m.s.wrap(ctx, "claim", err)
	}
	if err := tc.learn(expired, now, sent); err != nil {
		return backends.Claimed{}, false, m.s.wrap(ctx, "claim", err)
	}
	// A rank's share of a batch comes with each row's entry as seen now
	// (its rows are the batch as selected, held by its token or not).
	var seen []any
	share := len(reply) > 15
	if share {
		if seen, _ = reply[15].([]any); len(seen) != len(leased)/2 {
			return bad()
		}
	}
	type got struct {
		row  *backends.Row
		d    backends.Delivery
		unit int
	}
	var out []got
	var missing bool
	unit, left := -1, 0
	for j := 0; j < len(leased); j += 2 {
		for left == 0 {
			if unit++; unit >= len(sizes) {
				return bad()
			}
			n, ok := sizes[unit].(int64)
			if !ok || n < 1 {
				return bad()
			}
			left = int(n)
		}
		left--
		is, _ := leased[j].(string)
		d, ok := leased[j+1].(int64)
		i, err := strconv.ParseUint(is, 10, 64)
		if err != nil || !ok {
			return bad()
		}
		dl := backends.Delivery{Index: i, State: backends.Leased, Deliveries: int(d), Lease: token, Until: until, Max: req.MaxDeliveries}
		if share {
			dl = backends.Delivery{Index: i, State: backends.Ready}
			if v, _ := seen[j/2].(string); v != "" {
				e, err := parseEntry(v, now, sent)
				if err != nil {
					return backends.Claimed{}, false, m.s.wrap(ctx, "claim", err)
				}
				tc.setEnt(i, e)
				dl = e.delivery(i)
			}
		} else {
			tc.setEnt(i, qEntry{state: backends.Leased, d: int(d), until: until, max: req.MaxDeliveries, tok: token})
		}
		r := find(rows, i)
		missing = missing || r == nil
		out = append(out, got{r, dl, unit})
	}
	if left != 0 || unit != len(sizes)-1 {
		return bad()
	}
	if missing {
		// A batch another process selected holds rows this view lacked
		// (the reply's records brought them), or rows deleted since.
		v.mu.Lock()
		cur := m.sortedRows(partition, v).rows
		v.mu.Unlock()
		for k := range out {
			if out[k].row == nil {
				out[k].row = find(cur, out[k].d.Index)
				if out[k].row == nil && !share {
					return backends.Claimed{}, false, m.s.wrap(ctx, "claim", fmt.Errorf("%w: leased row %d is not in the partition's log", ErrCorrupt, out[k].d.Index))
				}
			}
		}
	}
	last := -1
	for _, g := range out {
		if g.row == nil {
			continue // a row of the batch deleted since: it left the batch
		}
		if g.unit != last {
			c.Units = append(c.Units, nil)
			last = g.unit
		}
		c.Units[len(c.Units)-1] = append(c.Units[len(c.Units)-1], len(c.Rows))
		c.Rows = append(c.Rows, g.row)
		c.Deliveries = append(c.Deliveries, g.d)
	}
	if len(c.Rows) > 0 {
		c.Lease, c.Until = token, until
	} else if wake >= 0 {
		c.Mark.Wake = sent.Add(time.Duration(wake) * time.Millisecond)
	}
	// The server saw leases end that the cache took for running, so pick
	// was never offered those rows; no deadline is left to wake a Wait
	// for them: pick again, now that the cache knows.
	unseen := false
	for j := 0; j+1 < len(expired); j += 2 {
		is, _ := expired[j].(string)
		if i, err := strconv.ParseUint(is, 10, 64); err == nil && find(rows, i) == nil {
			unseen = true
		}
	}
	return c, len(c.Rows) == 0 && (len(unavail) > 0 || unseen), nil
}

// Settle implements backends.Queue in one round trip (a Drop of rows
// never delivered that the view does not know: two). An Ack, Nack or
// Extend whose reply was lost is sent again to learn what it did (a
// resent Ack finds its rows acked by its token and reports them applied;
// a resent Nack finds them ready or dead under its token); a Retry or
// Drop whose reply was lost, or any op whose second send fails too, fails
// with an error matching backends.ErrOutcomeUnknown.
func (m *Meta) Settle(ctx context.Context, partition string, req backends.SettleRequest) (backends.SettleResult, error) {
	ctx = m.s.traced(ctx)
	if err := m.check(ctx); err != nil {
		return backends.SettleResult{}, err
	}
	if err := req.Check(); err != nil {
		return backends.SettleResult{}, err
	}
	if len(req.Indexes) == 0 {
		return backends.SettleResult{}, nil
	}
	qk := m.qKeys(partition, req.Task)
	keys := []string{qk.t, qk.s, qk.z, qk.seq, qk.w}
	tc := m.taskCache(partition, req.Task)
	ms := req.Delay.Milliseconds()
	if req.Delay > 0 && ms == 0 {
		ms = 1
	}
	var v *view
	if req.Op == backends.Drop {
		pk := m.keys(partition)
		keys = append(keys, pk.l, pk.e, pk.h)
		v = m.view(partition)
	}
	for attempt := 1; ; attempt++ {
		args := []any{req.Task, int(req.Op), req.Lease, ms}
		var at pos
		if v != nil {
			v.mu.Lock()
			at = pos{epoch: v.epoch, n: v.n, head: v.head, era: v.era}
			args = append(args, at.epoch, at.n, at.head)
			known := map[uint64]bool{}
			for _, r := range v.committed() {
				known[r.Index] = true
			}
			v.mu.Unlock()
			for _, i := range req.Indexes {
				flag := "0"
				if known[i] {
					flag = "1"
				}
				args = append(args, i, flag)
			}
		} else {
			for _, i := range req.Indexes {
				args = append(args, i)
			}
		}
		sent := time.Now()
		reply, err := m.runQueue(ctx, settleScript, keys, args...)
		var short *notReplicated
		if err != nil && !errors.As(err, &short) {
			var re goredis.Error
			if !errors.As(err, &re) && (req.Op == backends.Ack || req.Op == backends.Nack || req.Op == backends.Extend) {
				// Sent again, it finds what the first send did.
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
				sent = time.Now()
				reply, err = m.runQueue(rctx, settleScript, keys, args...)
				cancel()
				if err == nil && m.s.opts.replicas > 0 {
					err = &notReplicated{want: m.s.opts.replicas, err: errAckLost}
				}
			}
		}
		if errors.As(err, &short) && !settleWrote(reply) {
			err = nil // nothing to replicate
		}
		if errors.As(err, &short) {
			return backends.SettleResult{}, &unknownOutcome{m.s.wrap(ctx, "settle", err)}
		}
		if err != nil {
			return backends.SettleResult{}, m.queueError(ctx, "settle", err, "the settle may have applied")
		}
		status, _ := replyString(reply, 0)
		if status == "stale" && v != nil && len(reply) >= 5 {
			if _, err := m.catchUp(v, at.era, at.n, reply[1:5]); err != nil {
				return backends.SettleResult{}, m.s.wrap(ctx, "settle", err)
			}
			if attempt >= maxClaimAttempts {
				return backends.SettleResult{}, m.s.wrap(ctx, "settle", fmt.Errorf("%w: %d attempts on partition %q", ErrContention, maxClaimAttempts, partition))
			}
			continue
		}
		if status != "ok" || len(reply) < 6 {
			return backends.SettleResult{}, m.s.wrap(ctx, "settle", fmt.Errorf("%w: settle replied %v", ErrCorrupt, reply))
		}
		now, ok1 := reply[1].(int64)
		lost, ok2 := reply[2].([]any)
		before, _ := replyString(reply, 3)
		after, _ := replyString(reply, 4)
		changed, ok3 := reply[5].([]any)
		if !ok1 || !ok2 || !ok3 {
			return backends.SettleResult{}, m.s.wrap(ctx, "settle", fmt.Errorf("%w: settle replied %v", ErrCorrupt, reply))
		}
		if m.s.opts.replicas > 0 && len(changed) == 0 && len(lost) < len(req.Indexes) {
			// Applied by an earlier send (go-redis resent it): this
			// send's WAIT says nothing of that one's writes.
			return backends.SettleResult{}, &unknownOutcome{m.s.wrap(ctx, "settle", &notReplicated{want: m.s.opts.replicas, err: errAckLost})}
		}
		var res backends.SettleResult
		for _, l := range lost {
			s, _ := l.(string)
			i, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return backends.SettleResult{}, m.s.wrap(ctx, "settle", fmt.Errorf("%w: settle replied %v", ErrCorrupt, reply))
			}
			res.Lost = append(res.Lost, i)
		}
		if req.Op == backends.Extend && len(res.Lost) < len(req.Indexes) {
			res.Until = sent.Add(req.Delay)
		}
		tc.mu.Lock()
		if tc.valid && tc.rel == before {
			tc.rel = after
			err = tc.learn(changed, now, sent)
		} else {
			tc.valid = false
		}
		tc.mu.Unlock()
		if err != nil {
			return backends.SettleResult{}, m.s.wrap(ctx, "settle", err)
		}
		return res, nil
	}
}

// Consumption implements backends.Queue in one round trip.
func (m *Meta) Consumption(ctx context.Context, partition string, tasks ...string) (map[string][]backends.Delivery, error) {
	ctx = m.s.traced(ctx)
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	for _, t := range tasks {
		if t == "" {
			return nil, fmt.Errorf("%w: consumption: empty task name", backends.ErrInvalid)
		}
	}
	tasks = slices.Compact(slices.Sorted(slices.Values(tasks)))
	keys := []string{m.qKeys(partition, "").t}
	args := make([]any, len(tasks))
	for j, t := range tasks {
		qk := m.qKeys(partition, t)
		keys = append(keys, qk.s, qk.z)
		args[j] = t
	}
	sent := time.Now()
	reply, err := consumptionScript.Run(ctx, m.s.client, keys, args...).Slice()
	if err != nil {
		// Only lazy expiry writes: nothing a caller asked for.
		return nil, m.s.wrap(ctx, "consumption", err)
	}
	bad := fmt.Errorf("%w: consumption replied %v", ErrCorrupt, reply)
	if len(reply) < 1 || len(reply)%2 != 1 {
		return nil, m.s.wrap(ctx, "consumption", bad)
	}
	now, ok := reply[0].(int64)
	if !ok {
		return nil, m.s.wrap(ctx, "consumption", bad)
	}
	out := make(map[string][]backends.Delivery, len(reply)/2)
	for j := 1; j < len(reply); j += 2 {
		task, ok1 := reply[j].(string)
		flat, ok2 := reply[j+1].([]any)
		if !ok1 || !ok2 {
			return nil, m.s.wrap(ctx, "consumption", bad)
		}
		ds := make([]backends.Delivery, 0, len(flat)/2)
		if err := eachEntry(flat, now, sent, func(i uint64, e qEntry, ok bool) {
			if ok {
				ds = append(ds, e.delivery(i))
			}
		}); err != nil {
			return nil, m.s.wrap(ctx, "consumption", err)
		}
		slices.SortFunc(ds, func(a, b backends.Delivery) int {
			switch {
			case a.Index < b.Index:
				return -1
			case a.Index > b.Index:
				return 1
			}
			return 0
		})
		out[task] = ds
	}
	return out, nil
}

// Reset implements backends.Queue in one round trip. A Reset whose reply
// was lost fails with an error matching backends.ErrOutcomeUnknown (sent
// again, it does the same: callers may simply retry).
func (m *Meta) Reset(ctx context.Context, partition, task string, indexes []uint64) error {
	ctx = m.s.traced(ctx)
	if err := m.check(ctx); err != nil {
		return err
	}
	if task == "" {
		return fmt.Errorf("%w: reset: empty task name", backends.ErrInvalid)
	}
	if indexes != nil && len(indexes) == 0 {
		return nil
	}
	qk := m.qKeys(partition, task)
	args := []any{task, "*"}
	if indexes != nil {
		args[1] = ""
		for _, i := range indexes {
			args = append(args, i)
		}
	}
	raw, err := m.runQueue(ctx, resetScript, []string{qk.t, qk.s, qk.z, qk.b, qk.seq, qk.w}, args...)
	var short *notReplicated
	if errors.As(err, &short) {
		return &unknownOutcome{m.s.wrap(ctx, "reset", err)}
	}
	if err != nil {
		return m.queueError(ctx, "reset", err, "the reset may have applied")
	}
	reply := make([]string, len(raw))
	for k, r := range raw {
		reply[k], _ = r.(string)
	}
	if len(reply) != 2 {
		return m.s.wrap(ctx, "reset", fmt.Errorf("%w: reset replied %v", ErrCorrupt, reply))
	}
	tc := m.taskCache(partition, task)
	tc.mu.Lock()
	defer tc.mu.Unlock()
	switch {
	case !tc.valid || tc.rel != reply[0]:
		tc.valid = false
	case indexes == nil:
		tc.rel, tc.ents, tc.floorOf = reply[1], map[uint64]qEntry{}, nil
	default:
		tc.rel, tc.floorOf = reply[1], nil
		for _, i := range indexes {
			delete(tc.ents, i)
		}
	}
	return nil
}

// claimWrote reports whether a claim reply leased or dropped rows.
func claimWrote(reply []any) bool {
	if status, _ := replyString(reply, 0); status != "ok" || len(reply) < 12 {
		return false
	}
	leased, _ := reply[8].([]any)
	dropped, _ := reply[11].(int64)
	return len(leased) > 0 || dropped > 0
}

// settleWrote reports whether a settle reply changed rows.
func settleWrote(reply []any) bool {
	if status, _ := replyString(reply, 0); status != "ok" || len(reply) < 6 {
		return false
	}
	changed, _ := reply[5].([]any)
	return len(changed) > 0
}

// isResent reports a claim reply of a resent claim (rel "?", see
// claimScript).
func isResent(reply []any) bool {
	rel, _ := replyString(reply, 5)
	status, _ := replyString(reply, 0)
	return status == "ok" && rel == "?"
}

// indexList is the indexes of rows, space-separated (the append script's
// unqueue argument).
func indexList(rows []*backends.Row) string {
	var b []byte
	for k, r := range rows {
		if k > 0 {
			b = append(b, ' ')
		}
		b = strconv.AppendUint(b, r.Index, 10)
	}
	return string(b)
}

// runQueue runs a consumption script that may write (claim, settle,
// reset). With WithReplicas it sends WAIT after it on the same
// connection, and a reply that too few replicas acknowledged comes with
// a *notReplicated error (the script applied on the master). A script
// that wrote nothing (resent: go-redis sent it again after losing its
// reply, and the first send wrote) is not acknowledged by its WAIT, which
// counts only this connection's writes: wrote reports whether the reply
// says this send wrote; a reply that wrote nothing on a send after a lost
// one is reported by the caller.
func (m *Meta) runQueue(ctx context.Context, script *goredis.Script, keys []string, args ...any) ([]any, error) {
	if m.s.opts.replicas == 0 {
		return script.Run(ctx, m.s.client, keys, args...).Slice()
	}
	reply, acks, err := m.evalWait(ctx, script, keys, args...)
	if err != nil {
		return nil, err
	}
	return reply, acks()
}
