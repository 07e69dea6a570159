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
// It waits for a change of the partition (a commit, a clear, a nack) or
// of its consumption (an acknowledgement or a drop, which wake a paced
// producer as they wake no Wait), then looks again: each look is a
// summary of the partition taken where its rows are (a tq server's
// reply holds a few numbers, however many rows the partition has; the
// server's work, or an in-process store's, still grows with them). It
// returns ctx's error when ctx ends first,
// ErrClosed when the client is closed, and fails with ErrInvalid for an
// empty versionTag or task name, a negative k, no tasks, or a v - k below
// the smallest int64.
func (c *Client) Pace(ctx context.Context, partition, versionTag string, v, k int64, tasks ...string) (err error) {
	ctx, tr := c.trace(ctx, "Pace", partition, 0)
	defer func() { tr.done(err) }()
	if err := checkPartition(partition); err != nil {
		return err
	}
	if versionTag == "" || k < 0 || len(tasks) == 0 || v < math.MinInt64+k {
		return fmt.Errorf("%w: pace by tag %q within %d versions of %d tasks", ErrInvalid, versionTag, k, len(tasks))
	}
	for _, t := range tasks {
		if t == "" {
			return fmt.Errorf("%w: pace: empty task name", ErrInvalid)
		}
	}
	release, err := c.enter(ctx, "Pace", partition)
	if err != nil {
		return err
	}
	defer release()
	ctx, stop := c.untilClosed(ctx)
	defer stop()
	floor := float64(v - k)
	return c.awaitSummary(ctx, partition, metadata.SummaryRequest{Tasks: tasks, Version: versionTag}, func(s metadata.Summary) bool {
		return s.Oldest >= floor
	})
}

// awaitSummary looks at partition's summary of req until ok says so,
// waiting between looks for a change of the partition or of its
// consumption.
func (c *Client) awaitSummary(ctx context.Context, partition string, req metadata.SummaryRequest, ok func(metadata.Summary) bool) error {
	var last time.Time
	for {
		// A look summarizes the partition (where its rows are, a cost
		// that grows with them): at most one per paceLookEvery, however
		// fast acks come.
		if d := time.Until(last.Add(paceLookEvery)); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return closedErr(ctx, ctx.Err())
			}
		}
		last = time.Now()
		sum, err := metadata.Summarize(ctx, c.meta, partition, req)
		if err != nil {
			return closedErr(ctx, err)
		}
		if ok(sum) {
			return nil
		}
		mark := sum.Mark
		mark.Consume = true
		wctx, cancel := context.WithTimeout(ctx, paceRecheck)
		err = c.meta.Wait(wctx, partition, mark)
		cancel()
		if err != nil && (ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded)) {
			return closedErr(ctx, err)
		}
	}
}

// paceRecheck bounds how long a paced call waits before it looks again
// with no change seen: a safety net, since every change wakes it.
const paceRecheck = 30 * time.Second

// paceLookEvery is the least time between two looks of a paced call.
const paceLookEvery = 20 * time.Millisecond

// Ratio is a sample-to-insert rate limiter on a partition and one of its
// tasks, Reverb's SampleToInsertRatio in a queue's terms: inserts are the
// rows ever committed anew to the partition, samples the rows the task
// ever acknowledged or dropped. With diff = inserts×SamplesPerInsert −
// samples, producers may insert while diff stays at most MinSize×
// SamplesPerInsert + ErrorBuffer, and consumers may sample once MinSize
// rows were inserted while diff stays at least MinSize×SamplesPerInsert −
// ErrorBuffer. With SamplesPerInsert 1 the partition's backlog for the task
// is kept within MinSize ± ErrorBuffer: a producer runs at most that far
// ahead, and a trainer starts once the backlog is large enough to sample
// from (Reverb's min_size_to_sample).
type Ratio struct {
	// SamplesPerInsert is how many samples each insert allows, in (0, 1]:
	// a row is consumed once per task, so more than 1 would stall the
	// producer for good.
	SamplesPerInsert float64
	// MinSize is the rows inserted before the first sample; >= 0.
	MinSize int64
	// ErrorBuffer is the slack around the ratio, in samples; >= 0. Too
	// small a buffer serializes producer and consumer: keep it above the
	// rows of one put and of one claim.
	ErrorBuffer float64
}

func (r Ratio) check() error {
	if !(r.SamplesPerInsert > 0 && r.SamplesPerInsert <= 1) || r.MinSize < 0 || !(r.ErrorBuffer >= 0) || math.IsInf(r.ErrorBuffer, 0) {
		return fmt.Errorf("%w: ratio %+v (samples per insert in (0, 1], min size and buffer >= 0)", ErrInvalid, r)
	}
	return nil
}

// AwaitInsert returns once the producer may insert n rows into partition
// under r for task: at once while the partition has had fewer than
// MinSize inserts, then while (inserts+n)×SamplesPerInsert − samples stays
// within MinSize×SamplesPerInsert + ErrorBuffer. It wakes on the task's
// acknowledgements and drops, never by polling. Errors as Pace's; a
// malformed r or n < 1 fails with ErrInvalid.
func (c *Client) AwaitInsert(ctx context.Context, partition, task string, r Ratio, n int) (err error) {
	return c.awaitRatio(ctx, "AwaitInsert", partition, task, r, n, func(ins, smp float64) bool {
		nn := float64(n)
		return ins+nn <= float64(r.MinSize) || (ins+nn)*r.SamplesPerInsert-smp <= float64(r.MinSize)*r.SamplesPerInsert+r.ErrorBuffer
	})
}

// AwaitSample returns once the task may sample (claim) n rows of partition
// under r: once MinSize rows were inserted, while inserts×SamplesPerInsert
// − (samples+n) stays at least MinSize×SamplesPerInsert − ErrorBuffer. It
// wakes on commits. Errors as AwaitInsert's.
func (c *Client) AwaitSample(ctx context.Context, partition, task string, r Ratio, n int) (err error) {
	return c.awaitRatio(ctx, "AwaitSample", partition, task, r, n, func(ins, smp float64) bool {
		return ins >= float64(r.MinSize) && ins*r.SamplesPerInsert-(smp+float64(n)) >= float64(r.MinSize)*r.SamplesPerInsert-r.ErrorBuffer
	})
}

func (c *Client) awaitRatio(ctx context.Context, op, partition, task string, r Ratio, n int, ok func(inserts, samples float64) bool) (err error) {
	ctx, tr := c.trace(ctx, op, partition, n)
	defer func() { tr.done(err) }()
	if err := checkPartition(partition); err != nil {
		return err
	}
	if task == "" || n < 1 {
		return fmt.Errorf("%w: %s: task %q, n %d", ErrInvalid, op, task, n)
	}
	if err := r.check(); err != nil {
		return err
	}
	release, err := c.enter(ctx, op, partition)
	if err != nil {
		return err
	}
	defer release()
	ctx, stop := c.untilClosed(ctx)
	defer stop()
	return c.awaitSummary(ctx, partition, metadata.SummaryRequest{Tasks: []string{task}}, func(s metadata.Summary) bool {
		return ok(float64(s.Inserted), float64(s.Tasks[task].Consumed))
	})
}
