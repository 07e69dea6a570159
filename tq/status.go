package tq

import (
	"context"
	"fmt"
	"strings"

	"github.com/tqgo/tqgo/backends/metadata"
)

// Status is a partition's production and consumption.
type Status struct {
	Partition string
	Rows      int            // committed rows
	Fields    map[string]int // production: rows that have each field
	// Tasks is the consumption of each task with state in the partition:
	// one that holds an entry for some row (it leased, acked, dropped or
	// returned one; a task whose claims leased nothing, or that was reset
	// to nothing, is not listed). Not knowing the
	// fields a task waits for, it counts every row in no other state as
	// Ready; Task.Status counts exactly.
	Tasks map[string]TaskStatus
}

// TaskStatus counts a task's rows by state. A lease that ended is counted
// as the next claim will find it (ready, or dead).
type TaskStatus struct {
	Ready   int // claimable: every field the task names is committed (see Status)
	Waiting int // some field the task names is not committed yet
	Leased  int
	Acked   int
	Dead    int // delivered MaxDeliveries times without an ack: see Task.Dead
	Dropped int // consumed without delivery (stale, or Task.Drop)
}

// Status returns the partition's production per field and consumption per
// task. An unknown partition has no rows and no tasks.
func (c *Client) Status(ctx context.Context, partition string) (_ *Status, err error) {
	ctx, tr := c.trace(ctx, "Status", partition, 0)
	defer func() { tr.done(err) }()
	release, err := c.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	if err := checkPartition(partition); err != nil {
		return nil, err
	}
	q := c.meta
	rows, err := c.meta.List(ctx, partition)
	if err != nil {
		return nil, err
	}
	cons, err := q.Consumption(ctx, partition)
	if err != nil {
		return nil, err
	}
	st := &Status{Partition: partition, Rows: len(rows), Fields: map[string]int{}, Tasks: map[string]TaskStatus{}}
	for _, r := range rows {
		for f := range r.Fields {
			st.Fields[f]++
		}
	}
	for task, ds := range cons {
		st.Tasks[task] = countStates(rows, ds, nil)
	}
	tr.add(len(rows), 0, 0)
	return st, nil
}

// countStates counts rows by their state in ds; a row with no state is
// Ready, or Waiting when it lacks one of fields.
func countStates(rows []*metadata.Row, ds []metadata.Delivery, fields []string) TaskStatus {
	state := make(map[uint64]metadata.State, len(ds))
	for _, d := range ds {
		state[d.Index] = d.State
	}
	var ts TaskStatus
	for _, r := range rows {
		s, ok := state[r.Index]
		if !ok {
			s = metadata.Ready
		}
		switch s {
		case metadata.Ready:
			if hasFields(r, fields) {
				ts.Ready++
			} else {
				ts.Waiting++
			}
		case metadata.Leased:
			ts.Leased++
		case metadata.Acked:
			ts.Acked++
		case metadata.Dead:
			ts.Dead++
		case metadata.Dropped:
			ts.Dropped++
		}
	}
	return ts
}

// Status counts the task's rows by state, Ready and Waiting by the task's
// fields.
func (t *Task) Status(ctx context.Context) (_ TaskStatus, err error) {
	rows, ds, err := t.consumption(ctx, "TaskStatus")
	if err != nil {
		return TaskStatus{}, err
	}
	return countStates(rows, ds, t.fields), nil
}

// consumption returns the partition's rows and the task's deliveries.
func (t *Task) consumption(ctx context.Context, op string) (_ []*metadata.Row, _ []metadata.Delivery, err error) {
	c := t.c
	ctx, tr := c.trace(ctx, op, t.partition, 0)
	defer func() { tr.done(err) }()
	release, err := c.enter(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer release()
	q := c.meta
	rows, err := c.meta.List(ctx, t.partition)
	if err != nil {
		return nil, nil, err
	}
	cons, err := q.Consumption(ctx, t.partition, t.name)
	if err != nil {
		return nil, nil, err
	}
	return rows, cons[t.name], nil
}

// DeadRow is a row the task gave up on.
type DeadRow struct {
	Key        string
	Index      uint64
	Deliveries int
}

// Dead lists the task's dead rows, by index.
func (t *Task) Dead(ctx context.Context) ([]DeadRow, error) {
	rows, ds, err := t.consumption(ctx, "Dead")
	if err != nil {
		return nil, err
	}
	keyOf := make(map[uint64]string, len(rows))
	for _, r := range rows {
		keyOf[r.Index] = r.Key
	}
	var out []DeadRow
	for _, d := range ds {
		if k, ok := keyOf[d.Index]; ok && d.State == metadata.Dead {
			out = append(out, DeadRow{Key: k, Index: d.Index, Deliveries: d.Deliveries})
		}
	}
	return out, nil
}

// Retry makes dead rows of keys ready again, their delivery count reset.
// An unknown key fails with ErrNotFound, changing nothing; a row that is
// not dead gives a *LeaseLostError naming it, the others retried.
func (t *Task) Retry(ctx context.Context, keys ...string) error {
	return t.mark(ctx, "Retry", metadata.Retry, keys)
}

// Drop makes rows of keys that are ready or dead dropped: consumed by the
// task without delivery. Errors as Retry's.
func (t *Task) Drop(ctx context.Context, keys ...string) error {
	return t.mark(ctx, "Drop", metadata.Drop, keys)
}

func (t *Task) mark(ctx context.Context, op string, sop metadata.SettleOp, keys []string) (err error) {
	c := t.c
	ctx, tr := c.trace(ctx, op, t.partition, len(keys))
	defer func() { tr.done(err) }()
	release, err := c.enter(ctx)
	if err != nil {
		return err
	}
	defer release()
	q := c.meta
	rows, err := c.lookupRows(ctx, t.partition, keys)
	if err != nil {
		return err
	}
	idx := make([]uint64, len(rows))
	infos := make([]RowInfo, len(rows))
	for i, r := range rows {
		idx[i] = r.Index
		infos[i] = RowInfo{Key: r.Key, Index: r.Index}
	}
	res, err := q.Settle(ctx, t.partition, metadata.SettleRequest{Task: t.name, Op: sop, Indexes: idx})
	if err != nil {
		return err
	}
	return lostError(strings.ToLower(op), res.Lost, infos)
}

// ResetConsumption forgets task's consumption of keys of partition (every
// row when none are named), as TransferQueue's reset_consumption does for
// a whole partition: the rows are ready for the task again, their delivery
// counts reset, and leases on them are lost. An unknown key fails with
// ErrNotFound, an empty task name with ErrInvalid, changing nothing.
func (c *Client) ResetConsumption(ctx context.Context, partition, task string, keys ...string) (err error) {
	ctx, tr := c.trace(ctx, "ResetConsumption", partition, len(keys))
	defer func() { tr.done(err) }()
	release, err := c.enter(ctx)
	if err != nil {
		return err
	}
	defer release()
	if err := checkPartition(partition); err != nil {
		return err
	}
	if task == "" {
		return fmt.Errorf("%w: empty task name", ErrInvalid)
	}
	q := c.meta
	var idx []uint64
	if len(keys) > 0 {
		rows, err := c.lookupRows(ctx, partition, keys)
		if err != nil {
			return err
		}
		idx = make([]uint64, len(rows))
		for i, r := range rows {
			idx[i] = r.Index
		}
	}
	return q.Reset(ctx, partition, task, idx)
}
