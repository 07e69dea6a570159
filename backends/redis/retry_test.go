package redis_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/internal/replica"
	"github.com/tqgo/tqgo/tq"
)

// retryCounter is a Tracer counting the retries of every call.
type retryCounter struct{ n atomic.Int64 }

func (r *retryCounter) TraceStart(ctx context.Context, _ *tq.Client, _ tq.Call) context.Context {
	return ctx
}
func (r *retryCounter) TraceEnd(_ context.Context, _ *tq.Client, _ tq.Call, end tq.CallEnd) {
	r.n.Add(end.Retries)
}

// refusingProxy forwards TCP to a server; down closes its listener and
// every connection through it, so that dials are refused (ECONNREFUSED),
// as while a server restarts, and up listens again on the same address.
type refusingProxy struct {
	addr, target string
	wg           sync.WaitGroup

	mu    sync.Mutex // guards ln and conns
	ln    net.Listener
	conns map[net.Conn]bool
}

func startRefusingProxy(t *testing.T, target string) *refusingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &refusingProxy{addr: ln.Addr().String(), target: target, conns: map[net.Conn]bool{}}
	p.serve(ln)
	t.Cleanup(func() { p.down(); p.wg.Wait() })
	return p
}

func (p *refusingProxy) url(prefix string) string { return "redis://" + p.addr + "/0?prefix=" + prefix }

func (p *refusingProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", p.target)
			if err != nil {
				client.Close()
				continue
			}
			p.mu.Lock()
			p.conns[client], p.conns[server] = true, true
			p.mu.Unlock()
			for _, pair := range [][2]net.Conn{{server, client}, {client, server}} {
				p.wg.Go(func() {
					pump(pair[0], pair[1], nil)
					pair[0].Close()
					pair[1].Close()
				})
			}
		}
	})
}

func (p *refusingProxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *refusingProxy) up(t *testing.T) {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatalf("listening again on %s: %v", p.addr, err)
	}
	p.serve(ln)
}

