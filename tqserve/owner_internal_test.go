package tqserve

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// gatedOwners is a backends.Owners whose Own waits for the test.
type gatedOwners struct {
	entered, release chan struct{}

	mu    sync.Mutex
	owner map[string]string
}

func (g *gatedOwners) Own(ctx context.Context, partition, holder, _ string, ttl time.Duration) (string, time.Duration, error) {
	g.entered <- struct{}{}
	<-g.release
	g.mu.Lock()
	defer g.mu.Unlock()
	if cur := g.owner[partition]; cur != "" && cur != holder {
		return cur, ttl, nil
	}
	g.owner[partition] = holder
	return holder, ttl, nil
}

func (g *gatedOwners) Disown(_ context.Context, partition, holder string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.owner[partition] == holder {
		delete(g.owner, partition)
	}
	return nil
}

// A partition taken by a call in flight as the server hands its
// partitions over is handed over too: else it stays the stopping
// server's, unserved, until its ownership ends.
func TestOwnDuringHandOver(t *testing.T) {
	g := &gatedOwners{entered: make(chan struct{}), release: make(chan struct{}), owner: map[string]string{}}
	o := newOwnership(g, "127.0.0.1:1", time.Hour, slog.New(slog.DiscardHandler), nil)
	done := make(chan error, 1)
	go func() { done <- o.check(t.Context(), "p") }()
	<-g.entered // the call's Own is on its way
	o.handOver(t.Context())
	close(g.release)
	if err := <-done; err != nil {
		t.Logf("call in flight: %v", err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if cur := g.owner["p"]; cur != "" {
		t.Fatalf("partition p owned by %q after the hand-over, want no owner", cur)
	}
}
