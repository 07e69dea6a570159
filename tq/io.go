package tq

import (
	"context"
	"sync"
)

// forChunks calls f for each chunk [lo, hi) of n items, at most limit items
// a chunk and at most depth chunks in flight, and returns the first error.
// After an error no new chunk starts; chunks in flight finish (f must honour
// ctx), so the caller's rollback sees a quiet backend.
func forChunks(ctx context.Context, n, limit, depth int, f func(ctx context.Context, lo, hi int) error) error {
	if n == 0 {
		return nil
	}
	if n <= limit || depth == 1 {
		for lo := 0; lo < n; lo += limit {
			if err := f(ctx, lo, min(lo+limit, n)); err != nil {
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
	for lo := 0; lo < n; lo += limit {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func(lo, hi int) {
			defer func() { <-slots; wg.Done() }()
			if err := f(ctx, lo, hi); err != nil {
				once.Do(func() { firstErr = err; cancel() })
			}
		}(lo, min(lo+limit, n))
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return firstErr
}
