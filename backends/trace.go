package backends

import (
	"context"
	"sync/atomic"
)

// RoundTrips counts the requests an engine waited on during one call of
// its caller, so that a tracer can report them. tq attaches one to the
// context of each call (Attach); engines report each request they wait a
// reply for with CountRoundTrips on the context they were given (several
// requests in flight at once count one each).
type RoundTrips struct{ n atomic.Int64 }

type roundTripsKey struct{}

// Attach returns ctx carrying r.
func (r *RoundTrips) Attach(ctx context.Context) context.Context {
	return context.WithValue(ctx, roundTripsKey{}, r)
}

// Load returns the round trips counted so far.
func (r *RoundTrips) Load() int64 { return r.n.Load() }

// CountRoundTrips adds n round trips to the counter ctx carries, if any.
func CountRoundTrips(ctx context.Context, n int) {
	if r, _ := ctx.Value(roundTripsKey{}).(*RoundTrips); r != nil {
		r.n.Add(int64(n))
	}
}
