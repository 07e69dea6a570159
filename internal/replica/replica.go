// Package replica is the metadata of a shared engine: each partition's
// state is tqgo's rules (internal/rules) applied, in this process, to the
// partition's log (backends.Log), which every process reads alike. A write
// is a record appended to the log; its outcome is what the rules make of
// it at its place in the log, which the append's reply brings back (every
// entry between where this process had read and the record). So a write
// is one request, never refused for a stale view, and a lost reply is
// settled by a fence (a record that voids the lost one unless it came
// first).
package replica

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/internal/hook"
	"github.com/tqgo/tqgo/internal/rules"
)

// Meta is a metadata.MetaStore (and, over a backends.LogCells, a
// metadata.Colocated) over a shared engine's Log and Store. It is safe for
// concurrent use. A partition's copy of the state is kept while it is
// used, and caught up from the log by every call that must see the
// latest (every read and write: a write returns once applied, and a
// later read by any process finds it).
type Meta struct {
	log   backends.Log
	cells backends.LogCells // nil when the log cannot write and read cells with records
	data  backends.Store
	owns  bool // Close closes the log

	closed atomic.Bool
	done   chan struct{}
	life   context.Context // ends at Close: the context of what runs in the background
	end    context.CancelFunc
	wg     sync.WaitGroup // watchers, compactions and group appends

	mu    sync.Mutex // guards parts and tick
	parts map[string]*part
	tick  uint64 // counts part lookups: a copy's age
	made  uint64 // counts a Sole Meta's copies: each one's marks begin past its predecessors'

	// compactBytes is the log bytes after which a writer compacts: at
	// least this, and at least the last snapshot's size.
	compactBytes int
	settleFor    time.Duration // 0: the package's (see SetSettleFor)

	// sole is set when this Meta is its log's only user (see Sole), and
	// clock is the time this process and the log's stamps are read from.
	sole  bool
	clock func() time.Time

	// id names this Meta as the holder of a partition's compaction turn
	// (see compactInTurn).
	id string
}

// Option configures a Meta.
type Option func(*Meta)

// OwnsLog makes Close close the log too.
func OwnsLog() Option { return func(m *Meta) { m.owns = true } }

// defaultCompactBytes is CompactAfter's value for a Meta made without it.
var defaultCompactBytes atomic.Int64

func init() { defaultCompactBytes.Store(256 << 10) }

// SetDefaultCompactAfter sets CompactAfter's value for every Meta made
// after without that option (tq's clients, say), and returns a function
// restoring the former value: for tests that make logs compact often.
func SetDefaultCompactAfter(n int) (restore func()) {
	old := defaultCompactBytes.Swap(int64(n))
	return func() { defaultCompactBytes.Store(old) }
}

// CompactAfter sets the log bytes after which a partition's log is
// compacted (default 256 KiB, and never below the last snapshot's size,
// so that compaction costs a constant share of what is appended).
func CompactAfter(n int) Option { return func(m *Meta) { m.compactBytes = n } }

// SettleFor sets how long a write whose reply was lost keeps trying to
// settle its outcome before it returns an error matching
// backends.ErrOutcomeUnknown (default: the package's bound, see
// SetSettleFor): for tests that keep a server down, side by side with
// others.
func SettleFor(d time.Duration) Option { return func(m *Meta) { m.settleFor = d } }

// Sole says that this Meta is its log's only reader and writer, a log in
// this process (memory's) that stamps its entries with clock: this
// process's time is the log's (no skew, and clock is what leases, delays
// and Waits' wake times are judged by); an emptied log is emptied at
// once, not after emptyAfter (no other process has a reply in flight);
// a partition a write other than a consumption call (Claim, Settle,
// Reset) leaves empty is forgotten, its log and its copy, as an
// in-process engine forgets it; and an abandoned cell the log does not
// know was aborted and swept already (the log loses nothing, and hands
// no index out twice), not lost.
func Sole(clock func() time.Time) Option {
	return func(m *Meta) { m.sole, m.clock = true, clock }
}

