package tqserve

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
)

// sweeper is the server's housekeeping of the partitions it serves. It
// deletes the cells of the rows that its calls cleared (a claim's or a
// settle's, by the capacity's ClearAcked), and reports them swept to the
// metadata store, in the background: the call replies with no rows for
// its client to delete, so that a worker's claim is one call. A delete or
// a report that fails is logged; the cells stay listed by Garbage for a
// later reclaim, as a client's failed delete leaves them. With
// reclaimEvery, it also reclaims the partitions calls reach, as
// Client.Reclaim does (see WithReclaim).
type sweeper struct {
	data backends.Store
	meta metadata.MetaStore
	log  *slog.Logger

	mu     sync.Mutex // guards closed and the sends on jobs
	closed bool
	gone   chan struct{} // closed once close is done: every close waits for it
	jobs   chan sweepJob
	wg     sync.WaitGroup
	quit   chan struct{}   // closed by close: the reclaims stop
	life   context.Context // ends when the sweeper is closed past its grace
	end    context.CancelFunc

	// seen is when a call last reached each partition (unix ns, an
	// *atomic.Int64 by name), kept while reclaims run.
	reclaiming atomic.Bool
	seen       sync.Map

	// pending counts the jobs taken and not yet swept and reported.
	pending atomic.Int64
}

// sweepJob is the cells of rows of partition a call cleared.
type sweepJob struct {
	partition string
	refs      []metadata.Ref
}

const (
	// sweepers is how many deletes run at once, sweepQueue how many
	// wait; a call that finds the queue full sweeps its rows itself
	// before it replies (back-pressure, never an unbounded backlog).
	sweepers   = 2
	sweepQueue = 1024
	// sweepFor bounds one job's deletes and report; sweepInline those a
	// call makes before it replies (the queue full), shorter than a
	// client's patience.
	sweepFor    = 30 * time.Second
	sweepInline = 2 * time.Second
	// sweepChunk is the most cells one Delete names.
	sweepChunk = 512
	// sweepGrace is how long close waits for the queued jobs before it
	// cuts them off (their cells are left to Reclaim).
	sweepGrace = 10 * time.Second
)

func newSweeper(data backends.Store, meta metadata.MetaStore, log *slog.Logger) *sweeper {
	w := &sweeper{data: data, meta: meta, log: log, jobs: make(chan sweepJob, sweepQueue), quit: make(chan struct{}), gone: make(chan struct{})}
	w.life, w.end = context.WithCancel(context.Background())
	for range sweepers {
		w.wg.Go(func() {
			for j := range w.jobs {
				w.sweep(j, sweepFor)
			}
		})
	}
	return w
}

// cleared takes the rows of partition a call cleared: their cells are
// deleted, then reported swept. It returns at once unless the queue is
// full (then it sweeps them first) or the sweeper is closed (then they are
// left to Reclaim).
func (w *sweeper) cleared(partition string, rows []*metadata.Row) {
	if len(rows) == 0 {
		return
	}
	cells := 0
	for _, r := range rows {
		cells += len(r.Fields)
	}
	// In the order the store recorded them, so Swept finds them as one run.
	w.unreferenced(partition, metadata.AppendRowRefs(make([]metadata.Ref, 0, cells), rows))
}

// unreferenced takes cells of partition that nothing references (the
// rows a call cleared, a reclaim's garbage): they are deleted, then
// reported swept, as cleared says.
func (w *sweeper) unreferenced(partition string, refs []metadata.Ref) {
	if len(refs) == 0 {
		return
	}
	j := sweepJob{partition: partition, refs: refs}
	w.pending.Add(1)
	w.mu.Lock()
	if w.closed {
		w.pending.Add(-1)
		w.mu.Unlock()
		w.log.Warn("tq server: stopping: unreferenced cells left to Reclaim", "partition", partition, "cells", len(j.refs))
		return
	}
	select {
	case w.jobs <- j:
		w.mu.Unlock()
	default:
		// Counted, so that close waits for it too.
		w.wg.Add(1)
		w.mu.Unlock()
		defer w.wg.Done()
		w.sweep(j, sweepInline)
	}
}

