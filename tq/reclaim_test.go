package tq_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest"
	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/tq"
)

// reclaimEngine is a client over a memory store wrapped in a Faulty and
// the memory MetaStore itself, with both at hand.
type reclaimEngine struct {
	c      *tq.Client
	data   *memory.Store
	meta   *memory.MetaStore
	faults *backendtest.Faulty
}

func newReclaimEngine(t *testing.T, opts ...tq.Option) *reclaimEngine {
	t.Helper()
	e := &reclaimEngine{data: memory.New(), meta: memory.NewMetaStore(), faults: new(backendtest.Faulty)}
	t.Cleanup(func() { _ = e.data.Close(); _ = e.meta.Close() })
	e.c = newClient(t, backendtest.Wrap(local(e.data), e.faults).Data, e.meta, opts...)
	return e
}

func (e *reclaimEngine) reclaim(t *testing.T, partition string, olderThan time.Duration) tq.ReclaimReport {
	t.Helper()
	rep, err := e.c.Reclaim(context.Background(), partition, olderThan)
	if err != nil {
		t.Fatalf("Reclaim(%q, %v): %+v, %v", partition, olderThan, rep, err)
	}
	return rep
}

// wantOnlyListed checks that the data store holds exactly the cells of the
// rows partitions list: each is readable, and there is no other key.
func (e *reclaimEngine) wantOnlyListed(t *testing.T, partitions ...string) {
	t.Helper()
	ctx := context.Background()
	var keys []string
	for _, p := range partitions {
		rows, err := e.meta.List(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			for _, ref := range r.Refs() {
				keys = append(keys, ref.Key())
			}
		}
	}
	vals, err := getRaw(ctx, e.data, keys)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vals {
		if v == nil {
			t.Errorf("cell %q of a listed row is missing", keys[i])
		}
	}
	if n := e.data.Len(); n != len(keys) {
		t.Errorf("data store holds %d cells, the listed rows have %d", n, len(keys))
	}
}

// wantNoGarbage checks that the store lists no garbage for partition, not
// even reservations: tq reported every cell it deleted.
func (e *reclaimEngine) wantNoGarbage(t *testing.T, partition string) {
	t.Helper()
	refs, err := e.meta.Garbage(context.Background(), partition, 0)
	if err != nil || len(refs) != 0 {
		t.Errorf("Garbage(%q) = %v, %v; want none", partition, refs, err)
	}
}

func ints(n int, v int64) tq.Column {
	s := make([]int64, n)
	for i := range s {
		s[i] = v
	}
	return tq.Stacked(s, n)
}

// A put whose rollback cannot delete its cells leaves them, abandoned:
// the next Reclaim, whatever its olderThan, deletes and reports them.
func TestReclaimFailedRollback(t *testing.T) {
	ctx := context.Background()
	e := newReclaimEngine(t)
	keys := keysN("k", 4)
	mustPut(t, e.c, "p", keys, tq.Batch{"x": ints(4, 1)}, nil)
	e.faults.FailWriteAfter(1, 2, nil) // two cells written, then the put fails
	e.faults.FailAll(backendtest.OpDelete, nil)
	if err := e.c.BatchPut(ctx, "p", keys, tq.Batch{"x": ints(4, 2)}, nil); !errors.Is(err, backendtest.ErrInjected) {
		t.Fatalf("BatchPut: %v, want the injected error", err)
	}
	e.faults.Clear()
	if n := e.data.Len(); n != 6 {
		t.Fatalf("data store holds %d cells after the failed rollback, want 4 + 2 left over", n)
	}
	// The rollback abandoned the reservations before its deletes failed:
	// they are garbage already, for any Reclaim.
	if rep := e.reclaim(t, "p", time.Hour); rep != (tq.ReclaimReport{Deleted: 4}) {
		t.Errorf("Reclaim(1h) after a failed rollback: %+v, want the 4 cells reserved deleted", rep)
	}
	e.wantOnlyListed(t, "p")
	if got := flat[int64](t, mustGet(t, e.c, "p", keys, "x")["x"]); got[0] != 1 || got[3] != 1 {
		t.Errorf("rows after Reclaim: %v, want the first put's 1s", got)
	}
	if rep := e.reclaim(t, "p", 0); rep != (tq.ReclaimReport{}) {
		t.Errorf("Reclaim again: %+v, want nothing left", rep)
	}
}