// New returns the metadata over log, with data the engine's cells.
func New(log backends.Log, data backends.Store, opts ...Option) *Meta {
	m := &Meta{log: log, data: data, done: make(chan struct{}), parts: map[string]*part{}, compactBytes: int(defaultCompactBytes.Load()), clock: time.Now}
	m.life, m.end = context.WithCancel(context.Background())
	m.cells, _ = log.(backends.LogCells)
	m.id = fmt.Sprintf("replica %016x", newID())
	for _, o := range opts {
		o(m)
	}
	return m
}

var (
	_ metadata.MetaStore  = (*Meta)(nil)
	_ metadata.Summarizer = (*Meta)(nil)
)

// part is this process's copy of one partition.
type part struct {
	name string
	used atomic.Uint64    // Meta.tick at its last lookup
	now  func() time.Time // the Meta's clock
	mu   sync.Mutex       // guards everything below
	st   *rules.Partition
	pos  backends.Pos // the last entry applied
	// restarts counts the copy's restarts from a snapshot (or from an
	// emptied log).
	restarts uint64
	// base is added to the rules' change count in marks: the count
	// restarts with the log, base keeps marks rising across restarts (a
	// restart to a state with rows wakes every Wait; one to an empty
	// state, a log deleted, wakes none).
	base uint64
	// results of this process's records, by record ID, as they apply.
	results map[uint64]*rules.Result
	// ours holds the Data of records in flight, by ID: an Append's reply
	// returns the caller's own entries without it.
	ours map[uint64][]byte
	// logBytes counts what was applied since the last snapshot, and
	// snapBytes is that snapshot's size: compaction's measure.
	logBytes, snapBytes int
	compacting          bool
	emptyTimer          *time.Timer // see emptyAfter
	// skew is this process's clock less the server's, as of the last own
	// append: the time an append was sent less the time the server
	// stamped it (a lower bound, so local deadlines are never late).
	skew time.Duration
	// wake is closed when the state changes; waiters counts the Waits
	// that need the watcher.
	wake     chan struct{}
	woke     bool // wake was closed since the watcher last looked
	waiters  int
	watching bool
	// waits are the tokens of this process's standing claims, and
	// fulfilled those a record fulfilled (times by the server's clock),
	// until the claim replacing them takes the lease.
	waits     map[string]bool
	fulfilled map[string]rules.Claimed
	// appending is set while an append of this process's records is in
	// flight; next gathers the records of the calls that come meanwhile
	// (see appendGrouped).
	appending bool
	next      *group
	// dropped is set when the copy is forgotten (Sole): a call that
	// fetched it before takes the partition's copy again.
	dropped bool
}

// keepParts is how many partitions' copies a Meta keeps; beyond it, the
// copies unused longest (and not waited on) are dropped, to be read again
// if used again: a job that makes a partition per step does not grow the
// process.
const keepParts = 1024

func (m *Meta) part(name string) *part {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tick++
	p := m.parts[name]
	if p == nil {
		if len(m.parts) >= keepParts && !m.sole {
			// (A Sole Meta's copies are the state: they go when the
			// partition empties, see forget.)
			m.evict()
		}
		p = &part{name: name, now: m.clock, st: rules.New(), results: map[uint64]*rules.Result{}, ours: map[uint64][]byte{}, waits: map[string]bool{}}
		if m.sole {
			// A Sole Meta's marks of a copy begin past any of a copy of
			// the partition it forgot, so that a Wait on an old mark
			// never sleeps on a new copy that reached the same count.
			m.made++
			p.base = m.made << 40
		}
		m.parts[name] = p
	}
	p.used.Store(m.tick)
	return p
}

// evict drops the older half of the copies no call holds. The caller holds
// m.mu.
func (m *Meta) evict() {
	type aged struct {
		name string
		used uint64
	}
	var all []aged
	for name, p := range m.parts {
		all = append(all, aged{name, p.used.Load()})
	}
	slices.SortFunc(all, func(a, b aged) int { return cmp.Compare(a.used, b.used) })
	for _, a := range all[:len(all)/2] {
		p := m.parts[a.name]
		if !p.mu.TryLock() {
			continue
		}
		if p.waiters == 0 && !p.watching && !p.compacting && len(p.ours) == 0 && len(p.waits) == 0 {
			delete(m.parts, a.name)
		}
		p.mu.Unlock()
	}
}

