package redis

import (
	"context"
	"slices"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
)

// tracedKey marks a context as one of the Store's calls (its value is the
// Store), so that the hook of this Store alone counts its commands: several
// Stores may share one client, each with a hook of its own.
type tracedKey struct{}

// traced returns ctx marked as a call of s.
func (s *Store) traced(ctx context.Context) context.Context {
	if ctx.Value(tracedKey{}) == s {
		return ctx
	}
	return context.WithValue(ctx, tracedKey{}, s)
}

// roundTripHook counts the requests go-redis sends for s's calls.
type roundTripHook struct{ s *Store }

var _ goredis.Hook = roundTripHook{}

func (roundTripHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h roundTripHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if ctx.Value(tracedKey{}) == h.s && cmd.Name() != "hello" { // a new connection's set-up is not a request of the call's
			backends.CountRoundTrips(ctx, 1)
		}
		return next(ctx, cmd)
	}
}

func (h roundTripHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if ctx.Value(tracedKey{}) == h.s && !slices.ContainsFunc(cmds, func(c goredis.Cmder) bool { return c.Name() == "client" }) {
			backends.CountRoundTrips(ctx, 1)
		}
		return next(ctx, cmds)
	}
}
