package tq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
)

// Capacity bounds a partition: a put that would take it past Rows rows or
// Bytes bytes of cells waits for room (or fails with ErrFull: see
// FullPolicy), and nothing is ever evicted to make room. Room is made by
// rows leaving: Clear, ClearPartition, or ClearAcked, which clears each
// row as soon as every task it names has acknowledged (or dropped) it.
// The zero Capacity bounds nothing.
//
// It is metadata.Capacity, a struct with these fields:
//
//	Rows       int64    // rows of the partition: committed ones, and the new rows of
//	                    // puts in progress; zero: no bound
//	Bytes      int64    // bytes of its cells: each cell at its size once its newest
//	                    // write committed, and while writes of it are in progress at
//	                    // the largest of its and theirs; zero: no bound
//	ClearAcked []string // tasks: a row is cleared as soon as every one of them has
//	                    // acknowledged (or dropped) it; empty: rows stay until cleared
//
// and methods Bounded (whether it bounds anything), Zero (whether it is the
// zero Capacity), Clears(task) (whether ClearAcked names task) and Check
// (reports a malformed Capacity, which SetCapacity refuses: a negative
// bound, an empty or repeated task name, more than metadata.MaxClearAcked
// tasks).
type Capacity = metadata.Capacity

// Usage is what a partition holds, as Capacity counts it.
//
// It is metadata.Usage, a struct with these fields:
//
//	Rows  int64 // rows, as Capacity.Rows counts them
//	Bytes int64 // bytes of cells, as Capacity.Bytes counts them
type Usage = metadata.Usage

// FullError is a put refused by the partition's Capacity: it names the
// partition, its capacity, what it held and what the put asked for. It
// matches ErrFull. Nothing of the put was written.
//
// It is metadata.FullError, a struct with these fields:
//
//	Partition string        // the partition that refused the put
//	Capacity  Capacity      // its capacity
//	Used      Usage         // what it held
//	Asked     Usage         // what the put would have added: its new rows, its cells' growth in bytes
//	Mark      metadata.Mark // the partition as the refusal saw it (what a blocked put waits on)
//
// and the method Never, which reports whether the put could not fit even in
// an empty partition (waiting for room is pointless).
type FullError = metadata.FullError

// ErrFull: a put the partition's Capacity has no room for (a *FullError
// says how much): nothing of it was written. With the Block policy a put
// returns it only when it could never fit (its own rows or bytes exceed
// the capacity). An engine out of memory matches it too (Redis at its
// maxmemory with the noeviction policy): nothing of the put is visible,
// and it is not retried.
var ErrFull = backends.ErrFull

// FullPolicy is what a put does when the partition's Capacity has no room
// for it.
type FullPolicy uint8

const (
	// Block waits until rows leave the partition and the put fits, or its
	// ctx ends (the ctx's error). It wakes on the change that makes room
	// (a Clear, an ack that clears rows), never by polling; a put that
	// could never fit fails at once with ErrFull. Every DefaultStallWarn
	// it waits, it logs what it waits for. The default.
	Block FullPolicy = iota
	// Fail fails at once with ErrFull, writing nothing.
	Fail
)

func (p FullPolicy) String() string {
	switch p {
	case Block:
		return "block"
	case Fail:
		return "fail"
	}
	return fmt.Sprintf("FullPolicy(%d)", uint8(p))
}

// WithFullPolicy sets what the client's puts do when a partition is full
// (default Block); WhenFull overrides it per call.
func WithFullPolicy(p FullPolicy) Option {
	return func(o *options) error {
		if p > Fail {
			return fmt.Errorf("%w: %v", ErrInvalid, p)
		}
		o.full = p
		return nil
	}
}

type fullPolicyKey struct{}

// WhenFull returns ctx carrying p for the puts (Put, BatchPut) made with
// it, in place of the client's WithFullPolicy. A put given a p that is
// neither Block nor Fail fails with ErrInvalid, writing nothing.
func WhenFull(ctx context.Context, p FullPolicy) context.Context {
	return context.WithValue(ctx, fullPolicyKey{}, p)
}

// fullPolicy is the put's FullPolicy, or an error matching ErrInvalid for
// an unknown one.
func (c *Client) fullPolicy(ctx context.Context) (FullPolicy, error) {
	if p, ok := ctx.Value(fullPolicyKey{}).(FullPolicy); ok {
		if p > Fail {
			return 0, invalidf("WhenFull(%v): want Block or Fail", p)
		}
		return p, nil
	}
	return c.opts.full, nil
}

// SetCapacity sets partition's Capacity for every client of the engine
// (the zero Capacity lifts the bounds). It applies to puts prepared after
// it; a capacity below what the partition holds clears nothing, it holds
// puts back until enough rows leave. With ClearAcked, the rows the named
// tasks have all consumed already are cleared at once, their cells
// deleted as Clear deletes them. A malformed capacity fails with
// ErrInvalid, changing nothing.
func (c *Client) SetCapacity(ctx context.Context, partition string, cp Capacity) (err error) {
	ctx, tr := c.trace(ctx, "SetCapacity", partition, 0)
	defer func() { tr.done(err) }()
	release, err := c.enter(ctx, "SetCapacity", partition)
	if err != nil {
		return err
	}
	defer release()
	if err := checkPartition(partition); err != nil {
		return err
	}
	if err := cp.Check(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	rows, err := c.meta.SetCapacity(ctx, partition, cp)
	if err != nil {
		return err
	}
	return c.deleteRows(ctx, tr, partition, rows)
}

// prepare is the MetaStore's Prepare under the put's FullPolicy (see
// underPolicy).
func (c *Client) prepare(ctx context.Context, partition string, keys, fields []string, sizes []int64) (res []metadata.Reservation, err error) {
	err = c.underPolicy(ctx, partition, func() (err error) {
		res, err = c.meta.Prepare(ctx, partition, keys, fields, sizes)
		return err
	})
	if err == nil && c.opts.blocks {
		c.putIndexes(partition, res) // a block below them would break this client's order
	}
	return res, err
}

// underPolicy makes a call that the capacity may refuse (a Prepare, a
// PutNew) under the put's FullPolicy: on a refusal it waits for the
// partition to change and calls again (Block), or returns the refusal
// (Fail, or a put that could never fit).
func (c *Client) underPolicy(ctx context.Context, partition string, call func() error) error {
	policy, err := c.fullPolicy(ctx)
	if err != nil {
		return err
	}
	var since, warned time.Time
	for {
		err := call()
		var full *FullError
		if !errors.As(err, &full) || policy == Fail || full.Never() {
			return err
		}
		now := time.Now()
		if since.IsZero() {
			since, warned = now, now
		} else if now.Sub(warned) >= DefaultStallWarn {
			warned = now
			c.opts.logger.Warn("tq: put blocked: partition full", "partition", partition, "waited", now.Sub(since).Round(time.Second), "err", full)
		}
		wctx, cancel := context.WithDeadline(ctx, warned.Add(DefaultStallWarn))
		err = c.meta.Wait(wctx, partition, full.Mark)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
	}
}

// cleared deletes the cells of rows a settle or claim cleared (the
// capacity's ClearAcked), as Clear does; failures are logged and left to
// Reclaim.
func (c *Client) cleared(ctx context.Context, tr *callTrace, partition string, rows []*metadata.Row) {
	if len(rows) > 0 {
		_ = c.deleteRows(ctx, tr, partition, rows) // logs its own failures, returns nil
	}
}