// lockPart returns the partition's copy, locked: one not forgotten (see
// forget) between its lookup and its lock.
func (m *Meta) lockPart(name string) *part {
	for {
		p := m.part(name)
		p.mu.Lock()
		if !p.dropped {
			return p
		}
		p.mu.Unlock()
	}
}

// forget drops a Sole Meta's copy of a partition a write left empty, and
// the partition's log with it, if no call holds or waits on the copy
// (else a later write forgets it). The caller holds neither m.mu nor
// p.mu.
func (m *Meta) forget(p *part) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.parts[p.name] != p || !p.mu.TryLock() {
		return
	}
	defer p.mu.Unlock()
	if !p.st.EmptyAt(p.serverNow()) || p.waiters > 0 || p.watching || p.compacting || p.appending || p.next != nil ||
		len(p.ours) > 0 || len(p.waits) > 0 || len(p.fulfilled) > 0 || m.closed.Load() {
		return
	}
	delete(m.parts, p.name)
	p.dropped = true
	// An in-process log: the call returns at once.
	_ = m.log.Compact(m.life, p.name, p.pos, nil)
}

func (m *Meta) check(ctx context.Context) error {
	if m.closed.Load() {
		return backends.ErrClosed
	}
	return ctx.Err()
}

// newID returns a record ID: random, nonzero.
func newID() uint64 { return rand.Uint64() | 1 }

// record is a record to append.
type record struct {
	id      uint64
	indexes uint64
	data    []byte
}

// applyTail applies what a read or append from from returned. It reports
// false when the tail does not join the copy (another call moved the copy
// past from onto a log the tail does not show): the caller reads again.
// The caller holds p.mu.
func (m *Meta) applyTail(p *part, from backends.Pos, t *backends.Tail) (bool, error) {
	// The Waits wake when what they look at moves (see Wait): the change
	// count, the consumed count, a registered claim served, the copy
	// restarted; not at every entry, which would wake every Wait at
	// every append of the partition, each to sleep again.
	seq, consumed, changed := p.mark(), p.st.Consumed(), false
	defer func() {
		if changed || p.mark() != seq || p.st.Consumed() != consumed {
			p.changed()
		}
	}()
	entries := t.Entries
	switch {
	case t.Restart:
		st := rules.New()
		if t.Snapshot != nil {
			var err error
			if st, err = rules.Restore(t.Snapshot); err != nil {
				return false, fmt.Errorf("partition %q: %w", p.name, err)
			}
		}
		old := p.mark()
		if st.Committed() > 0 {
			old++
		}
		p.st, p.pos, p.base, changed = st, t.Start, old-st.Seq(), true
		p.restarts++
		p.logBytes, p.snapBytes = 0, len(t.Snapshot)
	case p.pos != from:
		// Another call moved the copy: skip what it applied, if this
		// tail holds the copy's position.
		if p.pos.N < from.N {
			return false, nil
		}
		k := slices.IndexFunc(entries, func(e backends.Entry) bool { return e.N == p.pos.N })
		if k < 0 || entries[k].ID != p.pos.ID {
			// Past this tail, or on a log it does not show: a read from
			// the copy's position tells.
			return false, nil
		}
		entries = entries[k+1:]
	}
	for i := range entries {
		e := &entries[i]
		if e.N != p.pos.N+1 {
			return false, fmt.Errorf("partition %q: log entry %d after %d", p.name, e.N, p.pos.N)
		}
		if e.Data == nil {
			if d, ok := p.ours[e.ID]; ok {
				e.Data = d
			}
		}
		if _, ok := p.ours[e.ID]; ok {
			r := p.st.Apply(e)
			p.results[e.ID] = &r
		} else {
			p.st.Replay(e)
		}
		for _, c := range p.st.TakeFulfilled() {
			if p.waits[c.Waiting] {
				if p.fulfilled == nil {
					p.fulfilled = map[string]rules.Claimed{}
				}
				p.fulfilled[c.Waiting] = c
				hook.Served(p.name)
				changed = true
			}
		}
		p.pos = e.Pos()
		p.logBytes += len(e.Data) + 32
	}
	return true, nil
}

