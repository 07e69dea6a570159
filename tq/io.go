package tq

import (
	"context"

	"github.com/tqgo/tqgo/internal/fanout"
)

// forChunks calls f for each chunk [lo, hi) of n items, at most limit items
// a chunk and at most depth chunks in flight, and returns the first error.
// After an error no new chunk starts; chunks in flight finish (f must honour
// ctx), so the caller's rollback sees a quiet backend.
func forChunks(ctx context.Context, n, limit, depth int, f func(ctx context.Context, lo, hi int) error) error {
	chunks := (n + limit - 1) / limit
	return fanout.Run(ctx, chunks, depth, func(ctx context.Context, i int) error {
		lo := i * limit
		return f(ctx, lo, min(lo+limit, n))
	})
}
