package tq

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tqgo/tqgo/backends/metadata"
)

// Status is a partition's production and consumption, as of one moment.
type Status struct {
	Partition string
	Rows      int            // committed rows
	Fields    map[string]int // production: rows that have each field
	// Tasks is the consumption of each task with state in the partition:
	// one that holds an entry for some row (it leased, acked, dropped or
	// returned one; a task whose claims leased nothing, or that was reset
	// to nothing, is not listed unless it claims groups and some wait, or
	// it consumed rows since cleared: see TaskStatus.Consumed). Not knowing the
	// fields a task waits for, it counts every row in no other state as
	// Ready; Task.Status counts exactly.
	Tasks map[string]TaskStatus
	// Capacity is the partition's (see SetCapacity), and Used what it
	// holds as Capacity counts it: committed rows and the new rows of puts
	// in progress, and the bytes of their cells.
	Capacity Capacity
	Used     Usage
	// OldestRow is when the committed row that became ready longest ago
	// did (see TaskStatus.OldestReady): the oldest ready row of a task
	// not listed. Zero with no row, or an engine that does not tell.
	OldestRow time.Time
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
	// Redelivered counts the rows ready or leased that were delivered
	// before without an ack (a consumer died, or nacked): each of them
	// may have been processed once already.
	Redelivered int
	// DeadLeaseEnded counts the Dead rows whose last lease ended
	// unsettled (a consumer too slow for its lease, or gone; their Reason
	// "lease ended"); the others died of an error (see DeadRow.Reason).
	// LastDead is the row that died last, with why: nil with none. Task.Dead
	// lists them all.
	DeadLeaseEnded int
	LastDead       *DeadRow
	// Leases are the running leases, earliest end first.
	Leases []LeaseStatus
	// Consumed counts the rows the task ever acknowledged or dropped in
	// the partition, rows cleared since included (ClearAcked, Clear): it
	// only grows, until ClearPartition forgets the partition.
	Consumed uint64
	// OldestReady is when the oldest of the rows counted Ready became
	// ready (its last commit adding a field, as a time of this process):
	// how long produced rows have waited for the task. Zero with no
	// ready row, or an engine that does not tell.
	OldestReady time.Time
	// Groups are, for a task whose claims take groups, the groups
	// waiting for missing members, oldest first: how many rows each has
	// past its whole groups, since when, and whether it is past the
	// task's GroupDeadline; as of the same moment as the counts (a lease
	// that ended returned its rows to their groups).
	Groups []GroupWait
}

// LeaseStatus is one running lease of a task: who holds it, how many rows,
// until when.
type LeaseStatus struct {
	// Holder is the name of the consumer that claimed it (see WithName and
	// ConsumerName; a rank batch's is the rank that selected it).
	Holder string
	Rows   int
	// Until is when the lease of its first rows ends, unless extended, as
	// a time of this process.
	Until time.Time
	// Granted is when its claim leased its rows (its age: time.Since),
	// as a time of this process.
	Granted time.Time
	// Deliveries is the highest delivery count among its rows.
	Deliveries int
	// ID names the lease, the same in every Status while it runs (an
	// Extend keeps it) and, but for a 64-bit digest's collisions, never
	// another's: a digest of its token, which it does not reveal. A reader that sees the same ID across Status
	// calls is looking at one lease, and may tell how long it has run.
	ID string
}

// Status returns the partition's production per field and consumption per
// task, as of one moment. An unknown partition has no rows and no tasks.
func (c *Client) Status(ctx context.Context, partition string) (_ *Status, err error) {
	ctx, tr := c.trace(ctx, "Status", partition, 0)
	defer func() { tr.done(err) }()
	release, err := c.enter(ctx, "Status", partition)
	if err != nil {
		return nil, err
	}
	defer release()
	if err := checkPartition(partition); err != nil {
		return nil, err
	}
	sum, err := metadata.Summarize(ctx, c.meta, partition, metadata.SummaryRequest{Counts: true})
	if err != nil {
		return nil, err
	}
	st := &Status{Partition: partition, Rows: sum.Rows, Fields: sum.Fields, Tasks: make(map[string]TaskStatus, len(sum.Tasks)),
		Capacity: sum.Capacity, Used: sum.Used, OldestRow: sum.OldestRow}
	if st.Fields == nil {
		st.Fields = map[string]int{}
	}
	for task, ts := range sum.Tasks {
		st.Tasks[task] = taskStatus(ts)
	}
	tr.add(sum.Rows, 0, 0)
	return st, nil
}