// mark is the Seq of a Mark taken now. The caller holds p.mu.
func (p *part) mark() uint64 { return p.base + p.st.Seq() }

// serverNow is now by the server's clock as this process reckons it, and
// no earlier than the last record applied: a custom claim picks its
// candidates as of then, so that a lease that ended with nothing appended
// since is ready again. The caller holds p.mu.
func (p *part) serverNow() int64 { return max(p.st.Now(), p.now().Add(-p.skew).UnixMicro()) }

// changed wakes the Waits. The caller holds p.mu.
func (p *part) changed() {
	if p.wake != nil {
		close(p.wake)
		p.wake = nil
		p.woke = true
	}
}

// catchUp reads the log after the copy's position and applies it,
// until a read joins. The caller holds p.mu; it is released during the
// read.
func (m *Meta) catchUp(ctx context.Context, p *part) error {
	if m.sole {
		// Every entry of the log was appended, and applied, by this
		// copy: it is the log's state.
		return nil
	}
	for {
		from := p.pos
		p.mu.Unlock()
		t, err := m.log.Read(ctx, p.name, from, 0)
		p.mu.Lock()
		if err != nil {
			return err
		}
		ok, err := m.applyTail(p, from, &t)
		if err != nil || ok {
			return err
		}
	}
}

// view runs f with the partition's state caught up with the log.
func (m *Meta) view(ctx context.Context, name string, f func(st *rules.Partition)) error {
	return m.viewPart(ctx, name, func(p *part) { f(p.st) })
}

// viewPart is view, given the partition's copy (its state, clock skew and
// base).
func (m *Meta) viewPart(ctx context.Context, name string, f func(p *part)) error {
	if err := m.check(ctx); err != nil {
		return err
	}
	p := m.lockPart(name)
	defer p.mu.Unlock()
	if err := m.catchUp(ctx, p); err != nil {
		return err
	}
	f(p)
	return nil
}

// exec appends the records build makes from the caught-up state (build
// runs under the partition's lock; it may return no records, then exec
// returns none) and returns their results in order. cells, when given,
// are written with the records (LogCells). A lost reply is settled: the
// records applied, or a fence voided them (an error not matching
// ErrOutcomeUnknown); only when that fails too is the error
// ErrOutcomeUnknown.
func (m *Meta) exec(ctx context.Context, name string, cells []backends.Cell, build func(st *rules.Partition) ([]record, error)) ([]*rules.Result, error) {
	return m.execAfter(ctx, name, cells, build, nil)
}

// execAfter is exec that then runs after, under the partition's lock, with
// the state the records left (and maybe later ones).
func (m *Meta) execAfter(ctx context.Context, name string, cells []backends.Cell, build func(st *rules.Partition) ([]record, error), after func(p *part)) (res []*rules.Result, err error) {
	return m.execPart(ctx, name, cells, false, func(p *part) ([]record, error) { return build(p.st) }, after)
}

// execPart is execAfter whose build is given the partition's copy.
// consume is set for a consumption call's records (Claim, Settle,
// Reset), which leave a Sole Meta's partition kept even if empty (see
// Sole); any other write that leaves it empty forgets it.
func (m *Meta) execPart(ctx context.Context, name string, cells []backends.Cell, consume bool, build func(p *part) ([]record, error), after func(p *part)) (res []*rules.Result, err error) {
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	p, recs, err := m.buildLocked(name, build)
	if err != nil || len(recs) == 0 {
		p.mu.Unlock()
		return nil, err
	}
	out := make([]backends.Record, len(recs))
	for i, r := range recs {
		out[i] = backends.Record{ID: r.id, Indexes: r.indexes, Data: r.data}
		p.ours[r.id] = r.data
	}
	defer func() {
		for _, r := range recs {
			delete(p.ours, r.id)
			delete(p.results, r.id)
		}
		if err == nil && after != nil {
			after(p)
		}
		empty := m.sole && !consume && p.st.EmptyAt(p.serverNow())
		p.mu.Unlock()
		if empty {
			m.forget(p)
		}
	}()
	if cells == nil || m.cells == nil {
		// Records alone: grouped with other calls' (see appendGrouped).
		restarts := p.restarts
		if err := m.appendGrouped(ctx, p, out); err != nil {
			if errors.Is(err, backends.ErrOutcomeUnknown) && !errors.Is(err, backends.ErrNotDurable) {
				return m.settle(ctx, p, recs, restarts, err)
			}
			return nil, err
		}
		return m.found(ctx, p, recs, restarts)
	}
	from, restarts := p.pos, p.restarts
	p.mu.Unlock()
	sent := m.clock()
	t, err := m.cells.AppendCells(ctx, name, from, cells, out)
	p.mu.Lock()
	if err != nil {
		if errors.Is(err, backends.ErrOutcomeUnknown) && !errors.Is(err, backends.ErrNotDurable) {
			return m.settle(ctx, p, recs, restarts, err)
		}
		return nil, err
	}
	if n := len(t.Entries); n > 0 && !m.sole {
		p.skew = sent.Sub(time.UnixMicro(t.Entries[n-1].Time))
	}
	if _, err := m.applyTail(p, from, &t); err != nil {
		return nil, err
	}
	return m.found(ctx, p, recs, restarts)
}

