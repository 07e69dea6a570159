package rules

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"testing"
	"unsafe"

	"github.com/tqgo/tqgo/backends/metadata"
)

// prepare prepares keys and fields at time now, drawing new indexes from
// *next.
func prepare(t *testing.T, p *Partition, next *uint64, now int64, keys, fields []string) []metadata.Reservation {
	t.Helper()
	n := p.NewKeys(keys)
	res, err := p.Prepare(now, keys, fields, nil, *next, n)
	if err != nil {
		t.Fatal(err)
	}
	*next += uint64(n)
	return res
}

func commitOne(p *Partition, now int64, key string, r metadata.Reservation) error {
	f := map[string]metadata.FieldInfo{}
	for name, g := range r.Gens {
		f[name] = metadata.FieldInfo{Gen: g}
	}
	_, err := p.Commit(now, []metadata.RowUpdate{{Key: key, Index: r.Index, Fields: f}})
	return err
}

// A Prepare that finds more new keys than the indexes reserved for it
// applies nothing.
func TestPrepareTooFewIndexes(t *testing.T) {
	p := New()
	var next uint64
	prepare(t, p, &next, 1, []string{"a"}, []string{"f"})
	if _, err := p.Prepare(2, []string{"a", "b", "c"}, []string{"f"}, nil, 10, 1); !errors.Is(err, ErrIndexes) {
		t.Fatalf("Prepare of 2 new keys with 1 index: %v, want ErrIndexes", err)
	}
	if p.NewKeys([]string{"b", "c"}) != 2 || p.pending != 1 {
		t.Fatalf("a refused Prepare changed the rows: pending %d", p.pending)
	}
	res, err := p.Prepare(3, []string{"a", "b", "c"}, []string{"f"}, nil, 10, 5)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Index != 0 || res[1].Index != 10 || res[2].Index != 11 {
		t.Fatalf("indexes %d %d %d, want 0 10 11", res[0].Index, res[1].Index, res[2].Index)
	}
}

// Reservations of one cell beyond the window a field tracks in bits are
// kept apart, and still commit, conflict once aborted, and turn into
// orphans when their row is removed.
func TestReservationsBeyondWindow(t *testing.T) {
	p := New()
	var next uint64
	const n = window + 6
	var res []metadata.Reservation
	for i := range n {
		res = append(res, prepare(t, p, &next, int64(i), []string{"k"}, []string{"f"})...)
	}
	if far := len(p.far); far != n-window {
		t.Fatalf("%d reservations kept apart, want %d", far, n-window)
	}
	commit := func(i int) error { return commitOne(p, 100, "k", res[i]) }
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
	p.Swept(101, []metadata.Ref{{Index: res[1].Index, Field: "f", Gen: 1}})
	if err := commit(1); err == nil {
		t.Error("Commit of a reservation reported swept, out of the window, succeeded")
	}
	p.Abort(102, 102)
	if g := p.Garbage(); len(g) != 1+(n-3) { // gen 0, and 2..n-2 aborted
		t.Errorf("after Abort: %d garbage cells, want %d", len(g), 1+(n-3))
	}
	if err := commit(2); err == nil {
		t.Error("Commit of an aborted reservation out of the window succeeded")
	}
	if p.pending != 0 || len(p.far) != 0 {
		t.Errorf("after Abort: %d pending, %d apart; want none", p.pending, len(p.far))
	}
	for i := range n {
		prepare(t, p, &next, int64(200+i), []string{"k"}, []string{"f"})
	}
	p.Delete(300, []string{"k"})
	if p.pending != 0 || len(p.far) != 0 || len(p.orphans) != n {
		t.Errorf("after Delete: %d pending, %d apart, %d orphans; want 0, 0, %d", p.pending, len(p.far), len(p.orphans), n)
	}
}

