package tqserve_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
	"github.com/tqgo/tqgo/tqserve"
)

// liveServer is a server a test stops, kills or leaves to its cleanup.
type liveServer struct {
	addr string
	srv  *tqserve.Server
	done chan error
	off  bool
}

func serveOn(t *testing.T, engineURL string, opts ...tqserve.ServerOption) *liveServer {
	t.Helper()
	s, err := tqserve.NewServer(t.Context(), engineURL, opts...)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ls := &liveServer{addr: lis.Addr().String(), srv: s, done: make(chan error, 1)}
	go func() { ls.done <- s.Serve(lis) }()
	t.Cleanup(func() {
		if !ls.off {
			_ = s.Close()
			<-ls.done
		}
	})
	return ls
}

func (s *liveServer) kill(t *testing.T) {
	t.Helper()
	s.off = true
	if err := tqserve.Kill(s.srv); err != nil {
		t.Errorf("kill: %v", err)
	}
	<-s.done
}

func (s *liveServer) stop(t *testing.T) {
	t.Helper()
	s.off = true
	s.srv.GracefulStop()
	if err := <-s.done; err != nil {
		t.Errorf("serve: %v", err)
	}
	if err := s.srv.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
}

// Servers sharing a Redis serve each partition from one of them: a call
// that reaches another is sent on (MOVED) and the client follows by
// itself. A server stopped gracefully hands its partitions over at once;
// one killed is replaced once its ownership ends. Nothing acknowledged
// comes back, nothing is lost, no call of the user's fails.
func TestOwnership(t *testing.T) {
	redistest.Available(t)
	rs := redistest.Start(t)
	engine := rs.URL() + "?prefix=own"
	const ttl = time.Second
	quiet := tqserve.WithLogger(discardLogger())
	s1 := serveOn(t, engine, tqserve.WithOwnership(ttl), quiet)
	s2 := serveOn(t, engine, tqserve.WithOwnership(ttl), quiet)
	ctx := t.Context()

	a := openClient(t, "tq://"+s1.addr+","+s2.addr)
	b := openClient(t, "tq://"+s2.addr)
	for i := range 8 {
		if err := a.Put(ctx, "p", fmt.Sprintf("k%d", i), map[string]any{"x": int64(i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if got := tqserve.Owned(s1.srv); !slices.Equal(got, []string{"p"}) {
		t.Fatalf("s1 owns %v, want [p]", got)
	}
	// b asks s2, which sends it to s1.
	rows, err := b.List(ctx, "p")
	if err != nil || len(rows.Rows) != 8 {
		t.Fatalf("list through s2: %v, %v", rows, err)
	}
	if got := tqserve.Owned(s2.srv); len(got) != 0 {
		t.Fatalf("s2 owns %v after sending b on, want none", got)
	}
	task, err := b.Task("p", "work", []string{"x"})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	claimAck := func(n int) {
		t.Helper()
		l, err := task.Claim(ctx, n)
		if err != nil || l == nil {
			t.Fatalf("claim: %v, %v", l, err)
		}
		for _, k := range l.Keys() {
			if seen[k] {
				t.Fatalf("%s delivered again after its ack", k)
			}
			seen[k] = true
		}
		if err := l.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	claimAck(2)

	// A graceful stop hands p over at once: b's next call is served by
	// s2 with no wait for the ownership to end.
	s1.stop(t)
	start := time.Now()
	claimAck(2)
	if d := time.Since(start); d >= ttl {
		t.Errorf("claim after a graceful hand-over took %v, not under the ownership's %v", d, ttl)
	}
	if got := tqserve.Owned(s2.srv); !slices.Equal(got, []string{"p"}) {
		t.Fatalf("s2 owns %v after s1 handed over, want [p]", got)
	}

	// A killed owner's partitions pass on once its ownership ends.
	s3 := serveOn(t, engine, tqserve.WithOwnership(ttl), quiet)
	c := openClient(t, "tq://"+s3.addr)
	ctask, err := c.Task("p", "work", []string{"x"})
	if err != nil {
		t.Fatal(err)
	}
	s2.kill(t)
	start = time.Now()
	l, err := ctask.Claim(ctx, 4)
	if err != nil || l == nil {
		t.Fatalf("claim after the owner was killed: %v, %v", l, err)
	}
	took := time.Since(start)
	for _, k := range l.Keys() {
		if seen[k] {
			t.Fatalf("%s delivered again after its ack", k)
		}
		seen[k] = true
	}
	if err := l.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 8 {
		t.Fatalf("%d rows delivered, want 8", len(seen))
	}
	if took > ttl+2*time.Second {
		t.Errorf("takeover took %v, want within the ownership (%v) and a retry", took, ttl)
	}
	t.Logf("takeover after a kill: first claim in %v (ownership %v)", took, ttl)
	st, err := c.Status(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Tasks["work"]; got.Acked != 8 || got.Leased != 0 {
		t.Fatalf("status after takeover: %+v, want 8 acked", got)
	}
}

// A claim registered to wait (a Wait's standing claim) lives in the
// server that holds it for its client: when that server is killed, the
// client's Wait ends with the connection, and the client claims afresh
// (or is gone with it). The server that takes the partition over cancels
// such claims, so that rows committed after are not leased to a claim
// nobody waits on, held from every live consumer until that lease ends.
func TestTakeoverCancelsStandingClaims(t *testing.T) {
	redistest.Available(t)
	rs := redistest.Start(t)
	engine := rs.URL() + "?prefix=stand"
	const ttl = 500 * time.Millisecond
	quiet := tqserve.WithLogger(discardLogger())
	s1 := serveOn(t, engine, tqserve.WithOwnership(ttl), quiet)
	s2 := serveOn(t, engine, tqserve.WithOwnership(ttl), quiet)
	ctx := t.Context()

	// A consumer of s1 found nothing and stands; it never calls again.
	gone := openMeta(t, "tq://"+s1.addr)
	sel := metadata.Select{Fields: []string{"x"}}
	got, err := gone.Claim(ctx, "p", metadata.ClaimRequest{Task: "work", Lease: time.Hour, Rows: 4, Min: 1, Hold: time.Hour, Select: sel}, nil)
	if err != nil || got.Waiting == "" {
		t.Fatalf("claim on an empty partition: %+v, %v; want it registered", got, err)
	}
	if got := tqserve.Owned(s1.srv); !slices.Equal(got, []string{"p"}) {
		t.Fatalf("s1 owns %v, want [p]", got)
	}
	s1.kill(t)

	// A live consumer of s2, once s2 serves p, is registered too: the
	// takeover cancels the dead server's claims, not the live ones.
	c := openClient(t, "tq://"+s2.addr)
	live := openMeta(t, "tq://"+s2.addr)
	var waiting metadata.Claimed
	deadline := time.Now().Add(10 * ttl)
	for {
		waiting, err = live.Claim(ctx, "p", metadata.ClaimRequest{Task: "other", Lease: time.Hour, Rows: 1, Min: 1, Hold: time.Hour, Select: sel}, nil)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(ttl / 10) // p unserved until s1's ownership ends: try again
	}
	if err != nil || waiting.Waiting == "" {
		t.Fatalf("claim through s2 after s1 was killed: %+v, %v; want it registered", waiting, err)
	}
	for i := range 4 {
		if err := c.Put(ctx, "p", fmt.Sprintf("k%d", i), map[string]any{"x": int64(i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	task, err := c.Task("p", "work", []string{"x"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := task.Claim(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	if n := l.Len(); n != 4 {
		st, _ := c.Status(ctx, "p")
		t.Fatalf("claim of 4 rows after the takeover leased %d (status %+v): rows went to the dead server's standing claim", n, st.Tasks["work"])
	}
	// The live claim was served: its replacing claim takes the row.
	if err := live.Wait(ctx, "p", waiting.Mark); err != nil {
		t.Fatal(err)
	}
	served, err := live.Claim(ctx, "p", metadata.ClaimRequest{Task: "other", Lease: time.Hour, Rows: 1, Min: 1, Select: sel, Replaces: waiting.Waiting}, nil)
	if err != nil || len(served.Rows) != 1 {
		t.Fatalf("the live standing claim after the takeover: %+v, %v; want it served one row", served, err)
	}
}

func TestAdvertisedOnMoved(t *testing.T) {
	redistest.Available(t)
	rs := redistest.Start(t)
	engine := rs.URL() + "?prefix=adv"
	s1 := serveOn(t, engine, tqserve.WithAdvertise("unreachable.invalid:1"), tqserve.WithLogger(discardLogger()))
	s2 := serveOn(t, engine, tqserve.WithLogger(discardLogger()))
	a := openClient(t, "tq://"+s1.addr)
	if err := a.Put(t.Context(), "p", "k", map[string]any{"x": int64(1)}, nil); err != nil {
		t.Fatal(err)
	}
	// b is sent to an address it cannot reach: its call fails, typed,
	// within its deadline, saying where it was sent.
	b, err := tq.Open(t.Context(), "tq://"+s2.addr, tq.Quiet(), tq.WithRetry(tq.NoRetry))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err = b.List(ctx, "p")
	if err == nil || !strings.Contains(err.Error(), "unreachable.invalid:1") {
		t.Fatalf("list sent to an unreachable owner: %v, want an error naming it", err)
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// A partition no call reaches for a whole ownership is let go: a server
// does not renew every partition it ever served for as long as it runs
// (a job that makes a partition per step), and another server takes the
// partition at its next call without a MOVED.
func TestIdleOwnershipLapses(t *testing.T) {
	redistest.Available(t)
	rs := redistest.Start(t)
	engine := rs.URL() + "?prefix=idle"
	const ttl = 300 * time.Millisecond
	quiet := tqserve.WithLogger(discardLogger())
	s1 := serveOn(t, engine, tqserve.WithOwnership(ttl), quiet)
	s2 := serveOn(t, engine, tqserve.WithOwnership(ttl), quiet)
	a := openClient(t, "tq://"+s1.addr)
	if err := a.Put(t.Context(), "p", "k", map[string]any{"x": int64(1)}, nil); err != nil {
		t.Fatal(err)
	}
	if got := tqserve.Owned(s1.srv); !slices.Equal(got, []string{"p"}) {
		t.Fatalf("s1 owns %v, want [p]", got)
	}
	deadline := time.Now().Add(20 * ttl)
	for len(tqserve.Owned(s1.srv)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("s1 still owns %v after %v with no call", tqserve.Owned(s1.srv), 20*ttl)
		}
		time.Sleep(ttl / 3)
	}
	// Let go, not renewed since: its owner key ends within an ownership.
	time.Sleep(ttl)
	b := openClient(t, "tq://"+s2.addr)
	rows, err := b.List(t.Context(), "p")
	if err != nil || len(rows.Rows) != 1 {
		t.Fatalf("list through s2: %v, %v", rows, err)
	}
	if got := tqserve.Owned(s2.srv); !slices.Equal(got, []string{"p"}) {
		t.Fatalf("s2 owns %v after p lapsed at s1, want [p]", got)
	}
}
