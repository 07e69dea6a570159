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
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/tqgo/tqgo/backends"
)

// Wait blocks on the server: every bump of a partition's change counter
// (base:q:seq) also appends to the partition's wake stream (base:q:w) an
// entry whose ID is 0-<counter> (MAXLEN 1: the stream holds its last
// entry only), in the same script. A watcher reads the stream with XREAD
// BLOCK from the highest counter value it knows of, so that "has the
// counter passed this value?" and "block until it does" are one atomic
// command: no commit can fall between a check and a subscription, and a
// watcher that lost its connection misses nothing (the stream keeps its
// last entry). The server serves a blocked XREAD before it answers the
// command that woke it, as it does a BLPOP; a shard channel's message goes
// out after the publisher's reply.

// qRecheck is how long a watcher's XREAD blocks. It bounds how often an
// idle Wait sends a request (one pipeline of a GET of the counter and the
// XREAD per watcher, not per Wait), how long a watcher outlives its last
// Wait (a consumer's next Wait within it finds the watcher blocked
// already), and how late a Wait learns of a counter that restarted (it
// expires a minute after its partition was deleted, and a new partition of
// that name counts from 1 again, below the marks waiters hold).
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
	// top is the highest value the counter is known to have reached: from
	// the stream, or from a Wait's mark (a claim read it).
	top uint64
	// restarts counts the times the counter was read below top: it
	// restarted, and every Wait returns.
	restarts uint64
	changed  chan struct{} // closed and replaced when top or restarts change
}

// raise notes that the counter reached n, and reports whether that
// changed what w knew.
func (w *qWatch) raise(n uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n <= w.top {
		return false
	}
	w.top = n
	close(w.changed)
	w.changed = make(chan struct{})
	return true
}

// restart notes that the counter was read as n, below what it had
// reached: it restarted.
func (w *qWatch) restart(n uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.top = n
	w.restarts++
	close(w.changed)
	w.changed = make(chan struct{})
}

// Wait implements backends.Queue. It returns nil once the partition's
// change counter has passed mark.Seq (or restarted below it), or once
// mark.Wake has passed; ctx.Err() when ctx ends first; backends.ErrClosed
// when the Meta closes meanwhile. Waits of one Meta on one partition share
// one watcher and one connection (see qRecheck).
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
	restarts := w.restarts
	w.mu.Unlock()
	// A mark is a value the counter held: a watcher blocked below it
	// reads from it at its next XREAD, and Waits with lower marks return.
	w.raise(mark.Seq)
	for {
		w.mu.Lock()
		passed := w.top > mark.Seq || w.restarts != restarts
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
		q.waits, q.ownWaits = waitClient(m.s.client)
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

// waitClient returns the client watchers block on: for a client of its
// own kind, a client of its own on the same servers (closing it ends
// blocked reads at once, which go-redis cannot do to a read in flight;
// its read timeout covers a blocked XREAD; its connections are only the
// watchers'; it reads masters, where commits land first); for another
// kind of client (a Ring), c itself. The client of its own leaves out
// maintenance notifications, which would keep goroutines of their own
// after the last Wait; a blocked XREAD whose node goes away fails and is
// sent again, whose read timeout must then exceed
// qRecheck (go-redis's default, 3 s, does).
func waitClient(c goredis.UniversalClient) (_ goredis.UniversalClient, own bool) {
	switch c := c.(type) {
	case *goredis.Client:
		o := *c.Options()
		o.ReadTimeout = qRecheck + 10*time.Second
		o.PoolSize, o.MinIdleConns, o.MaxIdleConns = 1<<16, 0, 0
		o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		return goredis.NewClient(&o), true
	case *goredis.ClusterClient:
		o := *c.Options()
		o.ReadTimeout = qRecheck + 10*time.Second
		o.PoolSize, o.MinIdleConns, o.MaxIdleConns = 1<<16, 0, 0
		o.ReadOnly, o.RouteByLatency, o.RouteRandomly = false, false, false
		o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		return goredis.NewClusterClient(&o), true
	}
	return c, false
}

// runWatch reads w's stream until the Meta closes, or until an XREAD
// ends with no Wait on w. Each round is one pipeline: a GET of the
// counter (below top: it restarted) and an XREAD BLOCK from top.
func (m *Meta) runWatch(w *qWatch) {
	defer close(w.done)
	q := &m.q
	ctx, client := q.ctx, q.waits
	for ctx.Err() == nil {
		w.mu.Lock()
		from := w.top
		w.mu.Unlock()
		var get *goredis.StringCmd
		var read *goredis.XStreamSliceCmd
		_, _ = client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			get = p.Get(ctx, w.seqKey)
			read = p.XRead(ctx, &goredis.XReadArgs{Streams: []string{w.stream, "0-" + strconv.FormatUint(from, 10)}, Block: qRecheck})
			return nil
		})
		if ctx.Err() != nil {
			return
		}
		n, gerr := get.Uint64()
		switch {
		case gerr != nil && !errors.Is(gerr, goredis.Nil):
			// The connection or the server failed (go-redis dials
			// again at the next round).
			_ = sleepCtx(ctx, qRecheck)
		case n < from:
			w.restart(n)
		default:
			if streams, rerr := read.Result(); rerr == nil {
				woke := false
				for _, s := range streams {
					for _, e := range s.Messages {
						if v, ok := streamCounter(e.ID); ok {
							woke = w.raise(v) || woke
						}
					}
				}
				if woke {
					// The Waits just woken run on this P before the
					// next round is built and sent.
					runtime.Gosched()
				}
			} else if !errors.Is(rerr, goredis.Nil) {
				_ = sleepCtx(ctx, qRecheck)
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
