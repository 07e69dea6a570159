package grpo

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/tqgo/tqgo/tq"
)

// callTimer is a tq.Tracer summing the time of every call but Wait, so a
// run can report how much of it the queue cost: a Wait's time is mostly a
// worker idle until its input is ready. It is safe for concurrent use.
type callTimer struct {
	spent, roundTrips atomic.Int64
}

func (t *callTimer) TraceStart(ctx context.Context, _ *tq.Client, _ tq.Call) context.Context {
	return ctx
}

func (t *callTimer) TraceEnd(_ context.Context, _ *tq.Client, call tq.Call, end tq.CallEnd) {
	if call.Op == "Wait" {
		return
	}
	t.spent.Add(int64(end.Duration))
	t.roundTrips.Add(end.RoundTrips)
}

// Spent is the total time of the calls traced so far.
func (t *callTimer) Spent() time.Duration { return time.Duration(t.spent.Load()) }
