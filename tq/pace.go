package tq

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/tqgo/tqgo/backends/metadata"
)

// Pace holds a producer back instead of having its consumers drop what it
// made: it returns once no row of partition that one of tasks has still to
// consume has a versionTag below v-k, where v is the policy version the
// caller is about to produce with. A row a task has still to consume is
// one it has not acknowledged or dropped: ready, waiting for a field,
// leased, or never delivered; a dead row counts as consumed (it is not
// delivered again unless retried). A row whose versionTag is not a number
// never holds the producer back. So a rollout calling Pace(ctx,
// "samples", "version", v, k, "train") before it generates with policy v
// stays within k versions of the trainer, which drops nothing for
// staleness: the staleness bound enforced by pacing (Reverb's rate
// limiters, verl's max_off_policy_threshold) rather than by dropping the
// long generations that arrive late.
//
// It waits for a change of the partition that may make rows ready (a
// commit, a clear, a nack) or for paceRecheck (an acknowledgement makes no
// row ready, and wakes no waiter), then looks again, reading the
// partition's state each time (a cost that grows with its rows): an ack
// lets the producer go within a second. It returns ctx's error when ctx ends first,
// ErrClosed when the client is closed, and fails with ErrInvalid for an
// empty versionTag or task name, a negative k, or no tasks.
func (c *Client) Pace(ctx context.Context, partition, versionTag string, v, k int64, tasks ...string) (err error) {
	ctx, tr := c.trace(ctx, "Pace", partition, 0)
	defer func() { tr.done(err) }()
	if err := checkPartition(partition); err != nil {
		return err
	}
	if versionTag == "" || k < 0 || len(tasks) == 0 {
		return fmt.Errorf("%w: pace by tag %q within %d versions of %d tasks", ErrInvalid, versionTag, k, len(tasks))
	}
	for _, t := range tasks {
		if t == "" {
			return fmt.Errorf("%w: pace: empty task name", ErrInvalid)
		}
	}
	release, err := c.enter(ctx)
	if err != nil {
		return err
	}
	defer release()
	ctx, stop := c.untilClosed(ctx)
	defer stop()
	floor := float64(v - k)
	for {
		view, err := c.meta.View(ctx, partition, tasks...)
		if err != nil {
			return closedErr(ctx, err)
		}
		if oldestUnconsumed(view, versionTag, tasks) >= floor {
			return nil
		}
		wctx, cancel := context.WithTimeout(ctx, paceRecheck)
		err = c.meta.Wait(wctx, partition, view.Mark)
		cancel()
		if err != nil && (ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded)) {
			return closedErr(ctx, err)
		}
	}
}

// paceRecheck bounds how long Pace waits before it looks again.
const paceRecheck = time.Second

// oldestUnconsumed is the lowest versionTag among the rows of view some of
// tasks has still to consume (+Inf for none).
func oldestUnconsumed(view metadata.View, versionTag string, tasks []string) float64 {
	oldest := math.Inf(1)
	done := make([]map[uint64]bool, len(tasks))
	for i, t := range tasks {
		done[i] = map[uint64]bool{}
		for _, d := range view.Tasks[t] {
			if d.State == metadata.Acked || d.State == metadata.Dropped || d.State == metadata.Dead {
				done[i][d.Index] = true
			}
		}
	}
	for _, r := range view.Rows {
		ver, ok := tagNumber(r.Tag[versionTag])
		if !ok || ver >= oldest {
			continue
		}
		for i := range tasks {
			if !done[i][r.Index] {
				oldest = ver
				break
			}
		}
	}
	return oldest
}
