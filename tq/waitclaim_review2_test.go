package tq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/backends/metadata"
)

// slowClaims is the memory MetaStore whose Claims take delay first,
// whatever their context.
type slowClaims struct {
	*memory.MetaStore
	delay time.Duration
}

func (m slowClaims) Claim(ctx context.Context, partition string, req metadata.ClaimRequest, pick metadata.Pick) (metadata.Claimed, error) {
	time.Sleep(m.delay)
	return m.MetaStore.Claim(ctx, partition, req, pick)
}

// A Wait whose context ends while its claim is in flight on a slow
// engine returns within handBackGrace of its context's end, and Close
// then ends (waiting for the claim's hand-back in the background).
func TestReview2WaitSlowClaimBounded(t *testing.T) {
	st := memory.New()
	meta := slowClaims{MetaStore: memory.NewMetaStore(), delay: 600 * time.Millisecond}
	t.Cleanup(func() { _ = meta.Close() })
	c := newClient(t, unstaged{st}, meta)
	task, err := c.Task("p", "t", []string{"x"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = task.Wait(ctx, 1)
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait: %v, want its context's deadline", err)
	}
	if took > 30*time.Millisecond+100*time.Millisecond+150*time.Millisecond {
		t.Fatalf("Wait returned %v after it began, its context ending at 30ms", took)
	}
	done := make(chan error, 1)
	go func() { done <- c.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close hung after a Wait left its claim in flight")
	}
}
