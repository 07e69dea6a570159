package backendtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
)

// RunQueue checks that the stores newMeta returns keep the consumption
// contract (metadata.Queue), one subtest per rule, each on a fresh store.
// Leases in it last a few hundred milliseconds, so that expiry is seen
// soon; the checks that wait for one allow seconds for it.
func RunQueue(t *testing.T, newMeta func(t *testing.T) metadata.MetaStore) {
	t.Helper()
	nonce := newNonce()
	for _, tc := range queueTests {
		t.Run(tc.name, func(t *testing.T) {
			m := newMeta(t)
			if m == nil {
				t.Fatal("newMeta returned nil")
			}
			tc.fn(&qt{mt: &mt{t: t, ctx: t.Context(), m: m, prefix: prefix(nonce, t)}, q: m})
		})
	}
}

var queueTests = []struct {
	name string
	fn   func(*qt)
}{
	{"Sequential", testClaimSequential},
	{"Min", testClaimMin},
	{"AckNack", testAckNack},
	{"Expiry", testExpiry},
	{"Dead", testDead},
	{"Extend", testExtend},
	{"NackDelay", testNackDelay},
	{"Units", testUnits},
	{"PickDrop", testPickDrop},
	{"Tasks", testTasksApart},
	{"Reset", testReset},
	{"Delete", testQueueDelete},
	{"Invalid", testQueueInvalid},
	{"Concurrent", testClaimConcurrent},
	{"Wait", testWait},
	{"Batch", testBatch},
	{"BatchOrder", testBatchOrder},
	{"View", testView},
	{"Summary", testSummary},
	{"Undo", testUndo},
}

// qt is one queue subtest.
type qt struct {
	*mt
	q metadata.Queue
}

const testLease = 400 * time.Millisecond

// rows commits n new rows "<tag><i>" of partition p with fields, tagging
// each with its number, and returns their keys.
func (x *qt) rows(p, tag string, n int, fields ...string) []string {
	x.t.Helper()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%03d", tag, i)
	}
	res := x.prepare(p, keys, fields)
	ups := make([]metadata.RowUpdate, n)
	for i, r := range res {
		ups[i] = metadata.RowUpdate{Key: keys[i], Index: r.Index, Fields: fieldsNoTag(r, fields...), Tag: map[string]any{"i": int64(i)}}
	}
	x.commit(p, ups...)
	return keys
}

func fieldsNoTag(r metadata.Reservation, names ...string) map[string]metadata.FieldInfo {
	out := make(map[string]metadata.FieldInfo, len(names))
	for _, f := range names {
		out[f] = metadata.FieldInfo{DType: "float32", Shape: []int64{2}, Gen: r.Gens[f]}
	}
	return out
}

// each is the pick of every row, one unit each, in index order.
func each(rows []*metadata.Row, _ []metadata.Delivery) (metadata.Picked, error) {
	var p metadata.Picked
	for i := range rows {
		p.Units = append(p.Units, []int{i})
	}
	return p, nil
}

func req(task string, n int) metadata.ClaimRequest {
	return metadata.ClaimRequest{Task: task, Lease: testLease, Rows: n, Min: 1, Custom: true}
}

func (x *qt) claim(p string, r metadata.ClaimRequest, pick metadata.Pick) metadata.Claimed {
	x.t.Helper()
	c, err := x.q.Claim(x.ctx, p, r, pick)
	if err != nil {
		x.t.Fatalf("Claim(%q, %+v): %v", p, r, err)
	}
	if len(c.Rows) != len(c.Deliveries) {
		x.t.Fatalf("Claim: %d rows, %d deliveries", len(c.Rows), len(c.Deliveries))
	}
	n := 0
	for _, u := range c.Units {
		n += len(u)
	}
	if n != len(c.Rows) {
		x.t.Fatalf("Claim: units cover %d positions of %d rows", n, len(c.Rows))
	}
	if (c.Lease == "") != (len(c.Rows) == 0) {
		x.t.Fatalf("Claim: lease %q with %d rows", c.Lease, len(c.Rows))
	}
	for i, d := range c.Deliveries {
		if r.Batch != nil && d.Index == c.Rows[i].Index {
			continue // a share: rows another rank settled are there too
		}
		if d.Index != c.Rows[i].Index || d.State != metadata.Leased || d.Lease != c.Lease || d.Deliveries < 1 {
			x.t.Fatalf("Claim: delivery %d is %+v for row %d, lease %q", i, d, c.Rows[i].Index, c.Lease)
		}
	}
	return c
}

func (x *qt) settle(p string, r metadata.SettleRequest) metadata.SettleResult {
	x.t.Helper()
	res, err := x.q.Settle(x.ctx, p, r)
	if err != nil {
		x.t.Fatalf("Settle(%q, %+v): %v", p, r, err)
	}
	return res
}

