package main

import (
	"context"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/tq"
)

// bareWakeArm is the queue suite's one measure below the public API: the
// engine's own wake-up, from a producer's BatchPut returning to the
// engine's Wait (backends.MetaStore), blocked on the partition, returning.
// It opens an engine of its own and a client over it (the producer), so
// that deleting this file and its one call in queueArms removes it.
func bareWakeArm(ctx context.Context, t *target) (*arm, func(), error) {
	eng, err := backends.Open(ctx, t.url)
	if err != nil {
		return nil, nil, err
	}
	closeEng := func() {
		eng.Data.Close()
		eng.Meta.Close()
	}
	c, err := tq.New(eng)
	if err != nil {
		closeEng()
		return nil, nil, err
	}
	p := queuePartition + "/notify"
	none := func([]*backends.Row, []backends.Delivery) (backends.Picked, error) { return backends.Picked{}, nil }
	a := &arm{name: t.name + " bare wake-up", calls: wakeCalls, timed: func() (time.Duration, error) {
		got, err := eng.Meta.Claim(ctx, p, backends.ClaimRequest{Task: "notify", Lease: time.Minute, Rows: 1, Min: 1, Custom: true}, none)
		if err != nil {
			return 0, err
		}
		d, err := timeWake(ctx, c, p, func(ctx context.Context) (func() error, error) {
			return nil, eng.Meta.Wait(ctx, p, got.Mark)
		})
		if err != nil {
			return 0, err
		}
		return d, c.ClearPartition(ctx, p)
	}}
	return a, func() {
		c.ClearPartition(context.WithoutCancel(ctx), p)
		c.Close()
		closeEng()
	}, nil
}
