package tqserve_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/tqserve"
)

// Opening a client of a server that does not answer ends with the
// caller's context, with an error that names the server and says it did
// not answer (and matches the context's error).
func TestOpenUnreachable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	if err := lis.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err = backends.Open(ctx, "tq://"+addr)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), addr) || errors.Is(err, backends.ErrUnavailable) {
		t.Fatalf("open of a server that does not answer: %v, want the context's error naming %s", err, addr)
	}
}

// A client opened before its server starts waits for it, and takes the
// server's clock from a round trip of its own, not from the wait: times
// it gets from the server (a lease's end) are right.
func TestOpenBeforeServer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	if err := lis.Close(); err != nil {
		t.Fatal(err)
	}
	type opened struct {
		eng backends.Engine
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		eng, err := backends.Open(callCtx(t), "tq://"+addr)
		ch <- opened{eng, err}
	}()
	time.Sleep(300 * time.Millisecond)
	s, err := tqserve.NewServer(t.Context(), "memory://tqserve-open-before")
	if err != nil {
		t.Fatal(err)
	}
	lis, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(lis) }()
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	o := <-ch
	if o.err != nil {
		t.Fatal(o.err)
	}
	t.Cleanup(func() { _ = o.eng.Meta.Close(); _ = o.eng.Data.Close() })
	m := o.eng.Meta.(metadata.MetaStore)
	commitRow(t, m, "p", "a")
	c, err := m.Claim(callCtx(t), "p", claimReq("t"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if off := time.Until(c.Until) - time.Minute; off < -150*time.Millisecond || off > 150*time.Millisecond {
		t.Fatalf("a lease of a minute ends in %v: the server's clock taken %v off", time.Until(c.Until), off)
	}
}