// TestRetryThroughOutage: a producer putting and a consumer claiming and
// acknowledging through a link that refuses every connection for 80 ms,
// then for 5 s, see no error: every request that failed without applying
// is made again once the server is back (the default RetryPolicy), and
// every row is consumed.
func TestRetryThroughOutage(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, outage := range []time.Duration{80 * time.Millisecond, 5 * time.Second} {
		t.Run(outage.String(), func(t *testing.T) {
			p := startRefusingProxy(t, srv.Addr())
			var retries retryCounter
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			prefix := fmt.Sprintf("retry%d", outage.Milliseconds())
			c, err := tq.Open(ctx, p.url(prefix), tq.WithTracer(&retries))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			task, err := c.Task("p", "consume", []string{"x"}, tq.LeaseFor(30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			const rows = 60
			var wg sync.WaitGroup
			errs := make(chan error, 2)
			acked := map[string]bool{}
			wg.Add(2)
			go func() { // the producer: a row every 50 ms
				defer wg.Done()
				for i := range rows {
					if err := c.Put(ctx, "p", fmt.Sprintf("k%03d", i), map[string]any{"x": int64(i)}, nil); err != nil {
						errs <- fmt.Errorf("put %d: %w", i, err)
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
			}()
			go func() { // the consumer
				defer wg.Done()
				for len(acked) < rows {
					l, err := task.Wait(ctx, 4, tq.AtLeast(1))
					if err != nil {
						errs <- fmt.Errorf("wait: %w", err)
						return
					}
					if err := l.Ack(ctx); err != nil {
						errs <- fmt.Errorf("ack %q: %w", l.Keys(), err)
						return
					}
					for _, k := range l.Keys() {
						acked[k] = true
					}
				}
			}()
			time.Sleep(time.Second)
			p.down()
			time.Sleep(outage)
			p.up(t)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Errorf("through a %v outage: %v", outage, err)
			}
			if len(acked) != rows {
				t.Errorf("acked %d rows of %d", len(acked), rows)
			}
			// How the outage was ridden out varies with where it caught
			// each call: a request that failed definitely is retried
			// (counted here), one whose reply was lost is settled by the
			// engine, which keeps trying (not counted). Without either,
			// a call above would have failed.
			t.Logf("calls retried %d requests through a %v outage", retries.n.Load(), outage)
			st, err := task.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.Acked != rows || st.Leased != 0 {
				t.Errorf("after the run: %+v, want %d acked", st, rows)
			}
		})
	}
}

// TestRetryGivesUp: with a policy of 1 s, a put through a link refusing
// every connection fails after about that long with an error matching
// ErrUnavailable (it applied nothing) and saying how long it retried;
// with NoRetry it fails at once. (A request sent on a connection the link
// then closed is settled first, for up to the settle bound, here 500 ms:
// it may have run.)
func TestRetryGivesUp(t *testing.T) {
	defer replica.SetSettleFor(500 * time.Millisecond)()
	srv := redistest.Start(t)
	p := startSwitchProxy(t, srv.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name   string
		policy tq.RetryPolicy
		within time.Duration
	}{
		{"1s", tq.RetryPolicy{For: time.Second}, 4 * time.Second},
		{"none", tq.NoRetry, 1500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p.switchTo(srv.Addr())
			c, err := tq.Open(ctx, p.url("giveup"+tc.name, "&dial_timeout=200ms"), tq.WithRetry(tc.policy))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := c.Put(ctx, "p", "before", map[string]any{"x": int64(1)}, nil); err != nil {
				t.Fatal(err)
			}
			p.switchTo("")
			start := time.Now()
			err = c.Put(ctx, "p", "during", map[string]any{"x": int64(2)}, nil)
			took := time.Since(start)
			if !errors.Is(err, tq.ErrUnavailable) || errors.Is(err, tq.ErrOutcomeUnknown) {
				t.Fatalf("put with the server unreachable: %v, want a definite ErrUnavailable", err)
			}
			if took > tc.within {
				t.Errorf("put failed after %v, want within %v", took, tc.within)
			}
			if tc.policy.For > 0 && took < tc.policy.For/2 {
				t.Errorf("put failed after %v, before its policy's %v", took, tc.policy.For)
			}
			t.Logf("%v: %v", took.Round(time.Millisecond), err)
			p.switchTo(srv.Addr())
			b, err := c.Lookup(ctx, "p", []string{"before"})
			if err != nil || len(b.Rows) != 1 {
				t.Fatalf("lookup after the outage: %v", err)
			}
			if _, err := c.Lookup(ctx, "p", []string{"during"}); !errors.Is(err, tq.ErrNotFound) {
				t.Errorf("the failed put's row: %v, want ErrNotFound", err)
			}
		})
	}
}

// TestWithRetryChecks: a policy that cannot work is refused by Open.
func TestWithRetryChecks(t *testing.T) {
	for _, p := range []tq.RetryPolicy{{Initial: -1}, {Max: -1}, {Initial: time.Second, Max: time.Millisecond}} {
		if _, err := tq.Open(context.Background(), "memory://", tq.WithRetry(p)); !errors.Is(err, tq.ErrInvalid) {
			t.Errorf("WithRetry(%+v): %v, want ErrInvalid", p, err)
		}
	}
}

// ConnStats counts the connections a client opened, and none once it is
// closed.
func TestConnStats(t *testing.T) {
	srv := redistest.Start(t)
	c, err := tq.Open(t.Context(), srv.URL()+"?prefix=conns")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Put(t.Context(), "p", "k", map[string]any{"x": int64(1)}, nil); err != nil {
		t.Fatal(err)
	}
	st, ok := c.ConnStats()
	if !ok || st.Open < 1 || st.Idle > st.Open {
		t.Errorf("after a put: %+v, %v; want a connection open", st, ok)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if st, _ := c.ConnStats(); st.Open != 0 {
		t.Errorf("after Close: %+v, want none open", st)
	}
	m, err := tq.Open(t.Context(), "memory://")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, ok := m.ConnStats(); ok {
		t.Error("the memory engine reports connections")
	}
}