func indexes(rows []*metadata.Row) []uint64 {
	out := make([]uint64, len(rows))
	for i, r := range rows {
		out[i] = r.Index
	}
	return out
}

func (x *qt) ack(p, task string, c metadata.Claimed, rows ...*metadata.Row) {
	x.t.Helper()
	if rows == nil {
		rows = c.Rows
	}
	if res := x.settle(p, metadata.SettleRequest{Task: task, Op: metadata.Ack, Lease: c.Lease, Indexes: indexes(rows)}); len(res.Lost) > 0 {
		x.t.Fatalf("Ack: lost %v", res.Lost)
	}
}

// states returns the task's states by index.
func (x *qt) states(p, task string) map[uint64]metadata.Delivery {
	x.t.Helper()
	all, err := x.q.Consumption(x.ctx, p, task)
	if err != nil {
		x.t.Fatalf("Consumption(%q, %q): %v", p, task, err)
	}
	ds, ok := all[task]
	if !ok {
		x.t.Fatalf("Consumption(%q, %q): task missing from %v", p, task, all)
	}
	out := map[uint64]metadata.Delivery{}
	for i, d := range ds {
		if i > 0 && ds[i-1].Index >= d.Index {
			x.t.Fatalf("Consumption: not in index order: %v", ds)
		}
		out[d.Index] = d
	}
	return out
}

func (x *qt) wantKeys(what string, rows []*metadata.Row, keys ...string) {
	x.t.Helper()
	got := make([]string, len(rows))
	for i, r := range rows {
		got[i] = r.Key
	}
	if !slices.Equal(got, keys) {
		x.t.Fatalf("%s: got rows %q, want %q", what, got, keys)
	}
}