// A put abandoned after Prepare and its data (its client died) is
// reclaimed once older than olderThan, and its commit then conflicts.
func TestReclaimAbandonedPut(t *testing.T) {
	ctx := context.Background()
	e := newReclaimEngine(t)
	mustPut(t, e.c, "p", []string{"live"}, tq.Batch{"x": ints(1, 1)}, nil)
	res, err := e.meta.Prepare(ctx, "p", []string{"live", "dead"}, []string{"x", "y"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var cells []string
	for _, r := range res {
		for f, g := range r.Gens {
			cells = append(cells, backends.StorageKey(r.Index, f, g))
		}
	}
	if err := putRaw(ctx, e.data, cells, make([][]byte, len(cells))); err != nil {
		t.Fatal(err)
	}
	if rep := e.reclaim(t, "p", time.Hour); rep != (tq.ReclaimReport{}) {
		t.Errorf("Reclaim(1h) of a put reserved just now: %+v, want nothing done", rep)
	}
	time.Sleep(100 * time.Millisecond)
	if rep := e.reclaim(t, "p", 50*time.Millisecond); rep != (tq.ReclaimReport{Deleted: 4}) {
		t.Errorf("Reclaim(50ms) of a put reserved 100ms ago: %+v, want its 4 cells deleted", rep)
	}
	e.wantOnlyListed(t, "p")
	_, err = e.meta.Commit(ctx, "p", []metadata.RowUpdate{{Key: "dead", Index: res[1].Index,
		Fields: map[string]metadata.FieldInfo{"x": {Gen: res[1].Gens["x"]}}}})
	if !errors.Is(err, tq.ErrConflict) {
		t.Errorf("Commit of the reclaimed put: %v, want ErrConflict", err)
	}
}

// Cells a Clear, a ClearPartition or a rewrite could not delete are
// deleted by Reclaim; no reservation is involved, so any olderThan finds
// them.
func TestReclaimFailedDeletes(t *testing.T) {
	ctx := context.Background()
	e := newReclaimEngine(t)
	batch := tq.Batch{"x": ints(3, 1), "s": tq.ValuesOf([]string{"a", "b", "c"})}
	for _, p := range []string{"rewritten", "cleared", "gone"} {
		mustPut(t, e.c, p, keysN("k", 3), batch, nil)
	}
	e.faults.FailAll(backendtest.OpDelete, nil)
	mustPut(t, e.c, "rewritten", keysN("k", 2), tq.Batch{"x": ints(2, 2)}, nil) // k0, k1's x replaced
	// The clears apply (their rows are gone), so they return nil; the
	// cells they could not delete are Reclaim's.
	if err := e.c.Clear(ctx, "cleared", []string{"k0", "k2"}); err != nil {
		t.Errorf("Clear with failing deletes: %v, want nil", err)
	}
	if err := e.c.ClearPartition(ctx, "gone"); err != nil {
		t.Errorf("ClearPartition with failing deletes: %v, want nil", err)
	}
	e.faults.Clear()
	for p, want := range map[string]int{"rewritten": 2, "cleared": 4, "gone": 6} {
		if rep := e.reclaim(t, p, time.Hour); rep != (tq.ReclaimReport{Deleted: want}) {
			t.Errorf("Reclaim(%q): %+v, want %d cells deleted", p, rep, want)
		}
	}
	e.wantOnlyListed(t, "rewritten", "cleared", "gone")
	if got := flat[int64](t, mustGet(t, e.c, "rewritten", keysN("k", 3), "x")["x"]); fmt.Sprint(got) != "[2 2 1]" {
		t.Errorf("rewritten rows: %v, want [2 2 1]", got)
	}
	if ps, err := e.c.Partitions(ctx); err != nil || fmt.Sprint(ps) != "[cleared rewritten]" {
		t.Errorf("Partitions: %q, %v", ps, err)
	}
}

// Reclaim reports to the store only the cells it deleted: a chunk whose
// delete fails stays garbage, counted as Left and deleted by the next
// Reclaim.
func TestReclaimPartialDelete(t *testing.T) {
	ctx := context.Background()
	e := newReclaimEngine(t, tq.WithKeysLimit(2), tq.WithIODepth(1))
	mustPut(t, e.c, "p", keysN("k", 6), tq.Batch{"x": ints(6, 1)}, nil)
	e.faults.FailAll(backendtest.OpDelete, nil)
	if err := e.c.ClearPartition(ctx, "p"); err != nil {
		t.Fatalf("ClearPartition with failing deletes: %v, want nil (the rows are gone)", err)
	}
	e.faults.Clear()
	e.faults.FailNth(backendtest.OpDelete, 2, nil) // the second chunk of three
	rep, err := e.c.Reclaim(ctx, "p", time.Hour)
	if !errors.Is(err, backendtest.ErrInjected) || rep != (tq.ReclaimReport{Deleted: 2, Left: 4}) {
		t.Errorf("Reclaim with a failing chunk: %+v, %v; want 2 deleted, 4 left (the chunk failed, the last never ran) and the error", rep, err)
	}
	if rep := e.reclaim(t, "p", time.Hour); rep != (tq.ReclaimReport{Deleted: 4}) {
		t.Errorf("Reclaim again: %+v, want the 4 left deleted", rep)
	}
	e.wantOnlyListed(t, "p")
	e.wantNoGarbage(t, "p")
}

// With deletes that succeed, tq reports every cell it deletes (replaced
// ones, a rollback's, cleared ones), so the store keeps no record of them
// and Reclaim has nothing to do.
func TestCleanupReportsDeletes(t *testing.T) {
	ctx := context.Background()
	e := newReclaimEngine(t)
	keys := keysN("k", 8)
	for i := range 5 {
		mustPut(t, e.c, "p", keys, tq.Batch{"x": ints(8, int64(i)), "s": tq.ValuesOf(keys)}, nil)
	}
	e.faults.FailWriteAfter(1, 3, nil)
	if err := e.c.BatchPut(ctx, "p", keys, tq.Batch{"x": ints(8, 9)}, nil); err == nil {
		t.Fatal("BatchPut with a failing write succeeded")
	}
	e.wantNoGarbage(t, "p")
	if err := e.c.Clear(ctx, "p", keys[:3]); err != nil {
		t.Fatal(err)
	}
	e.wantNoGarbage(t, "p")
	e.wantOnlyListed(t, "p")
	if err := e.c.ClearPartition(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	e.wantNoGarbage(t, "p")
	if n := e.data.Len(); n != 0 {
		t.Errorf("data store holds %d cells after ClearPartition", n)
	}
}

// A put in flight when its partition is cleared fails with ErrConflict
// and deletes its own cells: nothing of the partition is left, and the
// store lists no garbage.
func TestClearPartitionDuringPut(t *testing.T) {
	ctx := context.Background()
	e := newReclaimEngine(t)
	keys := keysN("k", 4)
	mustPut(t, e.c, "p", keys, tq.Batch{"x": ints(4, 1)}, nil)
	e.faults.SetDelay(backendtest.OpWrite, 100*time.Millisecond)
	e.faults.ResetCounts()
	done := make(chan error, 1)
	go func() { done <- e.c.BatchPut(ctx, "p", keys, tq.Batch{"x": ints(4, 2)}, nil) }()
	for e.faults.Calls(backendtest.OpWrite) == 0 { // reserved, now writing
		time.Sleep(time.Millisecond)
	}
	if err := e.c.ClearPartition(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, tq.ErrConflict) {
		t.Errorf("put during ClearPartition: %v, want ErrConflict", err)
	}
	if n := e.data.Len(); n != 0 {
		t.Errorf("data store holds %d cells after ClearPartition and the put's rollback", n)
	}
	e.wantNoGarbage(t, "p")
}

func TestReclaimErrors(t *testing.T) {
	ctx := context.Background()
	e := newReclaimEngine(t)
	if _, err := e.c.Reclaim(ctx, "p", -time.Second); !errors.Is(err, tq.ErrInvalid) {
		t.Errorf("Reclaim(-1s): %v, want ErrInvalid", err)
	}
	if _, err := e.c.Reclaim(ctx, "", 0); !errors.Is(err, tq.ErrInvalid) {
		t.Errorf("Reclaim of partition \"\": %v, want ErrInvalid", err)
	}
	if rep := e.reclaim(t, "unknown", 0); rep != (tq.ReclaimReport{}) {
		t.Errorf("Reclaim of an unknown partition: %+v", rep)
	}
	if err := e.c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Reclaim(ctx, "p", 0); !errors.Is(err, tq.ErrClosed) {
		t.Errorf("Reclaim after Close: %v, want ErrClosed", err)
	}
}

// Reclaim running alongside puts, reads and clears never takes a cell a
// committed row or a put in flight needs: every put succeeds, every read
// of a listed row finds its cells, and once the writers stop, Reclaim(0)
// leaves exactly the listed rows' cells.
func TestReclaimConcurrent(t *testing.T) {
	ctx := context.Background()
	e := newReclaimEngine(t, tq.WithKeysLimit(3))
	mustPut(t, e.c, "p", keysN("shared", 6), tq.Batch{"x": ints(6, 0), "s": tq.ValuesOf(keysN("shared", 6))}, nil)
	stop := make(chan struct{})
	reclaimed := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				reclaimed <- nil
				return
			default:
			}
			if _, err := e.c.Reclaim(ctx, "p", time.Hour); err != nil {
				reclaimed <- err
				return
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for w := range 3 {
		wg.Go(func() { errs <- e.writeAndRead(ctx, w) })
	}
	wg.Wait()
	close(errs)
	close(stop)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if err := <-reclaimed; err != nil {
		t.Fatalf("Reclaim alongside puts: %v", err)
	}
	e.reclaim(t, "p", 0)
	e.wantOnlyListed(t, "p")
	e.wantNoGarbage(t, "p")
}

// writeAndRead is worker w of TestReclaimConcurrent: workers 1 and 2
// rewrite the same rows; worker 0 writes rows of its own and clears some
// now and then.
func (e *reclaimEngine) writeAndRead(ctx context.Context, w int) error {
	keys := keysN("shared", 6)
	if w == 0 {
		keys = keysN("own", 6)
	}
	for i := range 40 {
		v := int64(w*1000 + i)
		if err := e.c.BatchPut(ctx, "p", keys, tq.Batch{"x": ints(len(keys), v), "s": tq.ValuesOf(keys)}, nil); err != nil {
			return fmt.Errorf("worker %d: put: %w", w, err)
		}
		if w == 0 && i%5 == 4 {
			if err := e.c.Clear(ctx, "p", keys[:2]); err != nil {
				return fmt.Errorf("clear: %w", err)
			}
		}
		// The shared rows are never cleared: a cell missing from them is
		// one Reclaim took.
		if _, err := e.c.BatchGet(ctx, "p", keysN("shared", 6), "x", "s"); err != nil {
			return fmt.Errorf("worker %d: read of the shared rows: %w", w, err)
		}
	}
	return nil
}

// A put still running once older than olderThan is taken for abandoned,
// as the put of a client that hangs mid-way would be: here its data
// writes stall, and Reclaim aborts its reservations and deletes their
// cells while it waits. The put then writes the rest of its cells, its
// commit fails with ErrConflict, and its rollback deletes what it wrote:
// the rows keep their old values, and nothing is left over.
func TestReclaimTakesStalledPut(t *testing.T) {
	ctx := context.Background()
	e := newReclaimEngine(t, tq.WithKeysLimit(2), tq.WithIODepth(1))
	keys := keysN("k", 4)
	mustPut(t, e.c, "p", keys, tq.Batch{"x": ints(4, 1), "s": tq.ValuesOf(keys)}, nil)
	e.faults.ResetCounts()
	e.faults.SetDelay(backendtest.OpWrite, 100*time.Millisecond) // per chunk of 2 tensor cells
	done := make(chan error, 1)
	go func() { done <- e.c.BatchPut(ctx, "p", keys, tq.Batch{"x": ints(4, 2), "s": tq.ValuesOf(keys)}, nil) }()
	for e.faults.Calls(backendtest.OpWrite) == 0 { // reserved, the first chunk stalled
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	if rep := e.reclaim(t, "p", 10*time.Millisecond); rep != (tq.ReclaimReport{Deleted: 8}) {
		t.Errorf("Reclaim(10ms) of a put reserved 20ms ago: %+v, want its 8 cells deleted", rep)
	}
	atReclaim := e.faults.Calls(backendtest.OpWrite)
	if err := <-done; !errors.Is(err, tq.ErrConflict) {
		t.Fatalf("put taken by Reclaim: %v, want ErrConflict", err)
	}
	e.faults.Clear()
	if n := e.faults.Calls(backendtest.OpWrite); n <= atReclaim {
		t.Fatalf("the put made %d writes, %d of them before Reclaim: none after it, so this tests nothing", n, atReclaim)
	}
	e.wantOnlyListed(t, "p")
	e.wantNoGarbage(t, "p")
	if got := flat[int64](t, mustGet(t, e.c, "p", keys, "x")["x"]); fmt.Sprint(got) != "[1 1 1 1]" {
		t.Errorf("rows after the put taken by Reclaim: %v, want the first put's 1s", got)
	}
}
