package redis_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

// commitRows prepares and commits keys in partition p and returns their
// indexes, in keys' order.
func commitRows(t testing.TB, m metadata.MetaStore, p string, keys ...string) []uint64 {
	t.Helper()
	ctx := context.Background()
	res, err := m.Prepare(ctx, p, keys, []string{"x"})
	if err != nil {
		t.Fatal(err)
	}
	ups := make([]metadata.RowUpdate, len(keys))
	idx := make([]uint64, len(keys))
	for i, k := range keys {
		ups[i] = metadata.RowUpdate{Key: k, Index: res[i].Index, Fields: map[string]metadata.FieldInfo{"x": {Gen: res[i].Gens["x"]}}}
		idx[i] = res[i].Index
	}
	if _, err := m.Commit(ctx, p, ups); err != nil {
		t.Fatal(err)
	}
	return idx
}

// firstN picks the first n rows, one unit each.
func firstN(n int) metadata.Pick {
	return func(rows []*metadata.Row, _ []metadata.Delivery) (metadata.Picked, error) {
		var p metadata.Picked
		for i := range min(n, len(rows)) {
			p.Units = append(p.Units, []int{i})
		}
		return p, nil
	}
}

// all picks every row, one unit each.
func all(rows []*metadata.Row, d []metadata.Delivery) (metadata.Picked, error) {
	return firstN(len(rows))(rows, d)
}

func claimIdx(c metadata.Claimed) []uint64 {
	out := make([]uint64, len(c.Rows))
	for i, r := range c.Rows {
		out[i] = r.Index
		if c.Deliveries[i].Index != r.Index {
			panic(fmt.Sprintf("delivery %d names %d, row %d", i, c.Deliveries[i].Index, r.Index))
		}
	}
	return out
}

func states(t *testing.T, m metadata.MetaStore, p, task string) map[uint64]metadata.Delivery {
	t.Helper()
	c, err := m.Consumption(context.Background(), p, task)
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint64]metadata.Delivery{}
	for _, d := range c[task] {
		out[d.Index] = d
	}
	return out
}

// queueTargets runs f against a standalone server and a Cluster.
func queueTargets(t *testing.T, f func(t *testing.T, newMeta func(t *testing.T) metadata.MetaStore)) {
	t.Run("Standalone", func(t *testing.T) {
		srv := redistest.Start(t)
		f(t, func(t *testing.T) metadata.MetaStore { return metaOf(open(t, srv.URL()+"?prefix="+testPrefix(t))) })
	})
	t.Run("Cluster", func(t *testing.T) {
		c := redistest.StartCluster(t)
		f(t, func(t *testing.T) metadata.MetaStore { return metaOf(open(t, c.URL()+"?prefix="+testPrefix(t))) })
	})
}

// testPrefix is a key prefix of t's own: the Metas of one test share it.
func testPrefix(t *testing.T) string {
	h := fnv.New64a()
	h.Write([]byte(t.Name()))
	return fmt.Sprintf("q%x", h.Sum64())
}

func TestQueueContract(t *testing.T) {
	queueTargets(t, func(t *testing.T, newMeta func(t *testing.T) metadata.MetaStore) {
		t.Run("ClaimAckOrder", func(t *testing.T) { testClaimAck(t, newMeta(t), newMeta(t)) })
		t.Run("MinUnitsDrop", func(t *testing.T) { testMinUnitsDrop(t, newMeta(t)) })
		t.Run("NackDelayDead", func(t *testing.T) { testNackDead(t, newMeta(t)) })
		t.Run("Expiry", func(t *testing.T) { testExpiry(t, newMeta(t), newMeta(t)) })
		t.Run("Deletes", func(t *testing.T) { testQueueDeletes(t, newMeta(t), newMeta(t)) })
		t.Run("Reset", func(t *testing.T) { testReset(t, newMeta(t), newMeta(t)) })
		t.Run("Invalid", func(t *testing.T) { testQueueInvalid(t, newMeta(t)) })
		t.Run("Batch", func(t *testing.T) { testBatch(t, newMeta(t), newMeta(t)) })
		t.Run("Wait", func(t *testing.T) { testWait(t, newMeta(t), newMeta(t)) })
		t.Run("Consumers", func(t *testing.T) { testConsumers(t, newMeta) })
		t.Run("LateLowIndex", func(t *testing.T) { testLateLowIndex(t, newMeta(t), newMeta(t)) })
	})
}

