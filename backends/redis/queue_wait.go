package redis

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
)

// Wait blocks on the server: every bump of a partition's change counter
// (base:q:seq) also makes the partition's wake stream (base:q:w) anew,
// holding one entry whose ID is 0-<counter>, in the same script. A
// watcher reads the stream with XREAD BLOCK from the counter value it
// knows, so that "has the counter moved past this value?" and "block
// until it does" are one atomic command: no commit can fall between a
// check and a subscription, and a watcher that lost its connection misses
// nothing (the stream keeps the last value). The server serves a blocked XREAD before it answers the
// command that woke it, as it does a BLPOP; a shard channel's message goes
// out after the publisher's reply.

// qRecheck is how long a watcher's XREAD blocks. It bounds how often an
// idle Wait sends a request (one pipeline per watcher, not per Wait), how
// long a watcher outlives its last Wait (a consumer's next Wait within it
// finds the watcher blocked already), and how late a Wait learns of a
// counter that moved without its stream: one that restarted (it expires a
// minute after its partition was deleted, and a new partition of that
// name counts from 1 again) or one bumped by a writer that does not make
// the stream.
var qRecheck = time.Second

// qWatch is one partition's watcher, shared by every Wait of the Meta on
// the partition: one goroutine, blocked in XREAD on a connection of the
// Meta's wait client.
type qWatch struct {
	refs      int // Waits on it; guarded by Meta.q.mu
	partition string
	stream    string // base:q:w
	seqKey    string // base:q:seq
	done      chan struct{}

	mu sync.Mutex
	// seen is the counter as the server last told it (a GET, or the
	// stream's entry), once known. Only the server's values count: a
	// Wait's mark that is wrong (a failover lost the bumps it saw) makes
	// that Wait return, and no other.
	seen  uint64
	known bool
	// begun and ended count the watcher's rounds: a Wait whose mark the
	// counter learnt does not match waits for a round begun after it.
	begun, ended uint64
	changed      chan struct{} // closed and replaced at the end of each round
}

// begin counts a round begun and returns the value the counter was last
// learnt as, and whether it was.
func (w *qWatch) begin() (uint64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.begun++
	return w.seen, w.known
}

// end records n as the counter's value at the end of a round (ok false:
// the round failed and learnt nothing), wakes the Waits to look again, and
// reports whether n changed what w knew.
func (w *qWatch) end(n uint64, ok bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	changed := ok && (!w.known || w.seen != n)
	if ok {
		w.seen, w.known = n, true
	}
	w.ended++
	close(w.changed)
	w.changed = make(chan struct{})
	return changed
}

// Wait implements backends.Queue. It returns nil once the partition's
// change counter, as the server tells it, differs from mark.Seq, or once
// mark.Wake has passed; ctx.Err() when ctx ends first; backends.ErrClosed
// when the Meta closes meanwhile. Waits of one Meta on one partition share
// one watcher and one connection (see qRecheck), which outlive the last
// of them by up to qRecheck, and the connection stays open in the Meta's
// wait client for the next.
func (m *Meta) Wait(ctx context.Context, partition string, mark backends.Mark) error {
	if err := m.check(ctx); err != nil {
		return err
	}
	var wake <-chan time.Time
	if !mark.Wake.IsZero() {
		d := time.Until(mark.Wake)
		if d <= 0 {
			return nil
		}
		t := time.NewTimer(d)
		defer t.Stop()
		wake = t.C
	}
	w, stop, err := m.watch(partition)
	if err != nil {
		return err
	}
	defer m.unwatch(w)
	w.mu.Lock()
	begun := w.begun
	w.mu.Unlock()
	for {
		// A counter learnt above the mark moved past it. One learnt
		// below it may be behind the claim that took the mark (a bump
		// the watcher has yet to read): it counts once a round begun
		// after this Wait has ended, which a mark the counter never held
		// (a failover lost the bumps its claim saw) then gets within a
		// round.
		w.mu.Lock()
		passed := w.known && (w.seen > mark.Seq || w.seen != mark.Seq && w.ended > begun)
		changed := w.changed
		w.mu.Unlock()
		if passed {
			return nil
		}
		select {
		case <-changed:
		case <-wake:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-stop:
			return backends.ErrClosed
		}
	}
}

// watch returns the partition's watcher, started if there is none, with
// a Wait counted on it, and a channel closed when the Meta closes.
func (m *Meta) watch(partition string) (*qWatch, <-chan struct{}, error) {
	q := &m.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil, nil, backends.ErrClosed
	}
	if w := q.watches[partition]; w != nil {
		w.refs++
		return w, q.stop, nil
	}
	if q.waits == nil {
		q.waits, q.ownWaits = waitClient(m.s.client, m.s.opts.hooks, qRecheck)
		q.stop = make(chan struct{})
		q.ctx, q.cancel = context.WithCancel(context.Background())
	}
	qk := m.qKeys(partition, "")
	w := &qWatch{refs: 1, partition: partition, stream: qk.w, seqKey: qk.seq, done: make(chan struct{}), changed: make(chan struct{})}
	if q.watches == nil {
		q.watches = map[string]*qWatch{}
	}
	q.watches[partition] = w
	go m.runWatch(w)
	return w, q.stop, nil
}

