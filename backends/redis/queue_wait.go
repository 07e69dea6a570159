package redis

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
)

// qRecheck is how often a hub reads the change counters of its partitions
// while no message comes: a safety net for a message lost with a
// connection (go-redis resubscribes, and a resubscription reads the
// counter too). It is the only request an idle Wait sends: one pipeline
// per hub.
var qRecheck = time.Second

// qHub is a Meta's subscriber connection to one server: every partition
// some Wait of the Meta waits on, whose channel that server serves, is
// subscribed on it (SSUBSCRIBE) while any waits, and one goroutine reads
// it. A standalone server has one hub; on a Cluster a connection can
// only subscribe to shard channels of the node that serves their slot,
// so there is one hub per master node waited on.
type qHub struct {
	key    string // in Meta.q.hubs
	ps     *goredis.PubSub
	cancel context.CancelFunc
	done   chan struct{} // closed when the reader has stopped

	mu    sync.Mutex
	parts map[string]*qSub // by channel
}

// qSub is one partition's subscription, shared by every Wait of the Meta
// on it.
type qSub struct {
	refs    int // guarded by Meta.q.mu
	hub     *qHub
	channel string
	seqKey  string

	mu      sync.Mutex
	known   bool
	seq     uint64
	changed chan struct{} // closed and replaced at each change of seq
}

func (s *qSub) set(seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.known && s.seq == seq {
		return
	}
	s.known, s.seq = true, seq
	close(s.changed)
	s.changed = make(chan struct{})
}

// Wait implements backends.Queue. It returns nil once the partition's
// change counter, as its channel or a read of it tells, differs from
// mark.Seq, or once mark.Wake has passed; ctx.Err() when ctx ends first;
// backends.ErrClosed when the Meta closes meanwhile.
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
	sub, err := m.subscribe(ctx, partition)
	if err != nil {
		return err
	}
	defer m.unsubscribe(partition, sub)
	for {
		sub.mu.Lock()
		known, seq, changed := sub.known, sub.seq, sub.changed
		sub.mu.Unlock()
		if known && seq != mark.Seq {
			return nil
		}
		select {
		case <-changed:
		case <-wake:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-sub.hub.done:
			return backends.ErrClosed
		}
	}
}

// hubOf returns the key of the hub for channel and how to open its
// subscriber connection.
func (m *Meta) hubOf(ctx context.Context, channel string) (string, func(context.Context) *goredis.PubSub, error) {
	switch c := m.s.client.(type) {
	case *goredis.Client:
		return "", func(ctx context.Context) *goredis.PubSub { return c.SSubscribe(ctx) }, nil
	case *goredis.ClusterClient:
		node, err := c.MasterForKey(ctx, channel)
		if err != nil {
			return "", nil, m.s.wrap(ctx, "wait", err)
		}
		return node.Options().Addr, func(ctx context.Context) *goredis.PubSub { return node.SSubscribe(ctx) }, nil
	}
	// Another client (a Ring): a connection per partition.
	return "channel:" + channel, func(ctx context.Context) *goredis.PubSub { return m.s.client.SSubscribe(ctx) }, nil
}

func (m *Meta) subscribe(ctx context.Context, partition string) (*qSub, error) {
	q := &m.q
	qk := m.qKeys(partition, "")
	q.mu.Lock()
	if s := q.subs[partition]; s != nil && !q.closed {
		s.refs++
		q.mu.Unlock()
		return s, nil
	}
	q.mu.Unlock()
	key, open, err := m.hubOf(ctx, qk.c)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil, backends.ErrClosed
	}
	if s := q.subs[partition]; s != nil {
		s.refs++
		return s, nil
	}
	h := q.hubs[key]
	if h == nil {
		hctx, cancel := context.WithCancel(context.Background())
		h = &qHub{key: key, ps: open(hctx), cancel: cancel, done: make(chan struct{}), parts: map[string]*qSub{}}
		if q.hubs == nil {
			q.hubs = map[string]*qHub{}
		}
		q.hubs[key] = h
		go h.run(hctx, m.s.client)
	}
	s := &qSub{refs: 1, hub: h, channel: qk.c, seqKey: qk.seq, changed: make(chan struct{})}
	if q.subs == nil {
		q.subs = map[string]*qSub{}
	}
	q.subs[partition] = s
	h.mu.Lock()
	h.parts[qk.c] = s
	h.mu.Unlock()
	// The reader reads the counter once the server confirms; a failure
	// here leaves the hub's reconnection and re-reads to catch up.
	_ = h.ps.SSubscribe(context.WithoutCancel(ctx), qk.c)
	return s, nil
}

func (m *Meta) unsubscribe(partition string, s *qSub) {
	q := &m.q
	q.mu.Lock()
	s.refs--
	if s.refs > 0 || q.subs[partition] != s {
		q.mu.Unlock()
		return
	}
	delete(q.subs, partition)
	h := s.hub
	h.mu.Lock()
	delete(h.parts, s.channel)
	empty := len(h.parts) == 0
	h.mu.Unlock()
	if !empty {
		// Under q.mu, so that a subscribe of the partition cannot come
		// between (it writes the command; the reply is the reader's).
		_ = h.ps.SUnsubscribe(context.Background(), s.channel)
		q.mu.Unlock()
		return
	}
	if q.hubs[h.key] == h {
		delete(q.hubs, h.key)
	}
	q.mu.Unlock()
	h.stop()
}

func (h *qHub) stop() {
	h.cancel()
	_ = h.ps.Close()
	<-h.done
}

// closeWaits stops every hub: their Waits return ErrClosed.
func (m *Meta) closeWaits() {
	q := &m.q
	q.mu.Lock()
	q.closed = true
	hubs := q.hubs
	q.hubs, q.subs = nil, nil
	q.mu.Unlock()
	for _, h := range hubs {
		h.stop()
	}
}

// run reads the hub's connection until ctx ends: each message carries a
// partition's new counter; each (re)subscription reads that partition's
// counter, and each qRecheck without a message every partition's.
func (h *qHub) run(ctx context.Context, client goredis.UniversalClient) {
	defer close(h.done)
	check := func(subs ...*qSub) {
		if len(subs) == 0 {
			return
		}
		cmds := make([]*goredis.StringCmd, len(subs))
		_, _ = client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for i, s := range subs {
				cmds[i] = p.Get(ctx, s.seqKey)
			}
			return nil
		})
		for i, s := range subs {
			n, err := cmds[i].Uint64()
			if err == nil || errors.Is(err, goredis.Nil) {
				s.set(n)
			}
		}
	}
	all := func() []*qSub {
		h.mu.Lock()
		defer h.mu.Unlock()
		out := make([]*qSub, 0, len(h.parts))
		for _, s := range h.parts {
			out = append(out, s)
		}
		return out
	}
	of := func(channel string) *qSub {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.parts[channel]
	}
	for ctx.Err() == nil {
		msg, err := h.ps.ReceiveTimeout(ctx, qRecheck)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if !isTimeout(err) {
				// The connection failed (go-redis reconnects and
				// resubscribes on the next receive), or the server
				// refused a subscription (a slot that moved).
				if sleepCtx(ctx, qRecheck) != nil {
					return
				}
			}
			check(all()...)
			continue
		}
		switch x := msg.(type) {
		case *goredis.Subscription:
			if s := of(x.Channel); s != nil && x.Kind == "ssubscribe" {
				check(s)
			}
		case *goredis.Message:
			if s := of(x.Channel); s != nil {
				if n, err := strconv.ParseUint(x.Payload, 10, 64); err == nil {
					s.set(n)
				}
			}
		}
	}
}
