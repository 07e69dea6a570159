package main

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/tqgo/tqgo/tq"
)

// queue is the tq client as the workers see it: the calls they make, each
// timed, so the loop can report how much of a step the queue cost. It is
// safe for concurrent use.
type queue struct {
	c     *tq.Client
	spent atomic.Int64 // nanoseconds inside tq calls
}

func (q *queue) since(start time.Time) { q.spent.Add(int64(time.Since(start))) }

// Spent is the total time spent inside tq calls so far.
func (q *queue) Spent() time.Duration { return time.Duration(q.spent.Load()) }

func (q *queue) BatchPut(ctx context.Context, partition string, keys []string, b tq.Batch, tags []tq.Tag) error {
	defer q.since(time.Now())
	return q.c.BatchPut(ctx, partition, keys, b, tags)
}

func (q *queue) BatchGetByMeta(ctx context.Context, m *tq.BatchMeta, fields ...string) (tq.Batch, error) {
	defer q.since(time.Now())
	return q.c.BatchGetByMeta(ctx, m, fields...)
}

func (q *queue) List(ctx context.Context, partition string) (*tq.BatchMeta, error) {
	defer q.since(time.Now())
	return q.c.List(ctx, partition)
}

func (q *queue) Clear(ctx context.Context, partition string, keys []string) error {
	defer q.since(time.Now())
	return q.c.Clear(ctx, partition, keys)
}

func (q *queue) Partitions(ctx context.Context) ([]string, error) {
	defer q.since(time.Now())
	return q.c.Partitions(ctx)
}

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
