package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/internal/replica"
	"github.com/tqgo/tqgo/tq"
)

// A Wait with Stall re-claims, replacing its standing claim, every bound;
// when such a re-claim fails the Wait cancels the standing claim it was
// to replace, so the commit that makes rows ready does not lease them to
// a waiter that is gone.
func TestWaitCancelsItsStandingClaimOnFailure(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	eng, err := backends.Open(ctx, "redis://"+srv.Addr()+"/0?prefix=review")
	if err != nil {
		t.Fatal(err)
	}
	meta := replica.NewStore(eng.Log, eng.Data, replica.OwnsLog())
	f := new(backendtest.Faulty)
	c, err := tq.New(backendtest.Wrap(backends.Engine{Data: eng.Data, Meta: meta}, f))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(); _ = meta.Close(); _ = eng.Data.Close() }()
	if err := c.Put(ctx, "p", "r0", map[string]any{"a": int64(1)}, nil); err != nil {
		t.Fatal(err)
	}
	tk, err := c.Task("p", "t", []string{"a", "b"}, tq.Stall(300*time.Millisecond, "peers"), tq.ConsumerName("the-waiter"))
	if err != nil {
		t.Fatal(err)
	}
	f.FailNth(backendtest.OpClaim, 2, nil) // the re-claim after the first look fails
	_, err = tk.Wait(ctx, 1)
	t.Logf("Wait: %v", err)
	if err := c.Put(ctx, "p", "r0", map[string]any{"b": int64(1)}, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	other, _ := c.Task("p", "t", []string{"a", "b"}, tq.ConsumerName("other"))
	l, err := other.Claim(ctx, 1)
	st, _ := other.Status(ctx)
	t.Logf("claim after: %d rows, %v; status leases %+v", l.Len(), err, st.Leases)
	if l.Len() != 1 {
		t.Errorf("the row went to the Wait that returned: %+v", st.Leases)
	}
	_ = errors.New
}
