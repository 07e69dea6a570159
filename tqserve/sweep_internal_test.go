package tqserve

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/backends/metadata"
)

// blockStore's Delete blocks until release (or its context ends).
type blockStore struct{ entered, release chan struct{} }

func (b *blockStore) Write(context.Context, []backends.Cell) error    { return nil }
func (b *blockStore) Read(context.Context, []backends.ReadCell) error { return nil }
func (b *blockStore) Close() error                                    { return nil }
func (b *blockStore) Delete(ctx context.Context, _ []backends.Cell) error {
	select {
	case b.entered <- struct{}{}:
	default:
	}
	select {
	case <-b.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Every sweeper.close waits for the sweeps in flight, a second one too:
// tqserve.Serve runs GracefulStop in a goroutine and Close once Serve
// returns (grpc-go returns as soon as its own stop is done), each closing
// the sweeper, and Close must not close the engine under sweeps still
// deleting.
func TestSweeperEveryCloseWaits(t *testing.T) {
	data := &blockStore{entered: make(chan struct{}, 1), release: make(chan struct{})}
	w := newSweeper(data, memory.NewMetaStore(), slog.New(slog.DiscardHandler))
	w.unreferenced("p", []metadata.Ref{{Index: 1, Field: "x"}})
	<-data.entered
	first := make(chan struct{})
	go func() { w.close(); close(first) }()
	for {
		w.mu.Lock()
		closed := w.closed
		w.mu.Unlock()
		if closed {
			break
		}
		time.Sleep(time.Millisecond)
	}
	second := make(chan struct{})
	go func() { w.close(); close(second) }()
	select {
	case <-second:
		close(data.release)
		<-first
		t.Fatal("a second close returned while the first's sweep was still deleting")
	case <-time.After(300 * time.Millisecond):
	}
	close(data.release)
	<-first
	<-second
}