// unwatch ends a Wait's count on w; w stops at the end of its XREAD if no
// Wait has come by then.
func (m *Meta) unwatch(w *qWatch) {
	m.q.mu.Lock()
	w.refs--
	m.q.mu.Unlock()
}

// runWatch reads w's stream until the Meta closes, or until an XREAD
// ends with no Wait on w. Its first round is a GET of the counter; each
// round after it is one pipeline, which the server runs in order: a GET
// of the counter; an XREAD BLOCK from the value last learnt; and, when the
// Meta has a view of the partition's log, a read of the records the view
// lacks (readScript), which runs once the XREAD returns, so that the
// commit that wakes a Wait is in the view before the Wait's caller claims
// and that claim is one round trip, not two (the first bringing the
// records, the second leasing them). The stream's entry, else the GET,
// is the value learnt: a counter that restarted below it, or that moved
// without the stream (a bump by a writer that does not make it), is
// learnt a round late.
func (m *Meta) runWatch(w *qWatch) {
	defer close(w.done)
	q := &m.q
	ctx, client := q.ctx, q.waits
	keys := m.readKeys(w.partition)
	for ctx.Err() == nil {
		from, known := w.begin()
		var v *view
		var at pos
		var get *goredis.StringCmd
		var read *goredis.XStreamSliceCmd
		var log *goredis.Cmd
		if known {
			v, at = m.followed(w.partition)
		}
		_, _ = client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			get = p.Get(ctx, w.seqKey)
			if known {
				read = p.XRead(ctx, &goredis.XReadArgs{Streams: []string{w.stream, "0-" + strconv.FormatUint(from, 10)}, Block: qRecheck})
			}
			if v != nil {
				log = p.EvalSha(ctx, readScript.Hash(), keys, at.epoch, at.n)
			}
			return nil
		})
		if ctx.Err() != nil {
			return
		}
		if log != nil && goredis.HasErrorPrefix(log.Err(), "NOSCRIPT") {
			_ = readScript.Load(ctx, client).Err() // for the next round
		}
		n, err := get.Uint64()
		if errors.Is(err, goredis.Nil) {
			n, err = 0, nil
		}
		var streams []goredis.XStream
		if err == nil && read != nil {
			if streams, err = read.Result(); errors.Is(err, goredis.Nil) {
				err = nil
			}
		}
		if err != nil {
			// The connection or the server failed (go-redis dials
			// again at the next round).
			w.end(0, false)
			_ = sleepCtx(ctx, qRecheck)
		} else {
			for _, s := range streams {
				for _, e := range s.Messages {
					if c, ok := streamCounter(e.ID); ok {
						n = max(n, c)
					}
				}
			}
			woke := false
			if v != nil {
				// Under the view's lock, so that a woken Wait's claim
				// finds the records in the view.
				v.mu.Lock()
				woke = w.end(n, true)
				m.follow(v, at, log)
				v.mu.Unlock()
			} else {
				woke = w.end(n, true)
			}
			if woke {
				// The Waits just woken run on this P before the next
				// round is built and sent.
				runtime.Gosched()
			}
		}
		q.mu.Lock()
		if w.refs == 0 {
			if q.watches[w.partition] == w {
				delete(q.watches, w.partition)
			}
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
	}
}

// followed returns the Meta's view of partition and its position, or nil
// when it has none or the view has not read the log (a read from nothing
// would bring the whole log at every round).
func (m *Meta) followed(partition string) (*view, pos) {
	m.mu.Lock()
	v := m.views[partition]
	m.mu.Unlock()
	if v == nil {
		return nil, pos{}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.epoch == "" || v.epoch == badEpoch {
		return nil, pos{}
	}
	return v, pos{epoch: v.epoch, n: v.n, head: v.head, era: v.era}
}

// follow replays into v, whose lock the caller holds, the records a
// watcher's read (at v's position at) brought, every round, so that a
// view another process's snapshot or prepares moved on (no bump) is
// caught up too rather than read whole again at every round. A read that
// failed, or a view that moved since at (its own writes, another read),
// is left as it is: the next claim or read catches up itself.
func (m *Meta) follow(v *view, at pos, log *goredis.Cmd) {
	if v.era != at.era || v.epoch != at.epoch || v.n != at.n {
		return
	}
	reply, err := log.Slice()
	if err != nil {
		return
	}
	epoch, from, head, recs, err := logReply(reply)
	if err != nil {
		return
	}
	_, _ = v.catchUp(at.era, at.n, epoch, from, head, recs)
}

// streamCounter returns the counter value a wake stream entry's ID (0-n)
// carries.
func streamCounter(id string) (uint64, bool) {
	rest, ok := strings.CutPrefix(id, "0-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(rest, 10, 64)
	return n, err == nil
}

// closeWaits ends every Wait with ErrClosed, stops the watchers and
// closes the wait client (ending blocked reads), and waits for the
// watchers to return.
func (m *Meta) closeWaits() {
	q := &m.q
	q.mu.Lock()
	q.closed = true
	watches := q.watches
	q.watches = nil
	waits, own, stop, cancel := q.waits, q.ownWaits, q.stop, q.cancel
	q.mu.Unlock()
	if waits == nil {
		return
	}
	close(stop)
	cancel()
	if own {
		_ = waits.Close()
	}
	for _, w := range watches {
		<-w.done
	}
}
