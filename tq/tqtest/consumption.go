package tqtest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/tqgo/tqgo/tq"
)

// consumptionCases: per-key consumption (Client.Consumption,
// Task.Consumption) as its docs state it, on every engine.
func consumptionCases() []testCase {
	return []testCase{
		{"Consumption/PerKeyPerTask", consumptionPerKey},
		{"Consumption/UnknownKey", consumptionUnknownKey},
	}
}

// consumptionPerKey: after claims, an ack, a nack, a drop and a death,
// each key's state, deliveries, holder and lease end per task are what
// happened to it, read from another client; Task.Consumption tells a row
// lacking the task's field as waiting.
func consumptionPerKey(t *testing.T, e Engine) {
	prod, reader := e.Open(t), e.Open(t)
	p := "consumption-per-key"
	keys := keysN(5)
	putRows(t, prod, p, keys, nil, "x")
	putRows(t, prod, p, []string{"w"}, nil, "y") // lacks x
	train := mustTask(t, e.Open(t), p, "train", []string{"x"}, tq.ConsumerName("worker-7"), tq.LeaseFor(time.Minute))
	l := mustClaim(t, train, 3)
	got := l.Keys()
	if len(got) != 3 {
		t.Fatalf("claim of 3: %q", got)
	}
	mustAck(t, l, got[0])
	if err := l.Nack(t.Context(), 0, got[1]); err != nil {
		t.Fatal(err)
	}
	var rest []string
	for _, k := range keys {
		if !slices.Contains(got, k) {
			rest = append(rest, k)
		}
	}
	if err := train.Drop(t.Context(), rest[0]); err != nil {
		t.Fatal(err)
	}
	// eval: one delivery with MaxDeliveries 1, nacked: dead.
	eval := mustTask(t, e.Open(t), p, "eval", []string{"x"}, tq.MaxDeliveries(1))
	le := mustClaim(t, eval, 1)
	if le.Len() != 1 {
		t.Fatalf("eval's claim: %q", le.Keys())
	}
	dead := le.Keys()[0]
	if err := le.Nack(t.Context(), 0); err != nil {
		t.Fatal(err)
	}

	all, err := reader.Consumption(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 6 {
		t.Fatalf("Consumption of every row: %d rows, want 6", len(all))
	}
	for i := 1; i < len(all); i++ {
		if all[i-1].Index >= all[i].Index {
			t.Fatalf("Consumption of every row: not by index: %+v", all)
		}
	}
	byKey := map[string]tq.KeyConsumption{}
	for _, kc := range all {
		byKey[kc.Key] = kc
		if len(kc.Tasks) != 2 {
			t.Errorf("key %q: tasks %v, want train and eval", kc.Key, kc.Tasks)
		}
	}
	type want struct {
		state      tq.RowState
		deliveries int
		holder     string
	}
	wantTrain := map[string]want{
		got[0]:  {tq.StateAcked, 1, ""},
		got[1]:  {tq.StateReady, 1, ""},
		got[2]:  {tq.StateLeased, 1, "worker-7"},
		rest[0]: {tq.StateDropped, 0, ""},
		rest[1]: {tq.StateReady, 0, ""},
		"w":     {tq.StateReady, 0, ""}, // Client.Consumption knows no fields
	}
	for k, w := range wantTrain {
		ks := byKey[k].Tasks["train"]
		if ks.State != w.state || ks.Deliveries != w.deliveries || ks.Holder != w.holder {
			t.Errorf("key %q task train: %+v, want %s, %d deliveries, holder %q", k, ks, w.state, w.deliveries, w.holder)
		}
	}
	leased := byKey[got[2]].Tasks["train"]
	if d := leased.Until.Sub(l.Until()); d < -time.Second || d > time.Second {
		t.Errorf("leased key %q: until %v, want the lease's %v", got[2], leased.Until, l.Until())
	}
	st := mustStatus(t, train)
	if len(st.Leases) != 1 || leased.Lease != st.Leases[0].ID {
		t.Errorf("leased key's Lease %q, want the ID Status gives its lease: %+v", leased.Lease, st.Leases)
	}
	for _, k := range append(keys, "w") {
		ks := byKey[k].Tasks["eval"]
		w := want{tq.StateReady, 0, ""}
		if k == dead {
			w = want{tq.StateDead, 1, ""}
		}
		if ks.State != w.state || ks.Deliveries != w.deliveries || ks.Holder != w.holder {
			t.Errorf("key %q task eval: %+v, want %s, %d deliveries", k, ks, w.state, w.deliveries)
		}
	}

	// Named keys, in the order named; the task's own view knows its fields.
	some, err := train.Consumption(t.Context(), "w", got[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(some) != 2 || some[0].Key != "w" || some[1].Key != got[0] {
		t.Fatalf("Task.Consumption(w, %s): %+v", got[0], some)
	}
	if ks := some[0].Tasks["train"]; ks.State != tq.StateWaiting || len(some[0].Tasks) != 1 {
		t.Errorf("key w for train: %+v, want waiting (it lacks x), train only", some[0].Tasks)
	}
	if ks := some[1].Tasks["train"]; ks.State != tq.StateAcked || ks.Deliveries != 1 {
		t.Errorf("key %q for train: %+v, want acked after 1 delivery", got[0], ks)
	}
}

// consumptionUnknownKey: an unknown key fails with ErrNotFound naming it,
// an empty or repeated one with ErrInvalid; an unknown partition has no
// rows.
func consumptionUnknownKey(t *testing.T, e Engine) {
	c := e.Open(t)
	p := "consumption-unknown"
	putRows(t, c, p, []string{"a"}, nil, "x")
	_, err := c.Consumption(t.Context(), p, "a", "nope")
	var ke *tq.KeyError
	if !errors.Is(err, tq.ErrNotFound) || !errors.As(err, &ke) || ke.Key != "nope" || ke.Partition != p {
		t.Fatalf("Consumption of an unknown key: %v, want ErrNotFound naming key nope", err)
	}
	task := mustTask(t, c, p, "t", []string{"x"})
	if _, err := task.Consumption(t.Context(), "nope"); !errors.Is(err, tq.ErrNotFound) {
		t.Fatalf("Task.Consumption of an unknown key: %v, want ErrNotFound", err)
	}
	if _, err := c.Consumption(t.Context(), p, ""); !errors.Is(err, tq.ErrInvalid) {
		t.Fatalf("Consumption of an empty key: %v, want ErrInvalid", err)
	}
	if _, err := c.Consumption(t.Context(), p, "a", "a"); !errors.Is(err, tq.ErrInvalid) {
		t.Fatalf("Consumption of a key named twice: %v, want ErrInvalid", err)
	}
	if kcs, err := c.Consumption(t.Context(), "no-such-partition"); err != nil || len(kcs) != 0 {
		t.Fatalf("Consumption of an unknown partition: %v, %v; want no rows", kcs, err)
	}
}
