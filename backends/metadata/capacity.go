package metadata

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tqgo/tqgo/backends"
)

// MaxClearAcked is the most tasks a Capacity's ClearAcked may name.
const MaxClearAcked = 16

// Capacity bounds what a partition holds, so that a producer faster than
// its consumers is held back (or refused) instead of filling the engine:
// a Prepare that would take the partition past either bound reserves
// nothing and fails with a *FullError. Nothing is ever evicted to make
// room: room is made only by rows leaving the partition (a Delete, a
// DeletePartition, or ClearAcked).
type Capacity struct {
	// Rows bounds the rows of the partition: committed ones, and new rows
	// of puts in progress (prepared, not yet committed nor aborted).
	// Zero: no bound.
	Rows int64
	// Bytes bounds the bytes of the partition's cells: for each field of
	// each row, its cell's size once its newest write committed, and
	// while writes of it are in progress the largest of its cell's and
	// theirs (a write given up keeps counting until the field is written
	// again or its row leaves: an upper bound, never under). Zero: no
	// bound.
	Bytes int64
	// ClearAcked, when set, removes a row as soon as every task it names
	// has acknowledged (or dropped) it, as Delete would: the rows a
	// Settle or Claim removed this way come back in its Cleared, for the
	// caller to delete their cells (a store that deletes them itself, a
	// tq server, lists none). Tasks not named keep no claim on the row.
	// Empty: rows stay until deleted.
	ClearAcked []string
}

// Bounded reports whether c bounds anything.
func (c *Capacity) Bounded() bool { return c.Rows > 0 || c.Bytes > 0 }

// Zero reports whether c is the zero Capacity (no bound, nothing cleared).
func (c *Capacity) Zero() bool { return !c.Bounded() && len(c.ClearAcked) == 0 }

// Clears reports whether ClearAcked names task.
func (c *Capacity) Clears(task string) bool { return slices.Contains(c.ClearAcked, task) }

// Check reports a malformed Capacity with an error wrapping
// backends.ErrInvalid: a negative bound, an empty or repeated task name,
// more than MaxClearAcked tasks.
func (c *Capacity) Check() error {
	switch {
	case c.Rows < 0 || c.Bytes < 0:
		return invalidf("capacity: negative bound (rows %d, bytes %d)", c.Rows, c.Bytes)
	case len(c.ClearAcked) > MaxClearAcked:
		return invalidf("capacity: %d tasks to clear after, at most %d", len(c.ClearAcked), MaxClearAcked)
	}
	for i, t := range c.ClearAcked {
		if t == "" {
			return invalidf("capacity: empty task name")
		}
		if slices.Contains(c.ClearAcked[:i], t) {
			return invalidf("capacity: task %q named twice", t)
		}
	}
	return nil
}

// Usage is what a partition holds, as Capacity counts it.
type Usage struct {
	Rows  int64
	Bytes int64
}

// FullError is a Prepare's refusal by the partition's Capacity. It
// matches backends.ErrFull. Nothing was reserved.
type FullError struct {
	Partition string
	Capacity  Capacity
	// Used is what the partition held, Asked what the put would have
	// added to it (its new rows; the growth of its cells' bytes).
	Used, Asked Usage
	// Mark is the partition as the refusal saw it: Queue.Wait given it
	// returns once a change may have made room.
	Mark Mark
}

func (e *FullError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "backends: partition %q full:", e.Partition)
	if c := e.Capacity.Rows; c > 0 && e.Used.Rows+e.Asked.Rows > c {
		fmt.Fprintf(&b, " %d rows held, %d more asked, capacity %d rows;", e.Used.Rows, e.Asked.Rows, c)
	}
	if c := e.Capacity.Bytes; c > 0 && e.Used.Bytes+e.Asked.Bytes > c {
		fmt.Fprintf(&b, " %d bytes held, %d more asked, capacity %d bytes;", e.Used.Bytes, e.Asked.Bytes, c)
	}
	if e.Never() {
		b.WriteString(" the put alone exceeds the capacity")
	} else {
		b.WriteString(" room is made by clearing rows")
	}
	return b.String()
}

// Is makes a FullError match backends.ErrFull.
func (e *FullError) Is(target error) bool { return target == backends.ErrFull }

// Never reports whether the put could not fit even in an empty
// partition: waiting for room is pointless.
func (e *FullError) Never() bool {
	return e.Capacity.Rows > 0 && e.Asked.Rows > e.Capacity.Rows ||
		e.Capacity.Bytes > 0 && e.Asked.Bytes > e.Capacity.Bytes
}

// CheckSizes reports, with an error wrapping backends.ErrInvalid, sizes
// that a Prepare of keys and fields cannot take: not nil and not one per
// cell, or negative.
func CheckSizes(keys, fields []string, sizes []int64) error {
	if sizes == nil {
		return nil
	}
	if len(sizes) != len(keys)*len(fields) {
		return invalidf("prepare: %d sizes for %d keys and %d fields", len(sizes), len(keys), len(fields))
	}
	for _, n := range sizes {
		if n < 0 {
			return invalidf("prepare: negative size %d", n)
		}
	}
	return nil
}