// found returns the results of recs, appended: from the copy as the
// append's reply left it, or else read on from the log. The caller holds
// p.mu.
func (m *Meta) found(ctx context.Context, p *part, recs []record, restarts uint64) ([]*rules.Result, error) {
	if res, done := results(p, recs); done {
		m.maybeCompact(p)
		return res, nil
	}
	// The tail did not join the copy: read on from the copy.
	if err := m.catchUp(ctx, p); err != nil {
		return m.settle(ctx, p, recs, restarts, err)
	}
	if res, done := results(p, recs); done {
		return res, nil
	}
	// Appended, yet not found where the log was read after: the log
	// was replaced (compacted past them) in between. Their outcome is
	// in the log only.
	return nil, &pastWrite{fmt.Errorf("%w: partition %q: the write's entries are not in the log read after it", backends.ErrOutcomeUnknown, p.name)}
}

// A group is the records of calls that came while an append of the
// partition was in flight: they go in the next append, together (group
// commit), so that a partition has one append in flight at a time and
// each append's reply brings only what other processes appended, not a
// record per concurrent call of this one.
type group struct {
	recs []backends.Record
	sent bool          // taken by the flusher: no call may leave it
	done chan struct{} // closed once the append ended and its tail applied
	err  error
}

// groupFor bounds an append of a group: its calls wait for it whatever
// their contexts (their records may be in it), so it ends on its own.
const groupFor = 15 * time.Second

// appendGrouped appends recs to p's log and applies the reply to the
// copy: at once when no append of p is in flight, else in the group that
// goes when the one in flight returns. An error matching
// backends.ErrOutcomeUnknown may have appended them; any other did not.
// The caller holds p.mu, which appendGrouped releases while it waits and
// holds again when it returns.
func (m *Meta) appendGrouped(ctx context.Context, p *part, recs []backends.Record) error {
	if !p.appending {
		p.appending = true
		err := m.appendLocked(ctx, p, recs)
		switch {
		case p.next == nil:
			p.appending = false
		case m.closed.Load():
			// Close waits for the goroutines started before it: start
			// none, fail the groups.
			m.failGroups(p)
		default:
			// Close, which locks p after it sets closed, waits for it.
			m.wg.Add(1)
			go m.flushGroups(p) // p.appending stays set
		}
		return err
	}
	g := p.next
	if g == nil {
		g = &group{done: make(chan struct{})}
		p.next = g
	}
	g.recs = append(g.recs, recs...)
	p.mu.Unlock()
	select {
	case <-g.done:
		p.mu.Lock()
		return g.err
	case <-ctx.Done():
	}
	p.mu.Lock()
	if !g.sent {
		// Not sent yet: leave the group, nothing appended.
		g.recs = slices.DeleteFunc(g.recs, func(r backends.Record) bool {
			return slices.ContainsFunc(recs, func(o backends.Record) bool { return o.ID == r.ID })
		})
		return ctx.Err()
	}
	p.mu.Unlock()
	<-g.done // bounded by groupFor
	p.mu.Lock()
	return g.err
}