// Delete and DeletePartition record the removed rows' cells in the order
// metadata.AppendRowRefs gives them, so that Swept of them is one run.
func TestRemovedCellsInRowRefsOrder(t *testing.T) {
	p := New()
	var next uint64
	keys := []string{"a", "b", "c", "d"}
	res := prepare(t, p, &next, 1, keys, []string{"z", "y", "x"})
	ups := make([]metadata.RowUpdate, len(keys))
	for i, k := range keys {
		ups[i] = metadata.RowUpdate{Key: k, Index: res[i].Index, Fields: map[string]metadata.FieldInfo{
			"z": {Gen: res[i].Gens["z"]}, "y": {Gen: res[i].Gens["y"]}, "x": {Gen: res[i].Gens["x"]}}}
	}
	if _, err := p.Commit(2, ups); err != nil {
		t.Fatal(err)
	}
	rows := p.Delete(3, []string{"c", "a"})
	if want := metadata.AppendRowRefs(nil, rows); !slices.Equal(p.garbage, want) {
		t.Errorf("Delete recorded %v, want %v", p.garbage, want)
	}
	p.Swept(4, rows[0].Refs())
	p.garbage = nil
	rows = p.DeletePartition(5)
	if want := metadata.AppendRowRefs(nil, rows); !slices.Equal(p.garbage, want) {
		t.Errorf("DeletePartition recorded %v, want %v", p.garbage, want)
	}
	if !p.sweepRun(metadata.AppendRowRefs(nil, rows)) || len(p.garbage) != 0 {
		t.Errorf("the removed rows' cells are not one run of the garbage")
	}
}

// An abandoned reservation is aborted once older than the cutoff even
// while newer puts of its cell keep coming; those are left alone.
func TestAbandonedReservationUnderRewrites(t *testing.T) {
	p := New()
	var next uint64
	put := func(now int64) metadata.Reservation {
		return prepare(t, p, &next, now, []string{"k"}, []string{"f"})[0]
	}
	abandoned := put(1000)
	if err := commitOne(p, 2000, "k", put(2000)); err != nil {
		t.Fatal(err)
	}
	inFlight := put(2000)
	p.Abort(2000, 1500)
	want := []metadata.Ref{{Index: abandoned.Index, Field: "f", Gen: abandoned.Gens["f"]}}
	if !slices.Equal(p.Garbage(), want) {
		t.Errorf("Abort(cutoff 1500) left garbage %v, want the reservation made at 1000 %v", p.Garbage(), want)
	}
	if err := commitOne(p, 2001, "k", abandoned); err == nil {
		t.Error("Commit of the aborted reservation succeeded")
	}
	if err := commitOne(p, 2001, "k", inFlight); err != nil {
		t.Errorf("Commit of the reservation in flight: %v", err)
	}
	// Once the oldest commits, the next is judged by its own age.
	first := put(3000)
	second := put(4000)
	if err := commitOne(p, 4000, "k", first); err != nil {
		t.Fatal(err)
	}
	p.Abort(4000, 3500)
	if slices.ContainsFunc(p.Garbage(), func(r metadata.Ref) bool { return r.Gen == second.Gens["f"] }) {
		t.Errorf("Abort(cutoff 3500) = %v took the reservation made at 4000 (generation %d)", p.Garbage(), second.Gens["f"])
	}
	if err := commitOne(p, 4001, "k", second); err != nil {
		t.Errorf("Commit of a young reservation behind an old committed one: %v", err)
	}
}

// The clock never goes back: a time earlier than one given before is
// taken as the later one.
func TestClockMonotonic(t *testing.T) {
	p := New()
	var next uint64
	res := prepare(t, p, &next, 5000, []string{"k"}, []string{"f"})
	if err := commitOne(p, 5000, "k", res[0]); err != nil {
		t.Fatal(err)
	}
	c := p.Claim(1000, &ClaimArgs{Task: "t", Token: "x", Lease: 1000, Rows: 1, Min: 1, Select: Select{Fields: []string{"f"}}})
	if len(c.Rows) != 1 || c.Until.UnixMicro() != 5001 {
		t.Fatalf("a claim at an earlier time: %d rows until %d, want 1 until 5001", len(c.Rows), c.Until.UnixMicro())
	}
}

