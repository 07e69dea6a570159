package memory

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
)

// A job that makes a partition per step and clears it must not grow the
// store: a cleared partition is kept while it has garbage, and forgotten
// once that is swept.
func TestClearedPartitionsForgotten(t *testing.T) {
	ctx := context.Background()
	m := NewMetaStore()
	for step := range 50 {
		p := fmt.Sprint("step-", step)
		res, err := m.Prepare(ctx, p, []string{"a", "b"}, []string{"f"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Commit(ctx, p, []backends.RowUpdate{{Key: "a", Index: res[0].Index, Fields: map[string]backends.FieldInfo{"f": {Gen: 0}}}}); err != nil {
			t.Fatal(err)
		}
		rows, err := m.DeletePartition(ctx, p) // b's reservation is an orphan
		if err != nil || len(rows) != 1 {
			t.Fatalf("DeletePartition: %d rows, %v", len(rows), err)
		}
		if n := m.parts[p]; n == nil {
			t.Fatalf("step %d: a cleared partition with garbage was forgotten", step)
		}
		if err := m.Swept(ctx, p, rows[0].Refs()); err != nil {
			t.Fatal(err)
		}
		garbage, err := m.Garbage(ctx, p, 0)
		if err != nil || len(garbage) != 1 {
			t.Fatalf("Garbage: %v, %v; want b's reservation", garbage, err)
		}
		if err := m.Swept(ctx, p, garbage); err != nil {
			t.Fatal(err)
		}
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if len(m.parts) != 0 {
		t.Errorf("%d partitions kept after every one was cleared and swept", len(m.parts))
	}
}

// Reservations of one cell beyond the window a field tracks in bits are
// kept apart, and still commit, conflict once aborted, and turn into
// orphans when their row is removed.
func TestReservationsBeyondWindow(t *testing.T) {
	ctx := context.Background()
	m := NewMetaStore()
	const n = window + 6
	var res []backends.Reservation
	for range n {
		r, err := m.Prepare(ctx, "p", []string{"k"}, []string{"f"})
		if err != nil {
			t.Fatal(err)
		}
		res = append(res, r...)
	}
	if far := len(m.parts["p"].far); far != n-window {
		t.Fatalf("%d reservations kept apart, want %d", far, n-window)
	}
	commit := func(i int) error {
		_, err := m.Commit(ctx, "p", []backends.RowUpdate{{Key: "k", Index: res[i].Index,
			Fields: map[string]backends.FieldInfo{"f": {Gen: res[i].Gens["f"]}}}})
		return err
	}
	if err := commit(0); err != nil {
		t.Fatalf("Commit of the oldest reservation, out of the window: %v", err)
	}
	if err := commit(0); err != nil {
		t.Fatalf("Commit of the committed generation again: %v", err)
	}
	if err := commit(n - 1); err != nil {
		t.Fatalf("Commit of the newest: %v", err)
	}
	// 0 superseded; 1..n-2 pending, of which 1..5 apart.
	if err := m.Swept(ctx, "p", []backends.Ref{{Index: res[1].Index, Field: "f", Gen: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := commit(1); err == nil {
		t.Error("Commit of a reservation reported swept, out of the window, succeeded")
	}
	garbage, err := m.Garbage(ctx, "p", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(garbage) != 1+(n-3) { // gen 0, and 2..n-2 aborted
		t.Errorf("Garbage(0): %d cells, want %d", len(garbage), 1+(n-3))
	}
	if err := commit(2); err == nil {
		t.Error("Commit of an aborted reservation out of the window succeeded")
	}
	if p := m.parts["p"]; p.pending != 0 || len(p.far) != 0 {
		t.Errorf("after Garbage(0): %d pending, %d apart; want none", p.pending, len(p.far))
	}

	// A removed row's reservations out of the window become orphans.
	for range n {
		if _, err := m.Prepare(ctx, "p", []string{"k"}, []string{"f"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Delete(ctx, "p", []string{"k"}); err != nil {
		t.Fatal(err)
	}
	if p := m.parts["p"]; p.pending != 0 || len(p.far) != 0 || len(p.orphans) != n {
		t.Errorf("after Delete: %d pending, %d apart, %d orphans; want 0, 0, %d", p.pending, len(p.far), len(p.orphans), n)
	}
}

// Delete and DeletePartition record the removed rows' cells in the order
// backends.AppendRowRefs gives them, the order tq reports them swept in,
// so that Swept of them is one run.
func TestRemovedCellsInRowRefsOrder(t *testing.T) {
	ctx := context.Background()
	m := NewMetaStore()
	keys := []string{"a", "b", "c", "d"}
	res, err := m.Prepare(ctx, "p", keys, []string{"z", "y", "x"})
	if err != nil {
		t.Fatal(err)
	}
	ups := make([]backends.RowUpdate, len(keys))
	for i, k := range keys {
		ups[i] = backends.RowUpdate{Key: k, Index: res[i].Index, Fields: map[string]backends.FieldInfo{
			"z": {Gen: res[i].Gens["z"]}, "y": {Gen: res[i].Gens["y"]}, "x": {Gen: res[i].Gens["x"]}}}
	}
	if _, err := m.Commit(ctx, "p", ups); err != nil {
		t.Fatal(err)
	}
	p := m.parts["p"]
	rows, err := m.Delete(ctx, "p", []string{"c", "a"})
	if err != nil {
		t.Fatal(err)
	}
	if want := backends.AppendRowRefs(nil, rows); !slices.Equal(p.garbage, want) {
		t.Errorf("Delete recorded %v, want %v", p.garbage, want)
	}
	p.garbage = nil
	rows, err = m.DeletePartition(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if want := backends.AppendRowRefs(nil, rows); !slices.Equal(p.garbage, want) {
		t.Errorf("DeletePartition recorded %v, want %v", p.garbage, want)
	}
}

// An abandoned reservation is aborted once older than olderThan even while
// newer puts of its cell keep coming; those are left alone.
func TestAbandonedReservationUnderRewrites(t *testing.T) {
	// Older reservations are older than age for sure; younger ones have
	// all of age to spare.
	const age = 200 * time.Millisecond
	ctx := context.Background()
	m := NewMetaStore()
	put := func() backends.Reservation {
		t.Helper()
		res, err := m.Prepare(ctx, "p", []string{"k"}, []string{"f"})
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	commit := func(r backends.Reservation) error {
		_, err := m.Commit(ctx, "p", []backends.RowUpdate{{Key: "k", Index: r.Index,
			Fields: map[string]backends.FieldInfo{"f": {Gen: r.Gens["f"]}}}})
		return err
	}
	abandoned := put()
	time.Sleep(age + 50*time.Millisecond)
	if err := commit(put()); err != nil {
		t.Fatal(err)
	}
	inFlight := put()
	garbage, err := m.Garbage(ctx, "p", age)
	if err != nil {
		t.Fatal(err)
	}
	want := []backends.Ref{{Index: abandoned.Index, Field: "f", Gen: abandoned.Gens["f"]}}
	if !slices.Equal(garbage, want) {
		t.Errorf("Garbage(%v) = %v, want the reservation made before the sleep %v", age, garbage, want)
	}
	if err := commit(abandoned); err == nil {
		t.Error("Commit of the aborted reservation succeeded")
	}
	if err := commit(inFlight); err != nil {
		t.Errorf("Commit of the reservation in flight: %v", err)
	}

	// Once the oldest commits, the next is judged by its own age.
	first := put()
	time.Sleep(age + 50*time.Millisecond)
	second := put()
	if err := commit(first); err != nil {
		t.Fatal(err)
	}
	garbage, err = m.Garbage(ctx, "p", age)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(garbage, func(r backends.Ref) bool { return r.Gen == second.Gens["f"] }) {
		t.Errorf("Garbage(%v) = %v has the reservation made just now (generation %d)", age, garbage, second.Gens["f"])
	}
	if err := commit(second); err != nil {
		t.Errorf("Commit of a young reservation behind an old committed one: %v", err)
	}
}
