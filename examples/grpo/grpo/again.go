package grpo

import (
	"context"
	"errors"
	"time"

	"github.com/tqgo/tqgo/tq"
)

// againTries is how many times again runs an op whose outcome stays
// unknown before it gives up.
const againTries = 5

// again runs op, and runs it again, a little later each time, while it
// fails with tq.ErrOutcomeUnknown: its request went out, and whether it
// applied is not known (say, the partition's log was compacted past it
// before its writer read it back). Every queue call of the loop may be
// made twice: a put writes the same values again, a clear or an ack of
// what is gone is no error, and a claim whose outcome is unknown may have
// leased rows that come back when the lease ends. So a call of unknown
// outcome is made again rather than found out.
func (r *runner) again(ctx context.Context, what string, op func() error) error {
	for try := 1; ; try++ {
		err := op()
		if err == nil || !errors.Is(err, tq.ErrOutcomeUnknown) || try == againTries || ctx.Err() != nil {
			return err
		}
		r.log.Warn("outcome unknown: once more", "op", what, "try", try, "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(try) * 50 * time.Millisecond):
		}
	}
}

// put is Client.BatchPut, made again while its outcome is unknown.
func (r *runner) put(ctx context.Context, partition string, keys []string, b tq.Batch, tags []tq.Tag) error {
	return r.again(ctx, "put "+partition, func() error { return r.c.BatchPut(ctx, partition, keys, b, tags) })
}

// clearKeys is Client.Clear, made again while its outcome is unknown.
func (r *runner) clearKeys(ctx context.Context, partition string, keys []string) error {
	return r.again(ctx, "clear "+partition, func() error { return r.c.Clear(ctx, partition, keys) })
}

// reset is Client.ResetConsumption of every row, made again while its
// outcome is unknown.
func (r *runner) reset(ctx context.Context, partition, task string) error {
	return r.again(ctx, "reset "+partition, func() error { return r.c.ResetConsumption(ctx, partition, task) })
}

// wait is t.Wait (t.Claim if claim), made again while its outcome is
// unknown.
func (r *runner) wait(ctx context.Context, t *tq.Task, claim bool, n int, opts ...tq.ClaimOption) (l *tq.Lease, err error) {
	err = r.again(ctx, "claim "+t.Partition(), func() error {
		if claim {
			l, err = t.Claim(ctx, n, opts...)
		} else {
			l, err = t.Wait(ctx, n, opts...)
		}
		return err
	})
	return l, err
}