// appendLocked appends recs from the copy's position and applies the
// reply. The caller holds p.mu, released during the append.
func (m *Meta) appendLocked(ctx context.Context, p *part, recs []backends.Record) error {
	from := p.pos
	p.mu.Unlock()
	sent := m.clock()
	t, err := m.log.Append(ctx, p.name, from, recs)
	p.mu.Lock()
	if err != nil {
		return err
	}
	if n := len(t.Entries); n > 0 && !m.sole {
		p.skew = sent.Sub(time.UnixMicro(t.Entries[n-1].Time))
	}
	_, err = m.applyTail(p, from, &t)
	return err
}

// flushGroups appends the groups that gather while it appends, one after
// another, until none is waiting; then p has no append in flight. Close
// ends the append in flight (its calls' outcome is unknown) and fails
// the groups after it; it waits for flushGroups to return.
func (m *Meta) flushGroups(p *part) {
	defer m.wg.Done()
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.next != nil {
		if m.closed.Load() {
			m.failGroups(p)
			return
		}
		g := p.next
		p.next = nil
		g.sent = true
		if len(g.recs) > 0 {
			ctx, cancel := context.WithTimeout(m.life, groupFor)
			g.err = m.appendLocked(ctx, p, g.recs)
			cancel()
		}
		close(g.done)
	}
	p.appending = false
}

// failGroups ends the groups waiting to be appended with ErrClosed,
// nothing of them appended, and leaves p with no append in flight. The
// caller holds p.mu.
func (m *Meta) failGroups(p *part) {
	for g := p.next; g != nil; g = p.next {
		p.next = nil
		g.sent = true
		g.err = fmt.Errorf("partition %q: %w", p.name, backends.ErrClosed)
		close(g.done)
	}
	p.appending = false
}

// buildLocked locks the partition's copy and runs build under the lock,
// which it returns held; if build panics (it may run a caller's pick),
// the lock is released before the panic goes on, so the partition is not
// left locked for good.
func (m *Meta) buildLocked(name string, build func(p *part) ([]record, error)) (p *part, recs []record, err error) {
	p = m.lockPart(name)
	done := false
	defer func() {
		if !done {
			p.mu.Unlock()
		}
	}()
	recs, err = build(p)
	done = true
	return p, recs, err
}

// results returns the results of recs if every one applied.
func results(p *part, recs []record) ([]*rules.Result, bool) {
	out := make([]*rules.Result, len(recs))
	for i, r := range recs {
		if out[i] = p.results[r.id]; out[i] == nil {
			return nil, false
		}
	}
	return out, true
}

// settleFor bounds how long settle tries to get a fence through, for a
// Meta made without SettleFor.
var settleFor atomic.Int64

func init() { settleFor.Store(int64(10 * time.Second)) }

// SetSettleFor sets how long a write whose reply was lost keeps trying to
// settle its outcome (10 s by default) before it returns an error
// matching backends.ErrOutcomeUnknown, and returns a function restoring
// the former bound: for tests whose server stays down.
func SetSettleFor(d time.Duration) (restore func()) {
	old := settleFor.Swap(int64(d))
	return func() { settleFor.Store(old) }
}

