package tq

import (
	"context"
	"time"

	"github.com/tqgo/tqgo/backends/metadata"
)

// RowState is a row's state for one task.
type RowState string

// The states of a row for a task, as TaskStatus counts them.
const (
	StateReady   RowState = "ready"   // claimable (see KeyState.Until for a delayed one)
	StateWaiting RowState = "waiting" // some field the task names is not committed yet (Task.Consumption only)
	StateLeased  RowState = "leased"
	StateAcked   RowState = "acked"
	StateDead    RowState = "dead"    // delivered MaxDeliveries times without an ack
	StateDropped RowState = "dropped" // consumed without delivery
)

// KeyConsumption is one row's consumption, as of one moment.
type KeyConsumption struct {
	Key   string
	Index uint64
	// Tasks is the row's state for each task: Client.Consumption's, every
	// task with state in the partition (those Status lists); a
	// Task.Consumption's, that task only.
	Tasks map[string]KeyState
}

// KeyState is a row's state for one task.
type KeyState struct {
	// State is the row's state. Client.Consumption, not knowing the fields
	// a task waits for, gives StateReady for every row in no other state
	// (as Status counts it); Task.Consumption gives StateWaiting for one
	// that lacks a field of the task.
	State RowState
	// Deliveries is how many times the row was leased to the task since
	// it last became new to it (a Retry or ResetConsumption resets it).
	Deliveries int
	// Holder is, for a leased row, the name of the consumer whose claim
	// holds it (see WithName); "" otherwise.
	Holder string
	// Lease is, for a leased row, its lease's LeaseStatus.ID: rows with
	// the same Lease are held by one lease. "" otherwise.
	Lease string
	// Until is, for a leased row, when its lease ends unless extended; for
	// a ready row that a Nack delayed, when it may be claimed again; zero
	// otherwise. A time of this process.
	Until time.Time
	// Granted is, for a leased row, when the claim holding it leased it
	// (an Extend keeps it); zero otherwise. A time of this process.
	Granted time.Time
	// Reason is the row's last error for the task, At when (see
	// DeadRow.Reason): kept through later deliveries until an ack or a
	// Retry; "" and zero for none.
	Reason string
	At     time.Time
}

// Consumption returns, for each of keys of partition (every row, by
// index, when none is named), its state for every task with state in the
// partition: whether the task acknowledged it, how many times it was
// delivered, and who holds it until when; as of one moment, as
// TransferQueue's get_consumption_status tells per index. An unknown key
// fails with a *KeyError matching ErrNotFound naming it, an empty or
// repeated key with ErrInvalid, changing nothing; an unknown partition,
// named no key, has no rows. It reads the partition's whole state (every
// row, which a tq server sends), however few keys it names; Status
// counts without the rows.
func (c *Client) Consumption(ctx context.Context, partition string, keys ...string) (_ []KeyConsumption, err error) {
	ctx, tr := c.trace(ctx, "Consumption", partition, len(keys))
	defer func() { tr.done(err) }()
	release, err := c.enter(ctx, "Consumption", partition)
	if err != nil {
		return nil, err
	}
	defer release()
	if err := checkPartition(partition); err != nil {
		return nil, err
	}
	if err := checkKeys(partition, keys); err != nil {
		return nil, err
	}
	v, err := c.meta.View(ctx, partition)
	if err != nil {
		return nil, err
	}
	tasks := map[string][]metadata.Delivery{}
	for task, ds := range v.Tasks {
		tasks[task] = ds
	}
	// The tasks Status lists without entries: group tasks waiting, and
	// tasks whose consumed rows were all cleared.
	for task, gs := range v.Groups {
		if _, ok := tasks[task]; !ok && len(gs) > 0 {
			tasks[task] = nil
		}
	}
	for task, n := range v.Consumed {
		if _, ok := tasks[task]; !ok && n > 0 {
			tasks[task] = nil
		}
	}
	out, err := keyStates(partition, v.Rows, keys, tasks, nil)
	tr.add(len(out), 0, 0)
	return out, err
}

// Consumption returns, for each of keys of the task's partition (every
// row, by index, when none is named), its state for the task alone, a row
// that lacks a field of the task StateWaiting; as of one moment. Errors as
// Client.Consumption's.
func (t *Task) Consumption(ctx context.Context, keys ...string) ([]KeyConsumption, error) {
	if err := checkKeys(t.partition, keys); err != nil {
		return nil, err
	}
	v, err := t.view(ctx, "TaskConsumption")
	if err != nil {
		return nil, err
	}
	fields := t.fields
	if fields == nil {
		fields = []string{}
	}
	return keyStates(t.partition, v.Rows, keys, map[string][]metadata.Delivery{t.name: v.Tasks[t.name]}, fields)
}

// keyStates is the state of each of keys (every row when none) of rows
// for each of tasks, given their deliveries. fields, not nil, are the
// fields the (single) task waits for: a row in no other state that lacks
// one is waiting.
func keyStates(partition string, rows []*metadata.Row, keys []string, tasks map[string][]metadata.Delivery, fields []string) ([]KeyConsumption, error) {
	picked := rows
	if len(keys) > 0 {
		byKey := make(map[string]*metadata.Row, len(rows))
		for _, r := range rows {
			byKey[r.Key] = r
		}
		picked = make([]*metadata.Row, len(keys))
		for i, k := range keys {
			r := byKey[k]
			if r == nil {
				return nil, &KeyError{Partition: partition, Key: k, Err: ErrNotFound}
			}
			picked[i] = r
		}
	}
	byIndex := make(map[string]map[uint64]*metadata.Delivery, len(tasks))
	for task, ds := range tasks {
		m := make(map[uint64]*metadata.Delivery, len(ds))
		for i := range ds {
			m[ds[i].Index] = &ds[i]
		}
		byIndex[task] = m
	}
	out := make([]KeyConsumption, len(picked))
	for i, r := range picked {
		kc := KeyConsumption{Key: r.Key, Index: r.Index, Tasks: make(map[string]KeyState, len(tasks))}
		for task := range tasks {
			kc.Tasks[task] = keyState(r, byIndex[task][r.Index], fields)
		}
		out[i] = kc
	}
	return out, nil
}

// keyState is row r's state given the task's delivery d (nil: none) and,
// when not nil, the fields the task waits for.
func keyState(r *metadata.Row, d *metadata.Delivery, fields []string) KeyState {
	if d == nil {
		if fields != nil && !hasFields(r, fields) {
			return KeyState{State: StateWaiting}
		}
		return KeyState{State: StateReady}
	}
	ks := KeyState{Deliveries: d.Deliveries, Reason: d.Reason, At: d.At}
	switch d.State {
	case metadata.Ready:
		ks.State = StateReady
		if fields != nil && !hasFields(r, fields) {
			ks.State = StateWaiting
		}
		ks.Until = d.Until
	case metadata.Leased:
		ks.State, ks.Holder, ks.Lease, ks.Until, ks.Granted = StateLeased, d.Holder, metadata.LeaseID(d.Lease), d.Until, d.Granted
	case metadata.Acked:
		ks.State = StateAcked
	case metadata.Dead:
		ks.State = StateDead
	case metadata.Dropped:
		ks.State = StateDropped
	}
	return ks
}
