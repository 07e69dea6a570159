package tqserve_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/tqserve"
)

const callsPath = "/tqgo.v1.Meta/Calls"

// A client makes its calls of Meta on Calls streams it keeps open: many
// claims, few streams.
func TestCallsStreamKept(t *testing.T) {
	s := startServer(t, "memory://tqserve-calls-kept")
	p := startGRPCProxy(t, strings.TrimPrefix(s.URL, "tq://"))
	m := openMeta(t, "tq://"+p.addr())
	for i := range 20 {
		commitRow(t, m, "p", "k"+string(rune('a'+i)))
	}
	for range 20 {
		c, err := m.Claim(callCtx(t), "p", claimReq("t"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Rows) != 1 {
			t.Fatalf("claimed %d rows, want 1", len(c.Rows))
		}
	}
	if n := p.seen(mClaim); n != 20 {
		t.Fatalf("the proxy saw %d claims, want 20", n)
	}
	if n := p.seen(mClaim + "@unary"); n != 0 {
		t.Fatalf("%d claims were unary calls, want 0 (all on Calls)", n)
	}
	// Calls one after another: one stream (two if a call's stream was
	// taken back after the next began).
	if n := p.seen(callsPath); n < 1 || n > 2 {
		t.Fatalf("the client opened %d Calls streams for 60 calls made one at a time, want 1 or 2", n)
	}
}

// A server without Calls (protocol version 3) is served unary calls: the
// client asks once per connection, then makes every call as before.
func TestCallsOnOlderServer(t *testing.T) {
	s, err := tqserve.NewServer(t.Context(), "memory://tqserve-calls-older")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop := tqserve.ServeWithoutCalls(s, lis)
	t.Cleanup(stop)
	p := startGRPCProxy(t, lis.Addr().String())
	m := openMeta(t, "tq://"+p.addr())
	commitRow(t, m, "p", "a")
	commitRow(t, m, "p", "b")
	for range 2 {
		c, err := m.Claim(callCtx(t), "p", claimReq("t"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Rows) != 1 {
			t.Fatalf("claimed %d rows, want 1", len(c.Rows))
		}
	}
	if n := p.seen(callsPath); n != 1 {
		t.Fatalf("the client tried %d Calls streams of a server without them, want 1", n)
	}
	if n := p.seen(mClaim + "@unary"); n != 2 {
		t.Fatalf("%d unary claims, want 2", n)
	}
}

// A call on Calls carries its deadline to the server.
func TestCallsDeadline(t *testing.T) {
	var mu sync.Mutex
	var left time.Duration
	saw := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		if info.FullMethod == mClaim {
			mu.Lock()
			left = -1
			if d, ok := ctx.Deadline(); ok {
				left = time.Until(d)
			}
			mu.Unlock()
		}
		return next(ctx, req)
	}
	s := startServer(t, "memory://tqserve-calls-deadline", tqserve.WithInterceptor(saw))
	m := openMeta(t, s.URL)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := m.Claim(ctx, "p", claimReq("t"), nil); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if left < 25*time.Second || left > 30*time.Second {
		t.Fatalf("the server's claim had %v left of a 30s deadline (-1: none)", left)
	}
}

// A graceful stop does not wait for the Calls streams its clients keep
// open between calls, and a write sent on one after it is refused as
// applying nothing (ErrUnavailable, not ErrOutcomeUnknown).
func TestCallsGracefulStop(t *testing.T) {
	r, err := newServerAt(t, "memory://tqserve-calls-graceful")
	if err != nil {
		t.Fatal(err)
	}
	m := openMeta(t, "tq://"+r.addr)
	commitRow(t, m, "p", "a") // the client now keeps a stream
	stopped := make(chan struct{})
	go func() { r.srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("a graceful stop waited on a client's idle Calls stream (5 s)")
	}
	_, err = m.Claim(callCtx(t), "p", claimReq("t"), nil)
	if !errors.Is(err, backends.ErrUnavailable) || errors.Is(err, backends.ErrOutcomeUnknown) {
		t.Fatalf("claim after a graceful stop: %v, want ErrUnavailable alone", err)
	}
}

// A call whose context ends while it waits on its Calls stream returns
// at once; the stream is given up, and the next call goes on a new one.
func TestCallsContextEnds(t *testing.T) {
	s := startServer(t, "memory://tqserve-calls-ctx")
	p := startGRPCProxy(t, strings.TrimPrefix(s.URL, "tq://"))
	m := openMeta(t, "tq://"+p.addr())
	commitRow(t, m, "p", "a")
	p.arm(mList, proxyDelayReply, 2*time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := m.List(ctx, "p")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("list past its deadline: %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("list returned %v after its 200ms deadline", d)
	}
	rows, err := m.List(callCtx(t), "p")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 {
		t.Fatalf("listed %d rows, want 1", len(rows))
	}
}

// The streams a client keeps all end with their connection; a call made
// once the client knows is not sent on one of them (it would fail, a write with
// ErrOutcomeUnknown, though nothing left the client): it goes on a new
// stream of a new connection.
func TestCallsAfterConnectionLost(t *testing.T) {
	s := startServer(t, "memory://tqserve-calls-lost")
	p := startGRPCProxy(t, strings.TrimPrefix(s.URL, "tq://"))
	m := openMeta(t, "tq://"+p.addr())
	commitRow(t, m, "p", "a")
	// Eight calls at once, their replies held: eight streams kept.
	p.arm(mLookup, proxyDelayReply, 300*time.Millisecond)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { _, errs[i] = m.Lookup(callCtx(t), "p", []string{"a"}) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := p.seen(callsPath); n < 2 {
		t.Fatalf("eight calls at once opened %d Calls streams, want several", n)
	}
	p.cutAll()
	// Until the client reads the close, a call may still go out on the
	// connection and be lost with it (as a unary call would): give it the
	// time to read it.
	time.Sleep(300 * time.Millisecond)
	commitRow(t, m, "p", "b")
	c, err := m.Claim(callCtx(t), "p", claimReq("t"), nil)
	if err != nil {
		t.Fatalf("claim after the connection was lost: %v", err)
	}
	if len(c.Rows) != 1 {
		t.Fatalf("claimed %d rows, want 1", len(c.Rows))
	}
	if _, err := m.Lookup(callCtx(t), "p", []string{"a", "b"}); err != nil {
		t.Fatalf("lookup after the connection was lost: %v", err)
	}
}

// A server of the URL stopping gracefully ends the streams the client
// keeps to it with CLOSED: the next call goes to another of the URL's
// servers, with no error.
func TestCallsGracefulStopOtherServer(t *testing.T) {
	a, err := newServerAt(t, "memory://tqserve-calls-two")
	if err != nil {
		t.Fatal(err)
	}
	b, err := newServerAt(t, "memory://tqserve-calls-two")
	if err != nil {
		t.Fatal(err)
	}
	m := openMeta(t, "tq://"+a.addr+","+b.addr)
	// Calls at once: several streams kept, to the first server.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = tryCommit(m, "p", "k"+string(rune('a'+i))) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	a.srv.GracefulStop()
	for range 6 {
		rows, err := m.Lookup(callCtx(t), "p", []string{"ka"})
		if err != nil {
			t.Fatalf("lookup after the first server stopped: %v", err)
		}
		if len(rows) != 1 || rows[0] == nil {
			t.Fatalf("lookup after the first server stopped: %v, want the row", rows)
		}
	}
}