// checkWindows checks the pending windows of p's rows: a field holds one
// exactly while a generation of it is pending there, none is shared or
// free too, p counts those in use, and the pending count is theirs and
// far's.
func checkWindows(p *Partition) error {
	seen := map[uint32]bool{}
	n := len(p.far)
	for k, r := range p.rows {
		for _, g := range r.gens {
			if g.w == 0 {
				continue
			}
			if g.w > uint32(len(p.wins)) {
				return fmt.Errorf("row %q field %q: window %d of %d", k, g.field, g.w, len(p.wins))
			}
			if p.pend(&g) == 0 {
				return fmt.Errorf("row %q field %q: a window with nothing pending", k, g.field)
			}
			if seen[g.w] {
				return fmt.Errorf("row %q field %q: a window shared", k, g.field)
			}
			if w := p.win(&g); w.row != r.index {
				return fmt.Errorf("row %q (index %d) field %q: its window names row %d", k, r.index, g.field, w.row)
			}
			seen[g.w] = true
			n += bits.OnesCount64(p.pend(&g))
		}
	}
	if n != p.pending {
		return fmt.Errorf("%d reservations pending, counted %d", n, p.pending)
	}
	if len(seen) != p.usedWins || len(p.wins) != p.usedWins+len(p.freeWins) {
		return fmt.Errorf("%d windows in use, counted %d, of %d with %d free", len(seen), p.usedWins, len(p.wins), len(p.freeWins))
	}
	for _, i := range p.freeWins {
		if seen[i+1] {
			return fmt.Errorf("a free window in use")
		}
		if p.wins[i] != (pendWindow{}) {
			return fmt.Errorf("a free window holds %+v", p.wins[i])
		}
		seen[i+1] = true
	}
	// Rows share gens only as genSharer lets them: committed, none
	// pending, marked shared, every other row's gens its own; the
	// capacity's bytes are every row's sizes.
	owner := map[*fieldGen]*row{}
	var bytes int64
	for k, r := range p.rows {
		for _, g := range r.gens {
			bytes += g.size
		}
		if len(r.gens) == 0 {
			continue
		}
		if r.shared {
			if r.view == nil {
				return fmt.Errorf("row %q, never committed, shares its field generations", k)
			}
			for _, g := range r.gens {
				if g.w != 0 {
					return fmt.Errorf("row %q shares its field generations, %q pending", k, g.field)
				}
			}
		}
		if o := owner[&r.gens[0]]; o != nil && (!o.shared || !r.shared) {
			return fmt.Errorf("row %q (shared %v) and index %d (shared %v) hold the same field generations", k, r.shared, o.index, o.shared)
		}
		owner[&r.gens[0]] = r
	}
	if bytes != p.bytes {
		return fmt.Errorf("the rows' sizes are %d bytes, counted %d", bytes, p.bytes)
	}
	// Summary's leased entries are the task's (entries are replaced,
	// never changed: a stale one would show a lease as it was).
	for name, t := range p.tasks {
		if t.cnt == nil {
			continue
		}
		n := 0
		for i, e := range t.entries {
			if e.state == metadata.Leased {
				n++
				if t.cnt.leased[i] != e {
					return fmt.Errorf("task %q row %d: Summary's leased entry is not the row's", name, i)
				}
			}
		}
		if n != len(t.cnt.leased) {
			return fmt.Errorf("task %q: %d leased entries, Summary has %d", name, n, len(t.cnt.leased))
		}
	}
	uncommitted := 0
	for k, r := range p.rows {
		if r.view != nil && len(k) > 0 && unsafe.StringData(k) != unsafe.StringData(r.view.Key) {
			return fmt.Errorf("row %q: its view holds another copy of its key", k)
		}
		if r.view == nil {
			uncommitted++
			if p.uncommitted[r.index] != r {
				return fmt.Errorf("row %q (index %d), never committed, not found by its index", k, r.index)
			}
		}
	}
	if uncommitted != len(p.uncommitted) {
		return fmt.Errorf("%d rows never committed, %d by index", uncommitted, len(p.uncommitted))
	}
	return nil
}
