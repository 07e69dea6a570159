package tq_test

import (
	"context"
	"testing"
	"time"

	"github.com/tqgo/tqgo/tq"
)

func openURL(t *testing.T, url string) *tq.Client {
	t.Helper()
	c, err := tq.Open(t.Context(), url, tq.Quiet())
	if err != nil {
		t.Fatalf("Open(%q): %v", url, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func rowCount(t *testing.T, c *tq.Client, p string) int {
	t.Helper()
	st, err := c.Status(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Rows
}

// Two clients of memory://NAME share one engine: a put in one wakes a
// Wait in the other, and a claim in one is seen by the other.
func TestMemoryNamedIsShared(t *testing.T) {
	a := openURL(t, "memory://shared-a")
	b := openURL(t, "memory://shared-a")
	waiter := task(t, b, "p", "work")
	got := make(chan *tq.Lease, 1)
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		l, err := waiter.Wait(ctx, 1)
		if err != nil {
			errc <- err
			return
		}
		got <- l
	}()
	putA(t, a, "p", []string{"r0"})
	select {
	case l := <-got:
		if l.Len() != 1 || l.Keys()[0] != "r0" {
			t.Fatalf("the Wait in the second client got %v, want r0", l.Keys())
		}
	case err := <-errc:
		t.Fatalf("the Wait in the second client: %v", err)
	}
	st, err := task(t, a, "p", "work").Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.Leased != 1 {
		t.Errorf("the first client sees %+v, want the second's claim leased", st)
	}
}

// memory://x and memory://y are separate; memory:// is private to its
// Open.
func TestMemoryNamesAreSeparate(t *testing.T) {
	x := openURL(t, "memory://sep-x")
	y := openURL(t, "memory://sep-y")
	p1 := openURL(t, "memory://")
	p2 := openURL(t, "memory://")
	putA(t, x, "p", []string{"r0"})
	putA(t, p1, "p", []string{"r0"})
	if n := rowCount(t, y, "p"); n != 0 {
		t.Errorf("memory://sep-y sees %d rows put in memory://sep-x", n)
	}
	if n := rowCount(t, p2, "p"); n != 0 {
		t.Errorf("a memory:// sees %d rows put in another memory://", n)
	}
	if n := rowCount(t, openURL(t, "memory://sep-x"), "p"); n != 1 {
		t.Errorf("a second memory://sep-x sees %d rows, want 1", n)
	}
}

// A named engine lives while one of its clients is open: closing one
// leaves the other working; once the last closes, the name starts empty.
func TestMemoryNamedLivesWhileOpen(t *testing.T) {
	a, err := tq.Open(t.Context(), "memory://life", tq.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	b, err := tq.Open(t.Context(), "memory://life", tq.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	putA(t, a, "p", []string{"r0"})
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if n := rowCount(t, b, "p"); n != 1 {
		t.Fatalf("after the first client closed, the second sees %d rows, want 1", n)
	}
	putA(t, b, "p", []string{"r1"})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if n := rowCount(t, openURL(t, "memory://life"), "p"); n != 0 {
		t.Errorf("memory://life opened after its last client closed has %d rows, want 0", n)
	}
}
