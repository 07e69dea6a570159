package main

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/tqgo/tqgo/tq"
)

// queue is the tq client as the workers see it, and the tracer that times
// its calls, so the loop can report how much of a step the queue cost.
type queue struct {
	*tq.Client
	timer *callTimer
}

// Spent is the total time spent inside tq calls so far.
func (q *queue) Spent() time.Duration { return q.timer.Spent() }

// callTimer is a tq.Tracer summing the time of every call. It is safe for
// concurrent use.
type callTimer struct {
	spent, roundTrips atomic.Int64
}

func (t *callTimer) TraceStart(ctx context.Context, _ *tq.Client, _ tq.Call) context.Context {
	return ctx
}

func (t *callTimer) TraceEnd(_ context.Context, _ *tq.Client, _ tq.Call, end tq.CallEnd) {
	t.spent.Add(int64(end.Duration))
	t.roundTrips.Add(end.RoundTrips)
}

// Spent is the total time of the calls traced so far.
func (t *callTimer) Spent() time.Duration { return time.Duration(t.spent.Load()) }

// pending lists the rows of partition whose tag has the given status: the
// rows waiting for the worker that consumes that status.
func (q *queue) pending(ctx context.Context, partition, status string) (*tq.BatchMeta, error) {
	m, err := q.List(ctx, partition)
	if err != nil {
		return nil, err
	}
	rows := m.Rows[:0:0]
	for _, r := range m.Rows {
		if s, _ := r.Tag["status"].(string); s == status {
			rows = append(rows, r)
		}
	}
	m.Rows = rows
	return m, nil
}