// settle finds out whether recs, whose append's reply was lost, applied:
// it appends a fence that voids them, and reads up to it. They applied if
// they come before the fence (their results), else never will (an error
// that is not ErrOutcomeUnknown). The outcome stays unknown when no fence
// gets through before ctx ends or within the Meta's settle bound (see
// SettleFor), or when the copy
// restarted from a snapshot since the append was sent (restarts, the
// count then): the records may be in the snapshot, where their results
// are not. The caller holds p.mu.
func (m *Meta) settle(ctx context.Context, p *part, recs []record, restarts uint64, cause error) ([]*rules.Result, error) {
	bound := m.settleFor
	if bound == 0 {
		bound = time.Duration(settleFor.Load())
	}
	giveUp := time.Now().Add(bound)
	ids := make([]uint64, len(recs))
	for i, r := range recs {
		ids[i] = r.id
	}
	fence := backends.Record{ID: newID(), Data: rules.FenceRecord(ids)}
	p.ours[fence.ID] = fence.Data
	defer delete(p.ours, fence.ID)
	defer delete(p.results, fence.ID)
	for delay := 5 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		from := p.pos
		p.mu.Unlock()
		t, err := m.log.Append(ctx, p.name, from, []backends.Record{fence})
		p.mu.Lock()
		if err == nil {
			if _, err = m.applyTail(p, from, &t); err == nil && p.results[fence.ID] == nil {
				err = m.catchUp(ctx, p)
			}
		}
		if err == nil && p.results[fence.ID] != nil {
			if res, done := results(p, recs); done {
				return res, nil
			}
			if p.restarts != restarts {
				return nil, &pastWrite{fmt.Errorf("%w: partition %q: the log was compacted before the write's entries were read: %w", backends.ErrOutcomeUnknown, p.name, cause)}
			}
			return nil, fmt.Errorf("partition %q: not applied (its reply was lost, and a fence voided it): %w", p.name, errNotApplied(cause))
		}
		if errors.Is(err, backends.ErrNotDurable) {
			// The fence is in the log, not durably: what it voided may
			// come back with a failover.
			return nil, fmt.Errorf("%w: partition %q: %w (the fence: %w)", backends.ErrOutcomeUnknown, p.name, cause, err)
		}
		p.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-m.done:
		case <-time.After(delay):
		}
		p.mu.Lock()
		if ctx.Err() != nil || m.closed.Load() || time.Now().After(giveUp) {
			return nil, fmt.Errorf("%w: partition %q: %w", backends.ErrOutcomeUnknown, p.name, cause)
		}
	}
}

// pastWrite is an outcome unknown because the copy restarted from a
// snapshot past the write's records (or the fence after them): the state
// holds whatever they did, their results are gone.
type pastWrite struct{ err error }

func (e *pastWrite) Error() string { return e.err.Error() }
func (e *pastWrite) Unwrap() error { return e.err }

// errNotApplied strips ErrOutcomeUnknown from an error whose outcome is
// now known (nothing applied), keeping every other error it matches.
func errNotApplied(err error) error { return notApplied{err} }

type notApplied struct{ err error }

// Error is the cause's text without what said its outcome was unknown.
func (e notApplied) Error() string {
	s := e.err.Error()
	for _, u := range []string{backends.ErrOutcomeUnknown.Error() + ": ", "outcome unknown: "} {
		s = strings.ReplaceAll(s, u, "")
	}
	return s
}
func (e notApplied) Is(target error) bool {
	return target != backends.ErrOutcomeUnknown && errors.Is(e.err, target)
}
func (e notApplied) As(target any) bool { return errors.As(e.err, target) }

// compactFor bounds a compaction, and so how long Close waits for one.
var compactFor = 5 * time.Second

// emptyAfter is how long a partition's state stays empty, with nothing
// applied after it, before this process empties the log: a reader that
// restarts at an emptied log has the empty state, not the results of its
// own records before it, and a client whose append lands just before an
// emptying and whose copy restarts there could not tell what its write
// did. A second is far past any reply in flight.
var emptyAfter = time.Second

// maybeCompact snapshots the partition in the background once the log
// has grown past the last snapshot's size (and compactBytes), or, once
// the state has stayed empty for emptyAfter, empties the log. The caller
// holds p.mu.
func (m *Meta) maybeCompact(p *part) {
	if m.sole {
		// No reader restarts from a Sole Meta's log: it needs no
		// snapshot, and is emptied when the copy is forgotten.
		return
	}
	if from, ok := p.st.EmptyFrom(); ok {
		// Empty, or once its voids and undone claim tokens expire (by
		// the server's clock: no record may come to move the log's).
		if m.closed.Load() {
			return
		}
		if p.emptyTimer != nil {
			p.emptyTimer.Stop()
		}
		at := p.pos
		delay := emptyAfter + max(time.Duration(from-p.serverNow())*time.Microsecond, 0)
		p.emptyTimer = time.AfterFunc(delay, func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.pos == at && p.st.EmptyAt(p.serverNow()) && !p.compacting && !m.closed.Load() {
				m.compact(p, nil)
			}
		})
		return
	}
	if p.compacting || p.logBytes < max(m.compactBytes, p.snapBytes) || m.closed.Load() {
		return
	}
	if ct, ok := m.log.(backends.CompactTurns); ok {
		m.compactInTurn(p, ct)
		return
	}
	// Frozen under the lock, encoded in the background: the encoding of a
	// large partition's state holds up no call.
	m.compact(p, p.st.Freeze())
}