// eventually polls claim until it leases something or the deadline
// passes; a lease's expiry is judged by the store's clock, which may be
// another machine's.
func (x *qt) eventually(p string, r metadata.ClaimRequest, pick metadata.Pick) metadata.Claimed {
	x.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := x.claim(p, r, pick)
		if len(c.Rows) > 0 || time.Now().After(deadline) {
			return c
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func testClaimSequential(x *qt) {
	p := x.part("p")
	keys := x.rows(p, "k", 10, "a")
	c1 := x.claim(p, req("t", 4), each)
	x.wantKeys("first claim", c1.Rows, keys[:4]...)
	c2 := x.claim(p, req("t", 4), each)
	x.wantKeys("second claim", c2.Rows, keys[4:8]...)
	if c1.Lease == c2.Lease {
		x.t.Fatalf("two claims share lease %q", c1.Lease)
	}
	for _, d := range append(c1.Deliveries, c2.Deliveries...) {
		if d.Deliveries != 1 {
			x.t.Fatalf("first delivery counted %d", d.Deliveries)
		}
	}
	if c1.Until.Before(time.Now().Add(-time.Second)) || c1.Until.After(time.Now().Add(testLease+5*time.Second)) {
		x.t.Fatalf("lease ends at %v, now %v", c1.Until, time.Now())
	}
	c3 := x.claim(p, req("t", 4), each)
	x.wantKeys("third claim", c3.Rows, keys[8:]...)
	if c4 := x.claim(p, req("t", 4), each); len(c4.Rows) != 0 {
		x.t.Fatalf("claim of a drained task got %d rows", len(c4.Rows))
	}
	st := x.states(p, "t")
	if len(st) != 10 {
		x.t.Fatalf("consumption lists %d rows, want 10", len(st))
	}
	for _, d := range st {
		if d.State != metadata.Leased || d.Deliveries != 1 {
			x.t.Fatalf("row %d: %+v, want leased once", d.Index, d)
		}
	}
	// An unknown partition has nothing to claim.
	if c := x.claim(x.part("none"), req("t", 4), each); len(c.Rows) != 0 {
		x.t.Fatalf("claim of an unknown partition got %d rows", len(c.Rows))
	}
}

func testClaimMin(x *qt) {
	p := x.part("p")
	keys := x.rows(p, "k", 3, "a")
	r := req("t", 8)
	r.Min = 4
	if c := x.claim(p, r, each); len(c.Rows) != 0 {
		x.t.Fatalf("claim of min 4 with 3 ready leased %d", len(c.Rows))
	}
	r.Min = 3
	c := x.claim(p, r, each)
	x.wantKeys("claim of min 3", c.Rows, keys...)
}

func testAckNack(x *qt) {
	p := x.part("p")
	keys := x.rows(p, "k", 4, "a")
	c := x.claim(p, req("t", 4), each)
	x.ack(p, "t", c, c.Rows[:2]...)
	// An ack sent twice is applied, not lost.
	x.ack(p, "t", c, c.Rows[0])
	other := x.settle(p, metadata.SettleRequest{Task: "t", Op: metadata.Ack, Lease: "not-the-lease", Indexes: indexes(c.Rows[2:])})
	if !slices.Equal(other.Lost, indexes(c.Rows[2:])) {
		x.t.Fatalf("ack with another token: lost %v, want %v", other.Lost, indexes(c.Rows[2:]))
	}
	nack := x.settle(p, metadata.SettleRequest{Task: "t", Op: metadata.Nack, Lease: c.Lease, Indexes: indexes(c.Rows[1:3])})
	if !slices.Equal(nack.Lost, []uint64{c.Rows[1].Index}) {
		x.t.Fatalf("nack of an acked and a leased row: lost %v, want [%d]", nack.Lost, c.Rows[1].Index)
	}
	// A nack sent twice is applied, not lost.
	if res := x.settle(p, metadata.SettleRequest{Task: "t", Op: metadata.Nack, Lease: c.Lease, Indexes: indexes(c.Rows[2:3])}); len(res.Lost) != 0 {
		x.t.Fatalf("a nack sent twice: lost %v", res.Lost)
	}
	again := x.claim(p, req("t", 4), each)
	x.wantKeys("claim after nack", again.Rows, keys[2])
	if again.Deliveries[0].Deliveries != 2 {
		x.t.Fatalf("redelivery counted %d, want 2", again.Deliveries[0].Deliveries)
	}
	st := x.states(p, "t")
	for i, want := range []metadata.State{metadata.Acked, metadata.Acked, metadata.Leased, metadata.Leased} {
		if got := st[c.Rows[i].Index].State; got != want {
			x.t.Fatalf("row %s is %v, want %v", keys[i], got, want)
		}
	}
	if st[c.Rows[0].Index].Lease != c.Lease {
		x.t.Fatalf("acked row names lease %q, want %q", st[c.Rows[0].Index].Lease, c.Lease)
	}
}

func testExpiry(x *qt) {
	p := x.part("p")
	keys := x.rows(p, "k", 2, "a")
	c := x.claim(p, req("t", 2), each)
	time.Sleep(testLease + 100*time.Millisecond)
	// Expired, but not delivered again: its holder may still ack it.
	x.ack(p, "t", c, c.Rows[0])
	again := x.eventually(p, req("t", 2), each)
	x.wantKeys("claim after expiry", again.Rows, keys[1])
	if again.Deliveries[0].Deliveries != 2 {
		x.t.Fatalf("redelivery counted %d, want 2", again.Deliveries[0].Deliveries)
	}
	late := x.settle(p, metadata.SettleRequest{Task: "t", Op: metadata.Ack, Lease: c.Lease, Indexes: indexes(c.Rows[1:])})
	if len(late.Lost) != 1 {
		x.t.Fatalf("ack of a row delivered again: lost %v, want it", late.Lost)
	}
	x.ack(p, "t", again)
}

func testDead(x *qt) {
	p := x.part("p")
	keys := x.rows(p, "k", 2, "a")
	r := req("t", 2)
	r.MaxDeliveries = 2
	c := x.claim(p, r, each)
	x.settle(p, metadata.SettleRequest{Task: "t", Op: metadata.Nack, Lease: c.Lease, Indexes: indexes(c.Rows)})
	c = x.claim(p, r, each)
	x.wantKeys("second delivery", c.Rows, keys...)
	x.settle(p, metadata.SettleRequest{Task: "t", Op: metadata.Nack, Lease: c.Lease, Indexes: indexes(c.Rows[:1])})
	time.Sleep(testLease + 100*time.Millisecond) // the other expires
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := x.states(p, "t")
		if st[c.Rows[0].Index].State == metadata.Dead && st[c.Rows[1].Index].State == metadata.Dead {
			if st[c.Rows[0].Index].Deliveries != 2 {
				x.t.Fatalf("dead row delivered %d times, want 2", st[c.Rows[0].Index].Deliveries)
			}
			break
		}
		if time.Now().After(deadline) {
			x.t.Fatalf("rows not dead after two deliveries: %v", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := x.claim(p, r, each); len(got.Rows) != 0 {
		x.t.Fatalf("dead rows delivered: %q", got.Rows[0].Key)
	}
	if res := x.settle(p, metadata.SettleRequest{Task: "t", Op: metadata.Retry, Indexes: indexes(c.Rows[:1])}); len(res.Lost) != 0 {
		x.t.Fatalf("retry of a dead row lost %v", res.Lost)
	}
	if res := x.settle(p, metadata.SettleRequest{Task: "t", Op: metadata.Drop, Indexes: indexes(c.Rows[1:])}); len(res.Lost) != 0 {
		x.t.Fatalf("drop of a dead row lost %v", res.Lost)
	}
	retried := x.claim(p, r, each)
	x.wantKeys("claim after retry", retried.Rows, keys[0])
	if retried.Deliveries[0].Deliveries != 1 {
		x.t.Fatalf("retried row counted %d deliveries, want 1", retried.Deliveries[0].Deliveries)
	}
	if st := x.states(p, "t"); st[c.Rows[1].Index].State != metadata.Dropped {
		x.t.Fatalf("dropped row is %v", st[c.Rows[1].Index].State)
	}
	// Retry and drop need a dead (or, for drop, ready) row.
	if res := x.settle(p, metadata.SettleRequest{Task: "t", Op: metadata.Retry, Indexes: indexes(retried.Rows)}); len(res.Lost) != 1 {
		x.t.Fatalf("retry of a leased row: lost %v, want it", res.Lost)
	}
}

func testExtend(x *qt) {
	p := x.part("p")
	x.rows(p, "k", 2, "a")
	c := x.claim(p, req("t", 2), each)
	res := x.settle(p, metadata.SettleRequest{Task: "t", Op: metadata.Extend, Lease: c.Lease, Indexes: indexes(c.Rows[:1]), Delay: 10 * time.Second})
	if len(res.Lost) != 0 || !res.Until.After(c.Until) {
		x.t.Fatalf("extend: %+v (lease was until %v)", res, c.Until)
	}
	if res := x.settle(p, metadata.SettleRequest{Task: "t", Op: metadata.Extend, Lease: "other", Indexes: indexes(c.Rows), Delay: time.Second}); len(res.Lost) != 2 {
		x.t.Fatalf("extend with another token: lost %v, want both", res.Lost)
	}
	time.Sleep(testLease + 100*time.Millisecond)
	again := x.eventually(p, req("t", 2), each)
	x.wantKeys("claim after the unextended lease ended", again.Rows, c.Rows[1].Key)
	x.ack(p, "t", c, c.Rows[0])
}

func testNackDelay(x *qt) {
	p := x.part("p")
	keys := x.rows(p, "k", 1, "a")
	c := x.claim(p, req("t", 1), each)
	x.settle(p, metadata.SettleRequest{Task: "t", Op: metadata.Nack, Lease: c.Lease, Indexes: indexes(c.Rows), Delay: testLease})
	now := time.Now()
	none := x.claim(p, req("t", 1), each)
	if len(none.Rows) != 0 {
		x.t.Fatalf("a delayed row was claimed at once")
	}
	if none.Mark.Wake.IsZero() || none.Mark.Wake.After(now.Add(testLease+5*time.Second)) {
		x.t.Fatalf("mark of a claim with a row delayed %v wakes at %v (now %v)", testLease, none.Mark.Wake, now)
	}
	if st := x.states(p, "t"); st[c.Rows[0].Index].State != metadata.Ready || st[c.Rows[0].Index].Until.IsZero() {
		x.t.Fatalf("a delayed row is %+v, want ready with an Until", st[c.Rows[0].Index])
	}
	got := x.eventually(p, req("t", 1), each)
	x.wantKeys("claim after the delay", got.Rows, keys...)
}

// pairs picks rows two by two, the last one alone.
func pairs(rows []*metadata.Row, _ []metadata.Delivery) (metadata.Picked, error) {
	var p metadata.Picked
	for i := 0; i < len(rows); i += 2 {
		if i+1 < len(rows) {
			p.Units = append(p.Units, []int{i, i + 1})
		} else {
			p.Units = append(p.Units, []int{i})
		}
	}
	return p, nil
}

func testUnits(x *qt) {
	p := x.part("p")
	keys := x.rows(p, "k", 7, "a")
	// Row 2 is leased by another consumer: the unit {2, 3} is skipped.
	only2 := func(rows []*metadata.Row, _ []metadata.Delivery) (metadata.Picked, error) {
		i := slices.IndexFunc(rows, func(r *metadata.Row) bool { return r.Key == keys[2] })
		return metadata.Picked{Units: [][]int{{i}}}, nil
	}
	x.claim(p, req("t", 1), only2)
	c := x.claim(p, req("t", 5), pairs)
	// The view the pick saw lacked row 2: units {0,1}, {3,4}, {5,6}; five
	// rows fit two of them.
	x.wantKeys("claim of pairs", c.Rows, keys[0], keys[1], keys[3], keys[4])
	if !slices.EqualFunc(c.Units, [][]int{{0, 1}, {2, 3}}, slices.Equal) {
		x.t.Fatalf("units %v, want [[0 1] [2 3]]", c.Units)
	}
}

func testPickDrop(x *qt) {
	p := x.part("p")
	keys := x.rows(p, "k", 4, "a")
	dropOdd := func(rows []*metadata.Row, _ []metadata.Delivery) (metadata.Picked, error) {
		var pk metadata.Picked
		for i, r := range rows {
			if r.Tag["i"].(int64)%2 == 1 {
				pk.Drop = append(pk.Drop, i)
			} else {
				pk.Units = append(pk.Units, []int{i})
			}
		}
		return pk, nil
	}
	c := x.claim(p, req("t", 4), dropOdd)
	x.wantKeys("claim dropping odd rows", c.Rows, keys[0], keys[2])
	if c.Dropped != 2 {
		x.t.Fatalf("dropped %d, want 2", c.Dropped)
	}
	if got := x.claim(p, req("t", 4), each); len(got.Rows) != 0 {
		x.t.Fatalf("dropped rows delivered: %d", len(got.Rows))
	}
	st := x.states(p, "t")
	if st[c.Rows[0].Index].State != metadata.Leased || len(st) != 4 {
		x.t.Fatalf("states %v", st)
	}
	for _, k := range []string{keys[1], keys[3]} {
		idx := x.lookup(p, k)[0].Index
		if st[idx].State != metadata.Dropped {
			x.t.Fatalf("row %s is %v, want dropped", k, st[idx].State)
		}
	}
	// A pick naming a row twice, or outside the rows, fails.
	bad := func(rows []*metadata.Row, _ []metadata.Delivery) (metadata.Picked, error) {
		return metadata.Picked{Units: [][]int{{0}, {0}}}, nil
	}
	x.rows(p, "more", 1, "a")
	if _, err := x.q.Claim(x.ctx, p, req("t", 4), bad); !errors.Is(err, backends.ErrInvalid) {
		x.t.Fatalf("pick naming a row twice: %v, want ErrInvalid", err)
	}
	errPick := errors.New("pick failed")
	if _, err := x.q.Claim(x.ctx, p, req("t", 4), func([]*metadata.Row, []metadata.Delivery) (metadata.Picked, error) {
		return metadata.Picked{}, errPick
	}); !errors.Is(err, errPick) {
		x.t.Fatalf("a failing pick: %v, want its error", err)
	}
	if got := x.claim(p, req("t", 4), each); len(got.Rows) != 1 {
		x.t.Fatalf("the failed picks leased something: the next claim got %d rows", len(got.Rows))
	}
}

func testTasksApart(x *qt) {
	p := x.part("p")
	keys := x.rows(p, "k", 3, "a")
	a := x.claim(p, req("a", 3), each)
	x.ack(p, "a", a)
	b := x.claim(p, req("b", 3), each)
	x.wantKeys("task b after task a acked", b.Rows, keys...)
	all, err := x.q.Consumption(x.ctx, p)
	if err != nil {
		x.t.Fatal(err)
	}
	if len(all) != 2 || len(all["a"]) != 3 || len(all["b"]) != 3 {
		x.t.Fatalf("consumption of every task: %v", all)
	}
	none, err := x.q.Consumption(x.ctx, p, "c")
	if err != nil || none["c"] == nil || len(none["c"]) != 0 {
		x.t.Fatalf("consumption of a task with no state: %v, %v", none, err)
	}
}

func testReset(x *qt) {
	p := x.part("p")
	keys := x.rows(p, "k", 3, "a")
	c := x.claim(p, req("t", 3), each)
	x.ack(p, "t", c)
	if err := x.q.Reset(x.ctx, p, "t", indexes(c.Rows[:1])); err != nil {
		x.t.Fatal(err)
	}
	got := x.claim(p, req("t", 3), each)
	x.wantKeys("claim after a reset of one row", got.Rows, keys[0])
	if got.Deliveries[0].Deliveries != 1 {
		x.t.Fatalf("a reset row counted %d deliveries, want 1", got.Deliveries[0].Deliveries)
	}
	if err := x.q.Reset(x.ctx, p, "t", nil); err != nil {
		x.t.Fatal(err)
	}
	if st := x.states(p, "t"); len(st) != 0 {
		x.t.Fatalf("states after a reset of the task: %v", st)
	}
	if res := x.settle(p, metadata.SettleRequest{Task: "t", Op: metadata.Ack, Lease: got.Lease, Indexes: indexes(got.Rows)}); len(res.Lost) != 1 {
		x.t.Fatalf("ack of a lease a reset ended: lost %v, want it", res.Lost)
	}
	all := x.claim(p, req("t", 3), each)
	x.wantKeys("claim after a reset of the task", all.Rows, keys...)
	if err := x.q.Reset(x.ctx, p, "", nil); !errors.Is(err, backends.ErrInvalid) {
		x.t.Fatalf("reset of an empty task name: %v, want ErrInvalid", err)
	}
}

func testQueueDelete(x *qt) {
	p := x.part("p")
	keys := x.rows(p, "k", 3, "a")
	c := x.claim(p, req("t", 3), each)
	x.delete(p, keys[0])
	st := x.states(p, "t")
	if _, ok := st[c.Rows[0].Index]; ok || len(st) != 2 {
		x.t.Fatalf("states after a delete: %v", st)
	}
	if res := x.settle(p, metadata.SettleRequest{Task: "t", Op: metadata.Ack, Lease: c.Lease, Indexes: indexes(c.Rows)}); !slices.Equal(res.Lost, indexes(c.Rows[:1])) {
		x.t.Fatalf("ack of a deleted row: lost %v, want [%d]", res.Lost, c.Rows[0].Index)
	}
	x.deletePartition(p)
	if all, err := x.q.Consumption(x.ctx, p); err != nil || len(all) != 0 {
		x.t.Fatalf("consumption after DeletePartition: %v, %v", all, err)
	}
	keys = x.rows(p, "new", 2, "a")
	got := x.claim(p, req("t", 3), each)
	x.wantKeys("claim of new rows after DeletePartition", got.Rows, keys...)
}

func testQueueInvalid(x *qt) {
	p := x.part("p")
	x.rows(p, "k", 2, "a")
	called := false
	spy := func(rows []*metadata.Row, d []metadata.Delivery) (metadata.Picked, error) {
		called = true
		return each(rows, d)
	}
	bad := []metadata.ClaimRequest{
		{Task: "", Lease: time.Second, Rows: 1, Min: 1},
		{Task: "t", Lease: 0, Rows: 1, Min: 1},
		{Task: "t", Lease: -time.Second, Rows: 1, Min: 1},
		{Task: "t", Lease: time.Second, Rows: 0, Min: 1},
		{Task: "t", Lease: time.Second, Rows: 2, Min: 3},
		{Task: "t", Lease: time.Second, Rows: 2, Min: 0},
		{Task: "t", Lease: time.Second, Rows: 2, Min: 1, MaxDeliveries: -1},
		{Task: "t", Lease: time.Second, Rows: 2, Min: 1, Batch: &metadata.Batch{Ranks: 2, Rank: 2}},
	}
	for _, r := range bad {
		if _, err := x.q.Claim(x.ctx, p, r, spy); !errors.Is(err, backends.ErrInvalid) {
			x.t.Fatalf("Claim(%+v): %v, want ErrInvalid", r, err)
		}
	}
	if called {
		x.t.Fatal("an invalid claim called pick")
	}
	c := x.claim(p, req("t", 2), each)
	badSettle := []metadata.SettleRequest{
		{Task: "", Op: metadata.Ack, Lease: c.Lease, Indexes: indexes(c.Rows)},
		{Task: "t", Op: 0, Lease: c.Lease, Indexes: indexes(c.Rows)},
		{Task: "t", Op: metadata.Ack, Indexes: indexes(c.Rows)},
		{Task: "t", Op: metadata.Retry, Lease: c.Lease, Indexes: indexes(c.Rows)},
		{Task: "t", Op: metadata.Extend, Lease: c.Lease, Indexes: indexes(c.Rows)},
		{Task: "t", Op: metadata.Nack, Lease: c.Lease, Indexes: indexes(c.Rows), Delay: -time.Second},
	}
	for _, r := range badSettle {
		if _, err := x.q.Settle(x.ctx, p, r); !errors.Is(err, backends.ErrInvalid) {
			x.t.Fatalf("Settle(%+v): %v, want ErrInvalid", r, err)
		}
	}
	for _, d := range x.states(p, "t") {
		if d.State != metadata.Leased || d.Lease != c.Lease || d.Deliveries != 1 {
			x.t.Fatalf("an invalid call changed a row: %+v", d)
		}
	}
}

func testClaimConcurrent(x *qt) {
	p := x.part("p")
	const rows, workers = 120, 6
	x.rows(p, "k", rows, "a")
	var mu sync.Mutex
	got := map[uint64]int{}
	runWorkers(x.t, workers, func(w int) error {
		for {
			c, err := x.q.Claim(x.ctx, p, metadata.ClaimRequest{Task: "t", Lease: time.Minute, Rows: 7, Min: 1, Custom: true}, each)
			if err != nil {
				return err
			}
			if len(c.Rows) == 0 {
				return nil
			}
			mu.Lock()
			for _, r := range c.Rows {
				got[r.Index]++
			}
			mu.Unlock()
		}
	})
	if len(got) != rows {
		x.t.Fatalf("%d workers leased %d distinct rows of %d", workers, len(got), rows)
	}
	for i, n := range got {
		if n != 1 {
			x.t.Fatalf("row %d leased %d times", i, n)
		}
	}
}

func testWait(x *qt) {
	p := x.part("p")
	x.rows(p, "k", 1, "a")
	c := x.claim(p, req("t", 1), each)
	x.ack(p, "t", c)
	empty := x.claim(p, req("t", 1), each)
	// Nothing changes: Wait honours its context.
	ctx, cancel := context.WithTimeout(x.ctx, 300*time.Millisecond)
	err := x.q.Wait(ctx, p, empty.Mark)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		// A store may return nil spuriously, but not at once every time.
		if err != nil {
			x.t.Fatalf("Wait with nothing changing: %v", err)
		}
	}
	// A commit wakes it.
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(x.ctx, 20*time.Second)
		defer cancel()
		for {
			got := x.claimQuiet(p, req("t", 1))
			if got.err != nil || len(got.c.Rows) > 0 {
				done <- got.err
				return
			}
			if err := x.q.Wait(ctx, p, got.c.Mark); err != nil {
				done <- err
				return
			}
		}
	}()
	time.Sleep(100 * time.Millisecond)
	x.rows(p, "late", 1, "a")
	select {
	case err := <-done:
		if err != nil {
			x.t.Fatalf("waiter: %v", err)
		}
	case <-time.After(30 * time.Second):
		x.t.Fatal("a waiter did not wake on a commit")
	}
	// A mark whose Wake passed returns at once.
	if err := x.q.Wait(x.ctx, p, metadata.Mark{Seq: empty.Mark.Seq, Wake: time.Now().Add(-time.Second)}); err != nil {
		x.t.Fatalf("Wait past its wake: %v", err)
	}
}

type claimed struct {
	c   metadata.Claimed
	err error
}

func (x *qt) claimQuiet(p string, r metadata.ClaimRequest) claimed {
	c, err := x.q.Claim(x.ctx, p, r, each)
	return claimed{c, err}
}

func testBatch(x *qt) {
	p := x.part("p")
	keys := x.rows(p, "k", 8, "a")
	rank := func(r int) metadata.ClaimRequest {
		q := req("t", 4)
		q.Batch = &metadata.Batch{Ranks: 2, Rank: r}
		return q
	}
	a0 := x.claim(p, rank(0), each)
	x.wantKeys("rank 0's first batch", a0.Rows, keys[:4]...)
	b0 := x.claim(p, rank(0), each)
	x.wantKeys("rank 0's second batch", b0.Rows, keys[4:]...)
	// Rank 0 acks its half of the first batch before rank 1 takes its
	// share: rank 1 still sees the whole batch, the acked rows not held.
	x.ack(p, "t", a0, a0.Rows[:2]...)
	a1 := x.claim(p, rank(1), each)
	if a1.Lease != a0.Lease {
		x.t.Fatalf("rank 1's first claim has lease %q, want the first batch's %q", a1.Lease, a0.Lease)
	}
	x.wantKeys("rank 1's first batch", a1.Rows, keys[:4]...)
	if !slices.EqualFunc(a1.Units, a0.Units, slices.Equal) {
		x.t.Fatalf("rank 1's units %v, rank 0's %v", a1.Units, a0.Units)
	}
	for i, d := range a1.Deliveries {
		want := metadata.Leased
		if i < 2 {
			want = metadata.Acked
		}
		if d.State != want || d.Lease != a0.Lease {
			x.t.Fatalf("rank 1's share: row %d is %v of %q, want %v of the batch's lease", i, d.State, d.Lease, want)
		}
	}
	x.ack(p, "t", a1, a1.Rows[2:]...)
	b1 := x.claim(p, rank(1), each)
	x.wantKeys("rank 1's second batch", b1.Rows, keys[4:]...)
	if c := x.claim(p, rank(1), each); len(c.Rows) != 0 {
		x.t.Fatalf("rank 1 got a third batch of %d rows with nothing ready", len(c.Rows))
	}
	for _, d := range x.states(p, "t") {
		if d.Deliveries != 1 {
			x.t.Fatalf("row %d delivered %d times to the ranks of one task", d.Index, d.Deliveries)
		}
	}
	// A batch whose rows were all returned before its lease ended is
	// still the other rank's turn (holding none of them), and the rows
	// go to the next batch.
	x.rows(p, "m", 2, "a")
	c0 := x.claim(p, rank(0), each)
	if len(c0.Rows) != 2 {
		x.t.Fatalf("rank 0's third batch has %d rows, want 2", len(c0.Rows))
	}
	x.settle(p, metadata.SettleRequest{Task: "t", Op: metadata.Nack, Lease: c0.Lease, Indexes: indexes(c0.Rows)})
	c1 := x.claim(p, rank(1), each)
	if c1.Lease != c0.Lease {
		x.t.Fatalf("rank 1 did not take its turn of a batch whose rows were returned: %q, want %q", c1.Lease, c0.Lease)
	}
	for _, d := range c1.Deliveries {
		if d.State == metadata.Leased && d.Lease == c0.Lease {
			x.t.Fatalf("rank 1's turn of a returned batch holds row %d", d.Index)
		}
	}
	if c := x.claim(p, rank(0), each); len(c.Rows) != 2 || c.Lease == c0.Lease {
		x.t.Fatalf("rank 0's next batch: %d rows of %q, want the 2 returned rows anew", len(c.Rows), c.Lease)
	}
}

// testBatchOrder: ranks claiming at once still take the batches in one
// order: the k-th claims of the ranks share a lease.
func testBatchOrder(x *qt) {
	p := x.part("p")
	const batches, size = 12, 3
	x.rows(p, "k", batches*size, "a")
	var leases [2][]string
	runWorkers(x.t, 2, func(r int) error {
		for range batches {
			q := metadata.ClaimRequest{Task: "t", Lease: time.Minute, Rows: size, Min: size, Batch: &metadata.Batch{Ranks: 2, Rank: r}, Custom: true}
			c, err := x.q.Claim(x.ctx, p, q, each)
			if err != nil {
				return err
			}
			if len(c.Rows) != size {
				return fmt.Errorf("rank %d: a batch of %d rows, want %d", r, len(c.Rows), size)
			}
			leases[r] = append(leases[r], c.Lease)
		}
		return nil
	})
	if !slices.Equal(leases[0], leases[1]) {
		x.t.Fatalf("the ranks took batches in different orders:\n%q\n%q", leases[0], leases[1])
	}
	seen := map[string]bool{}
	for _, l := range leases[0] {
		if seen[l] {
			x.t.Fatalf("batch %q taken twice by one rank", l)
		}
		seen[l] = true
	}
}

// testView: View is List and Consumption at one moment, and a lease's
// deliveries name its claim's holder.
func testView(x *qt) {
	p := x.part("view")
	x.rows(p, "r", 3, "a")
	r := req("t", 2)
	r.Holder = "worker a:7"
	c := x.claim(p, r, each)
	if len(c.Rows) != 2 {
		x.t.Fatalf("claim: %d rows, want 2", len(c.Rows))
	}
	v, err := x.q.View(x.ctx, p, "t")
	if err != nil {
		x.t.Fatalf("View: %v", err)
	}
	list, err := x.m.List(x.ctx, p)
	if err != nil {
		x.t.Fatal(err)
	}
	if len(v.Rows) != len(list) {
		x.t.Fatalf("View: %d rows, List %d", len(v.Rows), len(list))
	}
	for i := range list {
		if v.Rows[i].Key != list[i].Key || v.Rows[i].Index != list[i].Index {
			x.t.Fatalf("View row %d: %+v, List's %+v", i, v.Rows[i], list[i])
		}
	}
	ds := v.Tasks["t"]
	if len(ds) != 2 {
		x.t.Fatalf("View: deliveries %+v, want the 2 leased rows", ds)
	}
	for _, d := range ds {
		if d.State != metadata.Leased || d.Holder != "worker a:7" || d.Lease != c.Lease || d.Until.IsZero() {
			x.t.Errorf("View: delivery %+v, want leased to %q by %q", d, c.Lease, "worker a:7")
		}
		if metadata.HolderOf(d.Lease) != d.Holder {
			x.t.Errorf("HolderOf(%q) = %q, want %q", d.Lease, metadata.HolderOf(d.Lease), d.Holder)
		}
	}
	if all := x.states(p, "t"); len(all) != 2 || all[ds[0].Index].Holder != "worker a:7" {
		x.t.Errorf("Consumption: %+v, want View's deliveries", all)
	}
	empty, err := x.q.View(x.ctx, x.part("never"), "t")
	if err != nil || empty.Rows == nil || len(empty.Rows) != 0 || empty.Tasks["t"] == nil || len(empty.Tasks["t"]) != 0 {
		x.t.Errorf("View of an unknown partition: %+v, %v; want no rows and the task with no state", empty, err)
	}
	if _, err := x.q.View(x.ctx, p, ""); !errors.Is(err, backends.ErrInvalid) {
		x.t.Errorf("View of task \"\": %v, want ErrInvalid", err)
	}
	r.Holder = strings.Repeat("h", metadata.MaxHolder+1)
	if _, err := x.q.Claim(x.ctx, p, r, each); !errors.Is(err, backends.ErrInvalid) {
		x.t.Errorf("Claim with a %d-byte holder: %v, want ErrInvalid", len(r.Holder), err)
	}
}
