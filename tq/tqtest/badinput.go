package tqtest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/tqgo/tqgo/tq"
)

// badInputCases: inputs the docs refuse get a typed error and change
// nothing, on every engine.
func badInputCases() []testCase {
	return []testCase{
		{"BadInput/Table", badInputTable},
		{"BadInput/SamplerPanics", badInputSamplerPanics},
	}
}

// partitionState is what a partition holds, as List and Status show it,
// with lease ends left out (a server engine converts them to local time
// anew at each call).
type partitionState struct {
	Rows   []tq.RowInfo
	Status tq.Status
}

func stateOf(t *testing.T, c *tq.Client, partition string) partitionState {
	t.Helper()
	st := *mustStatusOf(t, c, partition)
	tasks := make(map[string]tq.TaskStatus, len(st.Tasks))
	for name, ts := range st.Tasks {
		leases := make([]tq.LeaseStatus, len(ts.Leases))
		for i, l := range ts.Leases {
			l.Until, l.Granted = time.Time{}, time.Time{}
			leases[i] = l
		}
		ts.Leases = leases
		tasks[name] = ts
	}
	st.Tasks = tasks
	return partitionState{Rows: mustList(t, c, partition).Rows, Status: st}
}

// badInputTable feeds each public call taking input a value its docs
// refuse: each fails matching tq.ErrInvalid and leaves the partition (and
// presence) as it was.
func badInputTable(t *testing.T, e Engine) {
	c := e.Open(t)
	ctx := t.Context()
	p := "bad-input"
	keys := keysN(4)
	tags := make([]tq.Tag, len(keys))
	for i := range tags {
		tags[i] = tq.Tag{"uid": int64(i / 2), "v": int64(i)}
	}
	putRows(t, c, p, keys, tags, "a")
	mustSetCapacity(t, c, p, tq.Capacity{Rows: 100})
	task := mustTask(t, c, p, "w", []string{"a"})
	lease := mustClaim(t, task, 2)
	if lease.Len() != 2 {
		t.Fatalf("setup claim leased %d rows", lease.Len())
	}
	before := stateOf(t, c, p)
	presence := stateOf(t, c, tq.PresencePartition)

	task2 := func(opts ...tq.TaskOption) error {
		_, err := c.Task(p, "w2", []string{"a"}, opts...)
		return err
	}
	claim := func(n int, opts ...tq.ClaimOption) error {
		_, err := task.Claim(ctx, n, opts...)
		return err
	}
	wait := func(n int, opts ...tq.ClaimOption) error {
		_, err := task.Wait(ctx, n, opts...)
		return err
	}
	row := oneRow(9)
	ratio := tq.Ratio{SamplesPerInsert: 1, MinSize: 0, ErrorBuffer: 4}
	calls := []struct {
		name string
		call func() error
	}{
		{"Put/bad partition", func() error { return c.Put(ctx, "{", "k9", map[string]any{"a": []float32{1}}, nil) }},
		{"Put/empty key", func() error { return c.Put(ctx, p, "", map[string]any{"a": []float32{1}}, nil) }},
		{"BatchPut/bad field", func() error { return c.BatchPut(ctx, p, []string{"k9"}, tq.Batch{"a b": row["x"]}, nil) }},
		{"BatchPut/duplicate key", func() error {
			return c.BatchPut(ctx, p, []string{"k9", "k9"}, tq.Batch{"a": tq.JaggedOf([][]float32{{1}, {2}})}, nil)
		}},
		{"BatchPut/rows and keys differ", func() error { return c.BatchPut(ctx, p, []string{"k8", "k9"}, row, nil) }},
		{"BatchPut/tags and keys differ", func() error { return c.BatchPut(ctx, p, []string{"k9"}, row, []tq.Tag{{}, {}}) }},
		{"BatchPut/WhenFull(9)", func() error { return c.BatchPut(tq.WhenFull(ctx, tq.FullPolicy(9)), p, []string{"k9"}, row, nil) }},
		{"Put/WhenFull(9)", func() error {
			return c.Put(tq.WhenFull(ctx, tq.FullPolicy(9)), p, "k0", map[string]any{"a": []float32{5}}, nil)
		}},
		{"BatchGet/bad partition", func() error { _, err := c.BatchGet(ctx, "{", []string{"k0"}, "a"); return err }},
		{"BatchGet/duplicate key", func() error { _, err := c.BatchGet(ctx, p, []string{"k0", "k0"}, "a"); return err }},
		{"BatchGet/bad field", func() error { _, err := c.BatchGet(ctx, p, []string{"k0"}, "a#"); return err }},
		{"List/bad partition", func() error { _, err := c.List(ctx, "{"); return err }},
		{"BatchGetByMeta/nil", func() error { _, err := c.BatchGetByMeta(ctx, nil, "a"); return err }},
		{"BatchGetByMeta/bad partition", func() error {
			_, err := c.BatchGetByMeta(ctx, &tq.BatchMeta{Partition: "{", Rows: []tq.RowInfo{{Key: "k0"}}}, "a")
			return err
		}},
		{"BatchGetInto/bad field", func() error { _, err := c.BatchGetInto(ctx, p, []string{"k0"}, nil, "a b"); return err }},
		{"Status/bad partition", func() error { _, err := c.Status(ctx, "{"); return err }},
		{"Reclaim/negative age", func() error { _, err := c.Reclaim(ctx, p, -time.Second); return err }},
		{"Lookup/empty key", func() error { _, err := c.Lookup(ctx, p, []string{""}); return err }},
		{"Clear/empty key", func() error { return c.Clear(ctx, p, []string{"k0", ""}) }},
		{"Clear/duplicate key", func() error { return c.Clear(ctx, p, []string{"k0", "k0"}) }},
		{"ClearPartition/bad partition", func() error { return c.ClearPartition(ctx, "a b") }},
		{"ClearFields/no field", func() error { return c.ClearFields(ctx, p, keys) }},
		{"ClearFields/empty field", func() error { return c.ClearFields(ctx, p, keys, "") }},
		{"ClearFields/field twice", func() error { return c.ClearFields(ctx, p, keys, "a", "a") }},
		{"Task/no fields", func() error { _, err := c.Task(p, "w2", nil); return err }},
		{"Task/LeaseFor(0)", func() error { return task2(tq.LeaseFor(0)) }},
		{"Task/LeaseFor(500ns)", func() error { return task2(tq.LeaseFor(500 * time.Nanosecond)) }},
		{"Task/MaxDeliveries(0)", func() error { return task2(tq.MaxDeliveries(0)) }},
		{"Task/MaxDeliveries(huge)", func() error { return task2(tq.MaxDeliveries(math.MaxInt)) }},
		{"Task/Ranks(1<<31-1)", func() error { return task2(tq.Ranks(1<<31-1, 0, "")) }},
		{"Task/Ranks(MaxRanks+1)", func() error { return task2(tq.Ranks(tq.MaxRanks+1, 0, "")) }},
		{"Task/Ranks(2,2)", func() error { return task2(tq.Ranks(2, 2, "")) }},
		{"Task/WithGroups(huge)", func() error { return task2(tq.WithGroups(tq.GroupTag("uid"), math.MaxInt)) }},
		{"Task/WithGroups(MaxGroupSize+1)", func() error { return task2(tq.WithGroups(tq.GroupTag("uid"), tq.MaxGroupSize+1)) }},
		{"Task/WithGroups(0)", func() error { return task2(tq.WithGroups(tq.GroupTag("uid"), 0)) }},
		{"Task/TokenBudget(0)", func() error { return task2(tq.TokenBudget("v", 0)) }},
		{"Task/Staleness(-1)", func() error { return task2(tq.Staleness("v", -1, false)) }},
		{"Task/ConsumerName(bad)", func() error { return task2(tq.ConsumerName("a|b")) }},
		{"Task/GroupDeadline(500ns)", func() error {
			return task2(tq.WithGroups(tq.GroupTag("uid"), 2), tq.GroupDeadline(500*time.Nanosecond, true))
		}},
		{"Task/Stall(0)", func() error { return task2(tq.Stall(0)) }},
		{"Task/Stall(bad peer)", func() error { return task2(tq.Stall(time.Second, "{")) }},
		{"Consume/n 0", func() error {
			return task.Consume(ctx, 0, func(context.Context, *tq.Lease) error { return nil })
		}},
		{"Consume/nil handler", func() error { return task.Consume(ctx, 1, nil) }},
		{"Retry/empty key", func() error { return task.Retry(ctx, "") }},
		{"Drop/duplicate key", func() error { return task.Drop(ctx, "k2", "k2") }},
		{"Claim/0", func() error { return claim(0) }},
		{"Claim/huge", func() error { return claim(math.MaxInt) }},
		{"Claim/MaxClaim+1", func() error { return claim(tq.MaxClaim + 1) }},
		{"Claim/AtLeast past n", func() error { return claim(2, tq.AtLeast(3)) }},
		{"Claim/WithData bad field", func() error { return claim(1, tq.WithData("a b")) }},
		{"Wait/huge", func() error { return wait(math.MaxInt) }},
		{"Wait/AtLeast(0)", func() error { return wait(2, tq.AtLeast(0)) }},
		{"Ack/key not leased", func() error { return lease.Ack(ctx, "nope") }},
		{"Nack/negative delay", func() error { return lease.Nack(ctx, -time.Second) }},
		{"Nack/key not leased", func() error { return lease.Nack(ctx, 0, "nope") }},
		{"Extend/0", func() error { return lease.Extend(ctx, 0) }},
		{"Extend/500ns", func() error { return lease.Extend(ctx, 500*time.Nanosecond) }},
		{"Extend/key not leased", func() error { return lease.Extend(ctx, time.Minute, "nope") }},
		{"ResetConsumption/empty task", func() error { return c.ResetConsumption(ctx, p, "") }},
		{"SetCapacity/negative rows", func() error { return c.SetCapacity(ctx, p, tq.Capacity{Rows: -1}) }},
		{"SetCapacity/bad partition", func() error { return c.SetCapacity(ctx, "{", tq.Capacity{Rows: 1}) }},
		{"Pace/no tasks", func() error { return c.Pace(ctx, p, "v", 1, 0) }},
		{"Pace/negative k", func() error { return c.Pace(ctx, p, "v", 1, -1, "w") }},
		{"Pace/v-k overflows", func() error {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			return c.Pace(pctx, p, "v", math.MinInt64, 1, "w")
		}},
		{"AwaitInsert/bad ratio", func() error { return c.AwaitInsert(ctx, p, "w", tq.Ratio{SamplesPerInsert: 2}, 1) }},
		{"AwaitSample/n 0", func() error { return c.AwaitSample(ctx, p, "w", ratio, 0) }},
		{"Announce/bad group", func() error { _, err := c.Announce(ctx, "{", 0); return err }},
		{"Announce/too often", func() error { _, err := c.Announce(ctx, "g", time.Millisecond); return err }},
		{"Members/bad group", func() error { _, err := c.Members(ctx, "{"); return err }},
	}
	for _, k := range calls {
		err := k.call()
		if !errors.Is(err, tq.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", k.name, err)
		}
	}
	if after := stateOf(t, c, p); !reflect.DeepEqual(after, before) {
		t.Errorf("bad inputs changed the partition:\nbefore %s\nafter  %s", fmt.Sprintf("%+v", before), fmt.Sprintf("%+v", after))
	}
	if after := stateOf(t, c, tq.PresencePartition); !reflect.DeepEqual(after, presence) {
		t.Errorf("bad inputs changed presence: %+v, was %+v", after, presence)
	}
	// The lease still holds its rows, and the claim after works.
	mustAck(t, lease)
	if l := mustClaim(t, task, 2); l.Len() != 2 {
		t.Errorf("claim after the bad inputs leased %d rows, want 2", l.Len())
	}
}

