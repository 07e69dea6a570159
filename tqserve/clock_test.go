package tqserve_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/tqserve"
	"github.com/tqgo/tqgo/tqserve/tqpb"
)

// clockServer answers Info alone, its clock ahead of this process's by
// ahead.
type clockServer struct {
	tqpb.UnimplementedMetaServer
	ahead atomic.Int64
}

func (c *clockServer) Info(context.Context, *tqpb.InfoRequest) (*tqpb.InfoReply, error) {
	now := time.Now().Add(time.Duration(c.ahead.Load()))
	return &tqpb.InfoReply{Version: 1, Server: "clock", Now: &tqpb.Moment{UnixNs: now.UnixNano()}}, nil
}

// serveClock serves cs on addr ("127.0.0.1:0": a free port) until stop.
func serveClock(t *testing.T, addr string, cs *clockServer) (string, func()) {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	tqpb.RegisterMetaServer(g, cs)
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(lis) }()
	stop := func() { g.Stop(); <-done }
	t.Cleanup(stop)
	return lis.Addr().String(), stop
}

// skewNear waits until m's skew is want (within a second).
func skewNear(t *testing.T, m *tqserve.Meta, want time.Duration) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := tqserve.Skew(m)
		if d := got - want; d < time.Second && d > -time.Second {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("skew %v, want %v", got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A client converts times by the server's clock less its own; a clock
// that moves while the client runs (a long job, a server stepped by NTP,
// a server restarted on another host) is taken again: every so often,
// and at the first call after the server could not be reached.
func TestSkewRefreshed(t *testing.T) {
	ctx := t.Context()
	cs := &clockServer{}
	addr, stop := serveClock(t, "127.0.0.1:0", cs)
	eng, err := backends.Open(ctx, "tq://"+addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	m := eng.Meta.(*tqserve.Meta)
	skewNear(t, m, 0)

	// Every so often.
	restore := tqserve.SetSkewEvery(10 * time.Millisecond)
	cs.ahead.Store(int64(time.Hour))
	skewNear(t, m, time.Hour)
	restore()

	// After the server was away: here, restarted an hour behind.
	restore = tqserve.SetSkewEvery(time.Hour)
	defer restore()
	stop()
	if _, err := m.List(ctx, "p"); err == nil {
		t.Fatal("a call with the server down succeeded")
	}
	behind := &clockServer{}
	behind.ahead.Store(int64(-time.Hour))
	serveClock(t, addr, behind)
	skewNear(t, m, -time.Hour)
}