// sweep deletes j's cells and reports those deleted swept, within
// bound, and takes the job off pending.
func (w *sweeper) sweep(j sweepJob, bound time.Duration) {
	defer w.pending.Add(-1)
	ctx, cancel := context.WithTimeout(w.life, bound)
	defer cancel()
	deleted, err := w.delete(ctx, j.refs)
	if len(deleted) > 0 {
		if serr := w.meta.Swept(ctx, j.partition, deleted); serr != nil {
			w.log.Warn("tq server: reporting deleted cells failed; a later Reclaim deletes them again",
				"partition", j.partition, "cells", len(deleted), "err", serr)
		}
	}
	if err != nil {
		w.log.Warn("tq server: deleting unreferenced cells failed; Reclaim deletes them",
			"partition", j.partition, "cells", len(j.refs), "deleted", len(deleted), "err", err)
	}
}

// delete deletes the cells of refs in chunks and returns those deleted:
// the chunks before the first that failed, and its error.
func (w *sweeper) delete(ctx context.Context, refs []metadata.Ref) ([]metadata.Ref, error) {
	for lo := 0; lo < len(refs); lo += sweepChunk {
		hi := min(lo+sweepChunk, len(refs))
		cells := make([]backends.Cell, hi-lo)
		for i, r := range refs[lo:hi] {
			cells[i] = backends.Cell{Key: r.Key(), Tag: r.Tag}
		}
		if err := w.data.Delete(ctx, cells); err != nil {
			return refs[:lo], fmt.Errorf("delete %d cells: %w", len(cells), err)
		}
	}
	return refs, nil
}

// close takes no more jobs, and waits for the queued ones up to
// sweepGrace, then cuts them off.
func (w *sweeper) close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		<-w.gone // a close in progress: wait for it
		return
	}
	w.closed = true
	defer close(w.gone)
	close(w.jobs)
	close(w.quit)
	w.mu.Unlock()
	done := make(chan struct{})
	go func() {
		w.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(sweepGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		w.end()
		<-done
	}
	w.end()
}

// reached notes that a call reached partition, for the reclaims.
func (w *sweeper) reached(partition string) {
	if !w.reclaiming.Load() || partition == "" {
		return
	}
	now := time.Now().UnixNano()
	if v, ok := w.seen.Load(partition); ok {
		if at := v.(*atomic.Int64); now-at.Load() > int64(time.Second) {
			at.Store(now)
		}
		return
	}
	at := new(atomic.Int64)
	at.Store(now)
	w.seen.LoadOrStore(partition, at)
}

// reclaimEvery starts the reclaims of WithReclaim(olderThan): every
// olderThan/4 (at least every 100ms), each
// partition a call reached within twice olderThan (so that a put made at
// its last call is reclaimed once it is older than olderThan) that
// serving says the server still serves is reclaimed. They stop when the
// sweeper closes.
func (w *sweeper) reclaimEvery(olderThan time.Duration, serving func(partition string) bool) {
	w.reclaiming.Store(true)
	every := max(100*time.Millisecond, olderThan/4)
	w.wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-w.quit:
				return
			case <-t.C:
			}
			cutoff := time.Now().Add(-2*olderThan - every).UnixNano()
			w.seen.Range(func(k, v any) bool {
				p := k.(string)
				switch {
				case v.(*atomic.Int64).Load() < cutoff:
					w.seen.Delete(p) // idle: left to a client's Reclaim
				case serving(p):
					w.reclaim(p, olderThan)
				}
				select {
				case <-w.quit:
					return false
				default:
					return true
				}
			})
		}
	})
}

// reclaim does for partition what Client.Reclaim(ctx, partition,
// olderThan) does: aborts the puts reserved olderThan ago or more and
// deletes the cells nothing references, then reports them swept.
func (w *sweeper) reclaim(partition string, olderThan time.Duration) {
	ctx, cancel := context.WithTimeout(w.life, sweepFor)
	refs, err := w.meta.Garbage(ctx, partition, olderThan)
	cancel()
	if err != nil {
		w.log.Warn("tq server: reclaiming a partition failed; tried again later", "partition", partition, "err", err)
		return
	}
	if len(refs) > 0 {
		w.log.Info("tq server: reclaiming unreferenced cells (puts abandoned, deletes that failed)", "partition", partition, "cells", len(refs))
		w.pending.Add(1) // (sweep takes it away)
		w.sweep(sweepJob{partition: partition, refs: refs}, sweepFor)
	}
}