// badInputSamplerPanics: a custom sampler that panics fails its claim
// with a *SamplerPanicError (ErrInvalid), leasing nothing; the partition
// is not left locked: the next claim, every other call and Close work.
func badInputSamplerPanics(t *testing.T, e Engine) {
	c := e.Open(t)
	ctx := t.Context()
	p := "sampler-panics"
	putRows(t, c, p, keysN(4), nil, "a")
	boom := tq.SamplerFunc(func([]tq.Candidate, int) ([][]int, []int) { panic("boom") })
	bad := mustTask(t, c, p, "w", []string{"a"}, tq.WithSampler(boom))
	before := stateOf(t, c, p)
	for _, claim := range []func() (*tq.Lease, error){
		func() (*tq.Lease, error) { return bad.Claim(ctx, 2) },
		func() (*tq.Lease, error) {
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			return bad.Wait(wctx, 2)
		},
	} {
		l, err := claim()
		var pe *tq.SamplerPanicError
		if !errors.Is(err, tq.ErrInvalid) || !errors.As(err, &pe) || pe.Value != "boom" {
			t.Fatalf("claim with a panicking sampler: %v, %v; want a *SamplerPanicError of \"boom\"", l, err)
		}
	}
	if after := stateOf(t, c, p); !reflect.DeepEqual(after, before) {
		t.Errorf("a panicking sampler changed the partition:\nbefore %+v\nafter  %+v", before, after)
	}
	// The partition is not wedged: the same task's sequential claim, a
	// put and a read of this client go on.
	good := mustTask(t, c, p, "w", []string{"a"})
	if l := mustClaim(t, good, 2); l.Len() != 2 {
		t.Fatalf("claim after the panic leased %d rows, want 2", l.Len())
	}
	putRows(t, c, p, []string{"k9"}, nil, "a")
	if st := mustStatusOf(t, c, p); st.Rows != 5 || st.Tasks["w"].Leased != 2 {
		t.Fatalf("status after the panic: %+v", st)
	}
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close after a panicking sampler: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close after a panicking sampler did not return in 30s")
	}
}
