// Package fanout runs I/O-bound tasks with a bounded number in flight: the
// client's backend chunks and an engine's pipelined rounds share it. The
// depth is a queue depth, sized apart from CPU-bound workers.
package fanout

import (
	"context"
	"sync"
)

// Run calls f(ctx, i) for i in [0, n), at most depth at a time, and returns
// the first error. After an error no task starts and the context of those
// in flight is cancelled; Run returns only when all of them have finished,
// so a caller's rollback sees a quiet backend. With one task or a depth of
// 1, tasks run in order on the calling goroutine.
func Run(ctx context.Context, n, depth int, f func(ctx context.Context, i int) error) error {
	if n == 1 || depth <= 1 {
		for i := range n {
			if err := f(ctx, i); err != nil {
				return err
			}
		}
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		once     sync.Once
		firstErr error
		slots    = make(chan struct{}, depth)
	)
	for i := range n {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			if err := f(ctx, i); err != nil {
				once.Do(func() { firstErr = err; cancel() })
			}
		}()
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return firstErr
}