// compactInTurn compacts as compact does, once this process holds the
// partition's compaction turn (backends.CompactTurns) on a log that many
// processes share with no server between them: each counts the log's
// growth alone, all reach the same count at about the same entries, and
// each would encode and send the same snapshot. The one that takes the turn does,
// and keeps the turn for compactTurnFor after (each of its compactions
// renews it): the others, refused, count afresh as if they had
// compacted, and look again once the log has grown as much again. So
// while one process writes and compacts, it alone sends snapshots; a
// turn whose holder stopped or died lapses. The caller holds p.mu.
func (m *Meta) compactInTurn(p *part, ct backends.CompactTurns) {
	p.compacting = true
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(m.life), compactFor)
		mine, err := ct.CompactTurn(ctx, p.name, m.id, compactTurnFor)
		cancel()
		p.mu.Lock()
		if _, empty := p.st.EmptyFrom(); err != nil || !mine || empty {
			// Another process compacts (or the engine could not say: the
			// next look comes after as much growth again), or the state
			// emptied meanwhile, which is no snapshot's: the emptying
			// that came due while the turn was asked for passed over the
			// partition compacting, so it is armed again.
			p.compacting = false
			p.logBytes = 0
			if empty {
				m.maybeCompact(p)
			}
			p.mu.Unlock()
			return
		}
		f, at, covered := p.st.Freeze(), p.pos, p.logBytes
		p.mu.Unlock()
		m.compactAt(p, f, at, covered)
	}()
}

// compactTurnFor is how long a compaction turn lasts past its holder's
// last compaction.
const compactTurnFor = 10 * time.Second

// compact replaces the log up to the copy's position with the snapshot of
// f (empties it when f is nil) in the background; Close waits for it. The
// caller holds p.mu.
func (m *Meta) compact(p *part, f *rules.Frozen) {
	if p.emptyTimer != nil {
		p.emptyTimer.Stop()
	}
	at, covered := p.pos, p.logBytes
	p.compacting = true
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		// Close waits for it, so that the last write of a client that
		// closes right after still leaves the log compacted (or emptied).
		m.compactAt(p, f, at, covered)
	}()
}

// compactAt encodes f, the state at the log's position at, when covered
// bytes of log had been applied since the last snapshot, and compacts the
// log there with it (empties it when f is nil); then it clears
// p.compacting. The caller runs it in the background, not holding p.mu.
func (m *Meta) compactAt(p *part, f *rules.Frozen, at backends.Pos, covered int) {
	var snap []byte
	var err, encErr error
	if f != nil {
		snap, encErr = f.Encode()
	}
	if encErr == nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(m.life), compactFor)
		err = m.log.Compact(ctx, p.name, at, snap)
		cancel()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.compacting = false
	switch {
	case encErr != nil:
		// A state that does not encode now will not at the next write
		// either: try again once the log has grown as much again, not at
		// every write (each a freeze).
		p.logBytes = max(p.logBytes-covered, 0)
		err = encErr
	case err == nil:
		// What was applied meanwhile is the log after the snapshot.
		p.logBytes, p.snapBytes = max(p.logBytes-covered, 0), len(snap)
	}
	if err == nil && p.pos != at {
		m.maybeCompact(p) // grown or emptied again past at
	}
}

// Close implements metadata.MetaStore: waiting calls return ErrClosed, the
// watchers stop, and, if the Meta owns it, the log is closed.
func (m *Meta) Close() error {
	if m.closed.Swap(true) {
		return nil
	}
	close(m.done)
	m.end()
	m.mu.Lock()
	for _, p := range m.parts {
		p.mu.Lock()
		p.changed()
		if p.emptyTimer != nil && p.emptyTimer.Stop() && p.st.Empty() && !p.compacting {
			// This process's calls are over: empty the log now rather
			// than leave it.
			m.compact(p, nil)
		}
		p.mu.Unlock()
	}
	m.mu.Unlock()
	m.wg.Wait()
	if m.owns {
		return m.log.Close()
	}
	return nil
}