func testClaimAck(t *testing.T, m, other metadata.MetaStore) {
	ctx := t.Context()
	idx := commitRows(t, m, "p", "a", "b", "c", "d")
	req := metadata.ClaimRequest{Task: "train", Lease: time.Minute, Rows: 2, Min: 1}
	c1, err := m.Claim(ctx, "p", req, all)
	if err != nil {
		t.Fatal(err)
	}
	if got := claimIdx(c1); !slices.Equal(got, idx[:2]) {
		t.Fatalf("first claim leased %v, want %v", got, idx[:2])
	}
	if c1.Lease == "" || len(c1.Lease) != 16 || c1.Deliveries[0].Deliveries != 1 || c1.Deliveries[0].State != metadata.Leased || c1.Until.Before(time.Now().Add(50*time.Second)) {
		t.Fatalf("claim %+v", c1)
	}
	if len(c1.Units) != 2 || c1.Units[0][0] != 0 || c1.Units[1][0] != 1 {
		t.Fatalf("units %v", c1.Units)
	}
	// Another process's Meta, its cache empty, sees the rest only.
	var seen []uint64
	c2, err := other.Claim(ctx, "p", req, func(rows []*metadata.Row, d []metadata.Delivery) (metadata.Picked, error) {
		seen = nil
		for _, r := range rows {
			seen = append(seen, r.Index)
		}
		return all(rows, d)
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := claimIdx(c2); !slices.Equal(got, idx[2:]) || !slices.Equal(seen, idx[2:]) {
		t.Fatalf("second claim leased %v (pick saw %v), want %v", got, seen, idx[2:])
	}
	// A third finds nothing; a task of its own finds everything.
	c3, err := m.Claim(ctx, "p", req, all)
	if err != nil || c3.Lease != "" || len(c3.Rows) != 0 {
		t.Fatalf("third claim %+v %v", c3, err)
	}
	c4, err := m.Claim(ctx, "p", metadata.ClaimRequest{Task: "eval", Lease: time.Minute, Rows: 10, Min: 1}, all)
	if err != nil || len(c4.Rows) != 4 {
		t.Fatalf("other task %+v %v", c4, err)
	}
	// Ack: applied once; a second ack by the same token is not lost (a
	// resend), by another token it is.
	res, err := m.Settle(ctx, "p", metadata.SettleRequest{Task: "train", Op: metadata.Ack, Lease: c1.Lease, Indexes: idx[:2]})
	if err != nil || len(res.Lost) != 0 {
		t.Fatalf("ack %+v %v", res, err)
	}
	res, err = other.Settle(ctx, "p", metadata.SettleRequest{Task: "train", Op: metadata.Ack, Lease: c1.Lease, Indexes: idx[:2]})
	if err != nil || len(res.Lost) != 0 {
		t.Fatalf("ack again %+v %v", res, err)
	}
	res, err = m.Settle(ctx, "p", metadata.SettleRequest{Task: "train", Op: metadata.Ack, Lease: c2.Lease, Indexes: []uint64{idx[0], idx[2], 999999}})
	if err != nil || !slices.Equal(res.Lost, []uint64{idx[0], 999999}) {
		t.Fatalf("ack by the other token %+v %v", res, err)
	}
	st := states(t, m, "p", "train")
	if st[idx[0]].State != metadata.Acked || st[idx[2]].State != metadata.Acked || st[idx[3]].State != metadata.Leased || st[idx[3]].Lease != c2.Lease {
		t.Fatalf("states %+v", st)
	}
	// Extend renews; Nack makes the row ready for the next claim, which
	// counts a second delivery.
	res, err = m.Settle(ctx, "p", metadata.SettleRequest{Task: "train", Op: metadata.Extend, Lease: c2.Lease, Indexes: idx[3:], Delay: 2 * time.Minute})
	if err != nil || len(res.Lost) != 0 || res.Until.Before(time.Now().Add(100*time.Second)) {
		t.Fatalf("extend %+v %v", res, err)
	}
	if _, err := other.Settle(ctx, "p", metadata.SettleRequest{Task: "train", Op: metadata.Nack, Lease: c2.Lease, Indexes: idx[3:]}); err != nil {
		t.Fatal(err)
	}
	var dels []metadata.Delivery
	c5, err := m.Claim(ctx, "p", req, func(rows []*metadata.Row, d []metadata.Delivery) (metadata.Picked, error) {
		dels = d
		return all(rows, d)
	})
	if err != nil || !slices.Equal(claimIdx(c5), idx[3:]) || c5.Deliveries[0].Deliveries != 2 {
		t.Fatalf("claim after nack %+v %v", c5, err)
	}
	if len(dels) != 1 || dels[0].Deliveries != 1 || dels[0].State != metadata.Ready {
		t.Fatalf("pick saw %+v, want row %d ready after one delivery", dels, idx[3])
	}
	all, err := m.Consumption(ctx, "p")
	if err != nil || len(all) != 2 || len(all["train"]) != 4 || len(all["eval"]) != 4 {
		t.Fatalf("consumption of every task %v %v", all, err)
	}
	none, err := m.Consumption(ctx, "p", "nobody")
	if err != nil || none["nobody"] == nil || len(none["nobody"]) != 0 {
		t.Fatalf("consumption of a task with no state %#v %v", none, err)
	}
}

func testMinUnitsDrop(t *testing.T, m metadata.MetaStore) {
	ctx := t.Context()
	idx := commitRows(t, m, "p", "a", "b", "c", "d", "e")
	// Units of two: a, b together; c, d together; e alone. Rows: 3 fits
	// only the first pair and e.
	pairs := func(rows []*metadata.Row, _ []metadata.Delivery) (metadata.Picked, error) {
		return metadata.Picked{Units: [][]int{{0, 1}, {2, 3}, {4}}}, nil
	}
	c, err := m.Claim(ctx, "p", metadata.ClaimRequest{Task: "t", Lease: time.Minute, Rows: 3, Min: 3}, pairs)
	if err != nil || !slices.Equal(claimIdx(c), []uint64{idx[0], idx[1], idx[4]}) || len(c.Units) != 2 || len(c.Units[0]) != 2 {
		t.Fatalf("claim %+v %v", c, err)
	}
	// c, d remain: Min 3 leases none, but the drop applies.
	c, err = m.Claim(ctx, "p", metadata.ClaimRequest{Task: "t", Lease: time.Minute, Rows: 3, Min: 3}, func(rows []*metadata.Row, _ []metadata.Delivery) (metadata.Picked, error) {
		if len(rows) != 2 {
			return metadata.Picked{}, fmt.Errorf("pick got %d rows, want 2", len(rows))
		}
		return metadata.Picked{Units: [][]int{{1}}, Drop: []int{0}}, nil
	})
	if err != nil || len(c.Rows) != 0 || c.Lease != "" || c.Dropped != 1 {
		t.Fatalf("claim under min %+v %v", c, err)
	}
	st := states(t, m, "p", "t")
	if st[idx[2]].State != metadata.Dropped || st[idx[2]].Deliveries != 0 {
		t.Fatalf("dropped row %+v", st[idx[2]])
	}
	if _, ok := st[idx[3]]; ok {
		t.Fatalf("row %d has state %+v, want none", idx[3], st[idx[3]])
	}
	// A unit naming a row another holds is skipped whole.
	boom := errors.New("boom")
	if _, err := m.Claim(ctx, "p", metadata.ClaimRequest{Task: "t", Lease: time.Minute, Rows: 1, Min: 1}, func([]*metadata.Row, []metadata.Delivery) (metadata.Picked, error) {
		return metadata.Picked{}, boom
	}); err != boom {
		t.Fatalf("pick's error came back as %v", err)
	}
	if _, err := m.Claim(ctx, "p", metadata.ClaimRequest{Task: "t", Lease: time.Minute, Rows: 1, Min: 1}, func(rows []*metadata.Row, _ []metadata.Delivery) (metadata.Picked, error) {
		return metadata.Picked{Units: [][]int{{0}, {0}}}, nil
	}); !errors.Is(err, backends.ErrInvalid) {
		t.Fatalf("a position twice: %v", err)
	}
	// Drop of a ready row by Settle, and of one never delivered.
	res, err := m.Settle(ctx, "p", metadata.SettleRequest{Task: "t", Op: metadata.Drop, Indexes: []uint64{idx[3], idx[0], 12345678}})
	if err != nil || !slices.Equal(res.Lost, []uint64{idx[0], 12345678}) {
		t.Fatalf("drop %+v %v", res, err)
	}
}

func testNackDead(t *testing.T, m metadata.MetaStore) {
	ctx := t.Context()
	idx := commitRows(t, m, "p", "a")
	req := metadata.ClaimRequest{Task: "t", Lease: time.Minute, Rows: 1, Min: 1, MaxDeliveries: 2}
	c, err := m.Claim(ctx, "p", req, all)
	if err != nil || len(c.Rows) != 1 {
		t.Fatal(c, err)
	}
	// A Nack with a delay keeps it from claims until the delay ends.
	if _, err := m.Settle(ctx, "p", metadata.SettleRequest{Task: "t", Op: metadata.Nack, Lease: c.Lease, Indexes: idx, Delay: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	c, err = m.Claim(ctx, "p", req, all)
	if err != nil || len(c.Rows) != 0 || c.Mark.Wake.IsZero() {
		t.Fatalf("claim in the delay %+v %v", c, err)
	}
	if err := m.Wait(ctx, "p", c.Mark); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err = m.Claim(ctx, "p", req, all); err != nil {
			t.Fatal(err)
		}
		if len(c.Rows) == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(c.Rows) != 1 || c.Deliveries[0].Deliveries != 2 {
		t.Fatalf("claim after the delay %+v", c)
	}
	// The second delivery was the last: a Nack makes it dead.
	if _, err := m.Settle(ctx, "p", metadata.SettleRequest{Task: "t", Op: metadata.Nack, Lease: c.Lease, Indexes: idx}); err != nil {
		t.Fatal(err)
	}
	if st := states(t, m, "p", "t"); st[idx[0]].State != metadata.Dead || st[idx[0]].Deliveries != 2 || st[idx[0]].Max != 2 {
		t.Fatalf("after the last nack %+v", st)
	}
	if c, _ := m.Claim(ctx, "p", req, all); len(c.Rows) != 0 {
		t.Fatalf("claimed a dead row %+v", c)
	}
	// Retry makes it ready with no deliveries.
	res, err := m.Settle(ctx, "p", metadata.SettleRequest{Task: "t", Op: metadata.Retry, Indexes: idx})
	if err != nil || len(res.Lost) != 0 {
		t.Fatal(res, err)
	}
	if c, err = m.Claim(ctx, "p", req, all); err != nil || len(c.Rows) != 1 || c.Deliveries[0].Deliveries != 1 {
		t.Fatalf("claim after retry %+v %v", c, err)
	}
}

func testExpiry(t *testing.T, m, other metadata.MetaStore) {
	ctx := t.Context()
	idx := commitRows(t, m, "p", "a", "b")
	lease := 300 * time.Millisecond
	req := metadata.ClaimRequest{Task: "t", Lease: lease, Rows: 2, Min: 1, MaxDeliveries: 2}
	c, err := m.Claim(ctx, "p", req, all)
	if err != nil || len(c.Rows) != 2 {
		t.Fatal(c, err)
	}
	if got, err := other.Claim(ctx, "p", req, all); err != nil || len(got.Rows) != 0 || got.Mark.Wake.IsZero() {
		t.Fatalf("claim of leased rows %+v %v", got, err)
	}
	// The lease ends by the server's clock (after Wake on this one): a
	// claim then finds both ready, their second delivery.
	var c2 metadata.Claimed
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if c2, err = other.Claim(ctx, "p", req, all); err != nil {
			t.Fatal(err)
		}
		if len(c2.Rows) > 0 {
			break
		}
	}
	if !slices.Equal(claimIdx(c2), idx) || c2.Deliveries[0].Deliveries != 2 {
		t.Fatalf("claim after expiry %+v", c2)
	}
	// The old holder's ack is lost: the rows were delivered again.
	res, err := m.Settle(ctx, "p", metadata.SettleRequest{Task: "t", Op: metadata.Ack, Lease: c.Lease, Indexes: idx})
	if err != nil || len(res.Lost) != 2 {
		t.Fatalf("stale ack %+v %v", res, err)
	}
	// The second lease ends too: with MaxDeliveries 2 the rows are dead,
	// as Consumption reports them without a claim.
	time.Sleep(lease + 100*time.Millisecond)
	for _, d := range states(t, m, "p", "t") {
		if d.State != metadata.Dead || d.Deliveries != 2 || d.Lease != "" {
			t.Fatalf("after the last lease ended %+v", d)
		}
	}
}

func testQueueDeletes(t *testing.T, m, other metadata.MetaStore) {
	ctx := t.Context()
	idx := commitRows(t, m, "p", "a", "b", "c")
	c, err := m.Claim(ctx, "p", metadata.ClaimRequest{Task: "t", Lease: time.Minute, Rows: 3, Min: 1}, all)
	if err != nil || len(c.Rows) != 3 {
		t.Fatal(c, err)
	}
	if _, err := m.Claim(ctx, "p", metadata.ClaimRequest{Task: "u", Lease: time.Minute, Rows: 3, Min: 1}, all); err != nil {
		t.Fatal(err)
	}
	// Another process deletes b: its state leaves every task, its lease
	// is lost.
	if _, err := other.Delete(ctx, "p", []string{"b"}); err != nil {
		t.Fatal(err)
	}
	for _, task := range []string{"t", "u"} {
		st := states(t, m, "p", task)
		if _, ok := st[idx[1]]; ok || len(st) != 2 {
			t.Fatalf("task %s after delete %+v", task, st)
		}
	}
	res, err := m.Settle(ctx, "p", metadata.SettleRequest{Task: "t", Op: metadata.Ack, Lease: c.Lease, Indexes: idx})
	if err != nil || !slices.Equal(res.Lost, idx[1:2]) {
		t.Fatalf("ack after delete %+v %v", res, err)
	}
	// The view of m lacked the delete: a claim replays it and never
	// offers b. A new row is offered.
	d := commitRows(t, other, "p", "d")
	var seen []uint64
	c, err = m.Claim(ctx, "p", metadata.ClaimRequest{Task: "v", Lease: time.Minute, Rows: 9, Min: 1}, func(rows []*metadata.Row, dl []metadata.Delivery) (metadata.Picked, error) {
		seen = seen[:0]
		for _, r := range rows {
			seen = append(seen, r.Index)
		}
		return all(rows, dl)
	})
	if want := []uint64{idx[0], idx[2], d[0]}; err != nil || !slices.Equal(claimIdx(c), want) || !slices.Equal(seen, want) {
		t.Fatalf("claim after delete %v (saw %v) %v", claimIdx(c), seen, err)
	}
	// DeletePartition removes every task's consumption.
	if _, err := other.DeletePartition(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if all, err := m.Consumption(ctx, "p"); err != nil || len(all) != 0 {
		t.Fatalf("consumption after delete partition %v %v", all, err)
	}
	e := commitRows(t, other, "p", "e")
	if c, err := m.Claim(ctx, "p", metadata.ClaimRequest{Task: "t", Lease: time.Minute, Rows: 9, Min: 1}, all); err != nil || !slices.Equal(claimIdx(c), e) {
		t.Fatalf("claim in the new partition %+v %v", c, err)
	}
}

func testReset(t *testing.T, m, other metadata.MetaStore) {
	ctx := t.Context()
	idx := commitRows(t, m, "p", "a", "b", "c")
	req := metadata.ClaimRequest{Task: "t", Lease: time.Minute, Rows: 3, Min: 1}
	c, err := m.Claim(ctx, "p", req, all)
	if err != nil || len(c.Rows) != 3 {
		t.Fatal(c, err)
	}
	if _, err := m.Settle(ctx, "p", metadata.SettleRequest{Task: "t", Op: metadata.Ack, Lease: c.Lease, Indexes: idx}); err != nil {
		t.Fatal(err)
	}
	// Another process resets a: m's cache (all acked) is no longer
	// current, and its next claim finds a again.
	if err := other.Reset(ctx, "p", "t", idx[:1]); err != nil {
		t.Fatal(err)
	}
	if c, err = m.Claim(ctx, "p", req, all); err != nil || !slices.Equal(claimIdx(c), idx[:1]) || c.Deliveries[0].Deliveries != 1 {
		t.Fatalf("claim after reset %+v %v", c, err)
	}
	if err := m.Reset(ctx, "p", "t", nil); err != nil {
		t.Fatal(err)
	}
	if st := states(t, m, "p", "t"); len(st) != 0 {
		t.Fatalf("after a reset of everything %+v", st)
	}
	res, err := m.Settle(ctx, "p", metadata.SettleRequest{Task: "t", Op: metadata.Ack, Lease: c.Lease, Indexes: idx[:1]})
	if err != nil || len(res.Lost) != 1 {
		t.Fatalf("ack of a reset lease %+v %v", res, err)
	}
	if c, err = other.Claim(ctx, "p", req, all); err != nil || !slices.Equal(claimIdx(c), idx) {
		t.Fatalf("claim after reset %+v %v", c, err)
	}
}

func testQueueInvalid(t *testing.T, m metadata.MetaStore) {
	ctx := t.Context()
	for _, req := range []metadata.ClaimRequest{
		{Task: "", Lease: time.Second, Rows: 1, Min: 1},
		{Task: "t", Lease: 0, Rows: 1, Min: 1},
		{Task: "t", Lease: time.Second, Rows: 1, Min: 2},
		{Task: "t", Lease: time.Second, Rows: 1, Min: 1, Batch: &metadata.Batch{Ranks: 2, Rank: 2}},
	} {
		if _, err := m.Claim(ctx, "p", req, all); !errors.Is(err, backends.ErrInvalid) {
			t.Errorf("claim %+v: %v", req, err)
		}
	}
	if _, err := m.Settle(ctx, "p", metadata.SettleRequest{Task: "t", Op: metadata.Ack, Indexes: []uint64{1}}); !errors.Is(err, backends.ErrInvalid) {
		t.Errorf("ack without a token: %v", err)
	}
	if err := m.Reset(ctx, "p", "", nil); !errors.Is(err, backends.ErrInvalid) {
		t.Errorf("reset of no task: %v", err)
	}
	m.Close()
	if _, err := m.Claim(ctx, "p", metadata.ClaimRequest{Task: "t", Lease: time.Second, Rows: 1, Min: 1}, all); !errors.Is(err, backends.ErrClosed) {
		t.Errorf("claim on a closed Meta: %v", err)
	}
	if err := m.Wait(ctx, "p", metadata.Mark{}); !errors.Is(err, backends.ErrClosed) {
		t.Errorf("wait on a closed Meta: %v", err)
	}
}

func testBatch(t *testing.T, m, other metadata.MetaStore) {
	ctx := t.Context()
	idx := commitRows(t, m, "p", "a", "b", "c", "d", "e", "f")
	req := func(rank int) metadata.ClaimRequest {
		return metadata.ClaimRequest{Task: "dp", Lease: time.Minute, Rows: 2, Min: 2, Batch: &metadata.Batch{Ranks: 2, Rank: rank}}
	}
	// Rank 0 opens batch 1 (a, b), rank 0 again opens batch 2 (c, d);
	// rank 1, in another process, gets batch 1, then batch 2, then a new
	// one.
	b1, err := m.Claim(ctx, "p", req(0), all)
	if err != nil || !slices.Equal(claimIdx(b1), idx[:2]) {
		t.Fatal(b1, err)
	}
	b2, err := m.Claim(ctx, "p", req(0), all)
	if err != nil || !slices.Equal(claimIdx(b2), idx[2:4]) {
		t.Fatal(b2, err)
	}
	// Rank 0 acks a of batch 1: rank 1's share is still the whole batch,
	// a acked, b leased to the batch's token.
	if _, err := m.Settle(ctx, "p", metadata.SettleRequest{Task: "dp", Op: metadata.Ack, Lease: b1.Lease, Indexes: idx[:1]}); err != nil {
		t.Fatal(err)
	}
	r1, err := other.Claim(ctx, "p", req(1), all)
	if err != nil || r1.Lease != b1.Lease || !slices.Equal(claimIdx(r1), idx[:2]) || len(r1.Units) != 2 {
		t.Fatalf("rank 1's first claim %+v %v, want batch 1", r1, err)
	}
	if d := r1.Deliveries; d[0].State != metadata.Acked || d[0].Lease != b1.Lease || d[1].State != metadata.Leased || d[1].Lease != b1.Lease {
		t.Fatalf("rank 1's share %+v, want a acked and b leased by %s", d, b1.Lease)
	}
	r2, err := other.Claim(ctx, "p", req(1), all)
	if err != nil || r2.Lease != b2.Lease || !slices.Equal(claimIdx(r2), idx[2:4]) {
		t.Fatalf("rank 1's second claim %+v %v", r2, err)
	}
	r3, err := other.Claim(ctx, "p", req(1), all)
	if err != nil || r3.Lease == b2.Lease || !slices.Equal(claimIdx(r3), idx[4:]) {
		t.Fatalf("rank 1's third claim %+v %v", r3, err)
	}
	b3, err := m.Claim(ctx, "p", req(0), all)
	if err != nil || b3.Lease != r3.Lease || !slices.Equal(claimIdx(b3), idx[4:]) {
		t.Fatalf("rank 0's third claim %+v %v", b3, err)
	}
	// Every batch is closed: a claim finds nothing more.
	if c, err := m.Claim(ctx, "p", req(0), all); err != nil || len(c.Rows) != 0 {
		t.Fatalf("claim with every row leased %+v %v", c, err)
	}
}

func testWait(t *testing.T, m, other metadata.MetaStore) {
	ctx := t.Context()
	commitRows(t, m, "p", "a")
	c, err := m.Claim(ctx, "p", metadata.ClaimRequest{Task: "t", Lease: time.Minute, Rows: 1, Min: 1}, all)
	if err != nil || len(c.Rows) != 1 {
		t.Fatal(c, err)
	}
	// Nothing changes: ctx ends the Wait.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = m.Wait(short, "p", metadata.Mark{Seq: c.Mark.Seq})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait with no change: %v", err)
	}
	// A commit by another client wakes it.
	done := make(chan error, 1)
	go func() { done <- m.Wait(ctx, "p", metadata.Mark{Seq: c.Mark.Seq}) }()
	time.Sleep(200 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("wait returned %v before a change", err)
	default:
	}
	commitRows(t, other, "p", "b")
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a commit did not wake the wait")
	}
	// A mark that is already behind returns at once; so does a Wake past.
	if err := m.Wait(ctx, "p", metadata.Mark{Seq: c.Mark.Seq}); err != nil {
		t.Fatal(err)
	}
	c1, err := m.Claim(ctx, "p", metadata.ClaimRequest{Task: "t", Lease: 300 * time.Millisecond, Rows: 1, Min: 1}, all)
	if err != nil || len(c1.Rows) != 1 || !c1.Mark.Wake.IsZero() {
		t.Fatalf("claim %+v %v (a claim that leased sets no wake)", c1, err)
	}
	// Nothing left: the claim's wake is the end of the 300 ms lease
	// (the other lease lasts a minute).
	c2, err := m.Claim(ctx, "p", metadata.ClaimRequest{Task: "t", Lease: time.Minute, Rows: 1, Min: 1}, all)
	if err != nil || len(c2.Rows) != 0 || c2.Mark.Wake.IsZero() || c2.Mark.Wake.After(c1.Until.Add(time.Second)) {
		t.Fatalf("claim %+v %v, want a wake at %v", c2, err, c1.Until)
	}
	if err := m.Wait(ctx, "p", c2.Mark); err != nil || time.Now().Before(c2.Mark.Wake) {
		t.Fatalf("wait for the lease's end returned %v at %v, before %v", err, time.Now(), c2.Mark.Wake)
	}
	// A commit while the claim picks (by another process) wakes the Wait
	// given its mark at once, although the claim leased rows.
	commitRows(t, m, "p", "c")
	var once sync.Once
	c3, err := m.Claim(ctx, "p", metadata.ClaimRequest{Task: "u", Lease: time.Minute, Rows: 1, Min: 1}, func(rows []*metadata.Row, d []metadata.Delivery) (metadata.Picked, error) {
		once.Do(func() { commitRows(t, other, "p", "d") })
		return firstN(1)(rows, d)
	})
	if err != nil || len(c3.Rows) != 1 {
		t.Fatalf("claim %+v %v", c3, err)
	}
	quick, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = m.Wait(quick, "p", c3.Mark)
	cancel()
	if err != nil {
		t.Fatalf("wait after a claim that missed a commit: %v", err)
	}
	// A Wait on a Meta that closes returns.
	none := func([]*metadata.Row, []metadata.Delivery) (metadata.Picked, error) { return metadata.Picked{}, nil }
	var now metadata.Claimed
	for range 2 { // the first catches other's view up
		if now, err = other.Claim(ctx, "p", metadata.ClaimRequest{Task: "t", Lease: time.Minute, Rows: 1, Min: 1}, none); err != nil {
			t.Fatal(err)
		}
	}
	go func() { done <- other.Wait(ctx, "p", metadata.Mark{Seq: now.Mark.Seq}) }()
	time.Sleep(100 * time.Millisecond)
	other.Close()
	select {
	case err := <-done:
		if !errors.Is(err, backends.ErrClosed) {
			t.Fatalf("wait on a closed Meta: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("closing the Meta did not end the wait")
	}
}

// testConsumers: goroutines of several Metas claim one task at once;
// every row is leased exactly once before any ack.
func testConsumers(t *testing.T, newMeta func(t *testing.T) metadata.MetaStore) {
	ctx := t.Context()
	metas := []metadata.MetaStore{newMeta(t), newMeta(t)}
	const n = 120
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%03d", i)
	}
	commitRows(t, metas[0], "p", keys...)
	var mu sync.Mutex
	got := map[uint64]int{}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := metas[g%2]
			for {
				c, err := m.Claim(ctx, "p", metadata.ClaimRequest{Task: "t", Lease: time.Minute, Rows: 3, Min: 1}, all)
				if err != nil {
					errs <- err
					return
				}
				if len(c.Rows) == 0 {
					return
				}
				mu.Lock()
				for _, r := range c.Rows {
					got[r.Index]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("%d rows leased, want %d", len(got), n)
	}
	for i, k := range got {
		if k != 1 {
			t.Fatalf("row %d leased %d times", i, k)
		}
	}
}

// testLateLowIndex: a row committed after rows of higher indexes were
// consumed is still offered (the claim's skip of the consumed prefix is
// per view of the rows).
func testLateLowIndex(t *testing.T, m, other metadata.MetaStore) {
	ctx := t.Context()
	resA, err := m.Prepare(ctx, "p", []string{"a"}, []string{"x"})
	if err != nil {
		t.Fatal(err)
	}
	b := commitRows(t, m, "p", "b", "c")
	if resA[0].Index >= b[0] {
		t.Fatalf("a's index %d is not below b's %d", resA[0].Index, b[0])
	}
	req := metadata.ClaimRequest{Task: "t", Lease: time.Minute, Rows: 5, Min: 1}
	c, err := m.Claim(ctx, "p", req, all)
	if err != nil || !slices.Equal(claimIdx(c), b) {
		t.Fatalf("claim %v %v", claimIdx(c), err)
	}
	if _, err := m.Settle(ctx, "p", metadata.SettleRequest{Task: "t", Op: metadata.Ack, Lease: c.Lease, Indexes: b}); err != nil {
		t.Fatal(err)
	}
	if c, err = m.Claim(ctx, "p", req, all); err != nil || len(c.Rows) != 0 {
		t.Fatalf("claim of nothing %v %v", claimIdx(c), err)
	}
	// Another process commits a: m's next claim learns of it and leases it.
	if _, err := other.Commit(ctx, "p", []metadata.RowUpdate{{Key: "a", Index: resA[0].Index, Fields: map[string]metadata.FieldInfo{"x": {Gen: resA[0].Gens["x"]}}}}); err != nil {
		t.Fatal(err)
	}
	if c, err = m.Claim(ctx, "p", req, all); err != nil || !slices.Equal(claimIdx(c), []uint64{resA[0].Index}) {
		t.Fatalf("claim after a's commit %v %v", claimIdx(c), err)
	}
}

// TestClaimPastOthersLeases: a client whose cache does not know that
// another client leased most of a partition's rows still claims a ready
// row at once: its claim asks its sampler for more each time it finds
// the candidates taken (tq's askFor), not only for 2n+16 rows.
func TestClaimPastOthersLeases(t *testing.T) {
	srv := redistest.Start(t)
	url := srv.URL() + "?prefix=qpast"
	a, b := openTQ(t, url), openTQ(t, url)
	ctx := t.Context()
	keys := keyRange("r", 400)
	ids := make([]int64, len(keys))
	if err := a.BatchPut(ctx, "p", keys, tq.Batch{"id": tq.Stacked(ids, len(keys))}, nil); err != nil {
		t.Fatal(err)
	}
	ta, err := a.Task("p", "t", []string{"id"})
	if err != nil {
		t.Fatal(err)
	}
	tb, err := b.Task("p", "t", []string{"id"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ta.Claim(ctx, 1); err != nil { // a's cache of the task's states
		t.Fatal(err)
	}
	held, err := tb.Claim(ctx, 250)
	if err != nil || len(held.Keys()) != 250 {
		t.Fatalf("b claimed %d rows: %v", len(held.Keys()), err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	l, err := ta.Wait(wctx, 1)
	if err != nil {
		t.Fatalf("a's wait with 149 rows ready: %v", err)
	}
	if got := l.Keys(); len(got) != 1 || slices.Contains(held.Keys(), got[0]) {
		t.Fatalf("a claimed %v, one of b's rows or not one row", got)
	}
}
