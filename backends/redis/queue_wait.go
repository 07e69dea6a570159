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

// qRecheck is how often a subscription reads the partition's change
// counter while no message comes: a safety net for a message lost with a
// connection (go-redis resubscribes, and a resubscription reads it too).
// It is the only request an idle Wait sends.
var qRecheck = time.Second

// qSub is a subscription to one partition's change channel, shared by
// every Wait of this Meta on the partition while any waits: one
// connection (SSUBSCRIBE) per partition waited on, one goroutine reading
// it. On a Cluster a connection can only subscribe to channels of the
// node that serves their slot, so subscriptions are per partition there,
// and, for one code path, on a standalone server too.
type qSub struct {
	refs   int // guarded by Meta.q.mu
	ps     *goredis.PubSub
	cancel context.CancelFunc
	done   chan struct{} // closed when the reader has stopped

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
	sub, err := m.subscribe(partition)
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
		case <-sub.done:
			return backends.ErrClosed
		}
	}
}

func (m *Meta) subscribe(partition string) (*qSub, error) {
	q := &m.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil, backends.ErrClosed
	}
	if s := q.subs[partition]; s != nil {
		s.refs++
		return s, nil
	}
	if q.subs == nil {
		q.subs = map[string]*qSub{}
	}
	qk := m.qKeys(partition, "")
	ctx, cancel := context.WithCancel(context.Background())
	s := &qSub{refs: 1, cancel: cancel, done: make(chan struct{}), changed: make(chan struct{})}
	s.ps = m.s.client.SSubscribe(ctx, qk.c)
	q.subs[partition] = s
	go s.run(ctx, m.s.client, qk.seq)
	return s, nil
}

func (m *Meta) unsubscribe(partition string, s *qSub) {
	q := &m.q
	q.mu.Lock()
	s.refs--
	last := s.refs == 0 && q.subs[partition] == s
	if last {
		delete(q.subs, partition)
	}
	q.mu.Unlock()
	if last {
		s.stop()
	}
}

func (s *qSub) stop() {
	s.cancel()
	_ = s.ps.Close()
	<-s.done
}

// closeWaits stops every subscription: their Waits return ErrClosed.
func (m *Meta) closeWaits() {
	q := &m.q
	q.mu.Lock()
	q.closed = true
	subs := q.subs
	q.subs = nil
	q.mu.Unlock()
	for _, s := range subs {
		s.stop()
	}
}

// run reads the subscription until ctx ends: each message carries the
// counter's new value; each (re)subscription, and each qRecheck without a
// message, reads the counter.
func (s *qSub) run(ctx context.Context, client goredis.UniversalClient, seqKey string) {
	defer close(s.done)
	check := func() {
		n, err := client.Get(ctx, seqKey).Uint64()
		if err == nil || errors.Is(err, goredis.Nil) {
			s.set(n)
		}
	}
	for ctx.Err() == nil {
		msg, err := s.ps.ReceiveTimeout(ctx, qRecheck)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if !isTimeout(err) {
				// The connection failed: go-redis reconnects and
				// resubscribes on the next receive.
				if sleepCtx(ctx, qRecheck) != nil {
					return
				}
			}
			check()
			continue
		}
		switch x := msg.(type) {
		case *goredis.Subscription:
			if x.Kind == "ssubscribe" {
				check()
			}
		case *goredis.Message:
			if n, err := strconv.ParseUint(x.Payload, 10, 64); err == nil {
				s.set(n)
			}
		}
	}
}