// taskStatus is a task's summary as TaskStatus tells it.
func taskStatus(ts metadata.TaskSummary) TaskStatus {
	out := TaskStatus{Ready: ts.Ready, Waiting: ts.Waiting, Leased: ts.Leased, Acked: ts.Acked, Dead: ts.Dead,
		Dropped: ts.Dropped, Redelivered: ts.Redelivered, Consumed: ts.Consumed, OldestReady: ts.OldestReady, Groups: ts.Groups}
	for _, l := range ts.Leases {
		out.Leases = append(out.Leases, LeaseStatus(l))
	}
	out.DeadLeaseEnded = ts.DeadLeaseEnded
	if d := ts.LastDead; d != nil {
		out.LastDead = &DeadRow{Key: d.Key, Index: d.Index, Deliveries: d.Deliveries, Reason: d.Reason, At: d.At}
	}
	return out
}

// Status counts the task's rows by state, Ready and Waiting by the task's
// fields, as of one moment.
func (t *Task) Status(ctx context.Context) (TaskStatus, error) {
	ts, err := t.summary(ctx, "TaskStatus", true)
	if err != nil {
		return TaskStatus{}, err
	}
	return taskStatus(ts), nil
}

// summary is the task's summary (see metadata.Summary), with its counts
// by state or without (the engine keeps those counts from the first
// summary that asks for them on).
func (t *Task) summary(ctx context.Context, op string, counts bool) (_ metadata.TaskSummary, err error) {
	c := t.c
	ctx, tr := c.trace(ctx, op, t.partition, 0)
	defer func() { tr.done(err) }()
	release, err := c.enter(ctx, op, t.partition)
	if err != nil {
		return metadata.TaskSummary{}, err
	}
	defer release()
	sum, err := metadata.Summarize(ctx, c.meta, t.partition, metadata.SummaryRequest{Tasks: []string{t.name}, Fields: t.fields, Counts: counts})
	return sum.Tasks[t.name], err
}

// consumption returns the partition's rows and the task's deliveries, as
// of one moment.
func (t *Task) consumption(ctx context.Context, op string) ([]*metadata.Row, []metadata.Delivery, error) {
	v, err := t.view(ctx, op)
	return v.Rows, v.Tasks[t.name], err
}

// view is the partition as the task sees it, as of one moment.
func (t *Task) view(ctx context.Context, op string) (_ metadata.View, err error) {
	c := t.c
	ctx, tr := c.trace(ctx, op, t.partition, 0)
	defer func() { tr.done(err) }()
	release, err := c.enter(ctx, op, t.partition)
	if err != nil {
		return metadata.View{}, err
	}
	defer release()
	return c.meta.View(ctx, t.partition, t.name)
}

// DeadRow is a row the task gave up on.
type DeadRow struct {
	Key        string
	Index      uint64
	Deliveries int
	// Reason is the row's last error: the reason of the last
	// Lease.NackErr (a Consume handler's error) that gave one, or "lease
	// ended" when its last lease ended unsettled; At is when. "" and
	// zero when no nack gave a reason.
	Reason string
	At     time.Time
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
			out = append(out, DeadRow{Key: k, Index: d.Index, Deliveries: d.Deliveries, Reason: d.Reason, At: d.At})
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

// Drop makes rows of keys that the task holds no lease on and has not
// consumed (ready, still waiting for a field of the task, or dead)
// dropped: consumed by the task without delivery, never delivered to it.
// Errors as Retry's (a leased, acked or dropped row is lost).
func (t *Task) Drop(ctx context.Context, keys ...string) error {
	return t.mark(ctx, "Drop", metadata.Drop, keys)
}

func (t *Task) mark(ctx context.Context, op string, sop metadata.SettleOp, keys []string) (err error) {
	c := t.c
	ctx, tr := c.trace(ctx, op, t.partition, len(keys))
	defer func() { tr.done(err) }()
	release, err := c.enter(ctx, op, t.partition)
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
	c.cleared(ctx, tr, t.partition, res.Cleared)
	return lostError(strings.ToLower(op), t.partition, t.name, res.Lost, infos)
}

// ResetConsumption forgets task's consumption of keys of partition (every
// row when none are named), as TransferQueue's reset_consumption does for
// a whole partition: the rows are ready for the task again, their delivery
// counts reset, and leases on them are lost. An unknown key fails with
// ErrNotFound, an empty task name with ErrInvalid, changing nothing.
func (c *Client) ResetConsumption(ctx context.Context, partition, task string, keys ...string) (err error) {
	ctx, tr := c.trace(ctx, "ResetConsumption", partition, len(keys))
	defer func() { tr.done(err) }()
	release, err := c.enter(ctx, "ResetConsumption", partition)
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
