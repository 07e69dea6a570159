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
	"github.com/tqgo/tqgo/codec"
	"github.com/tqgo/tqgo/tq"
)

// A Commit the store applied but could not confirm (its reply lost, and
// settling it failed: ErrOutcomeUnknown) fails the put with
// ErrOutcomeUnknown and keeps its cells: the row must stay readable, not
// be rolled back into a listed row whose bytes are gone.
func TestCommitAppliedDespiteError(t *testing.T) {
	ctx := context.Background()
	meta := newMetaSpy()
	st := memory.New()
	c := newClient(t, st, meta)
	keys := keysN("k", 4)
	meta.appliedErr = fmt.Errorf("%w: reply lost", backends.ErrOutcomeUnknown)
	err := c.BatchPut(ctx, "p", keys, tq.Batch{"x": tq.Stacked(seq[int64](10, 4))}, nil)
	if !errors.Is(err, tq.ErrOutcomeUnknown) {
		t.Fatalf("put whose commit outcome is unknown: %v, want ErrOutcomeUnknown", err)
	}
	meta.appliedErr = nil
	got := flat[int64](t, mustGet(t, c, "p", keys, "x")["x"])
	if len(got) != 4 || got[0] != 10 || got[3] != 13 {
		t.Fatalf("read back %v", got)
	}
	if st.Len() != 4 {
		t.Fatalf("store holds %d cells, want 4", st.Len())
	}
}

// A Commit that failed without applying (any error but ErrOutcomeUnknown,
// a timeout included: the store settled it) rolls the put back completely.
func TestCommitNotAppliedRollsBack(t *testing.T) {
	ctx := context.Background()
	meta := newMetaSpy()
	st := memory.New()
	c := newClient(t, st, meta)
	meta.commitErr = context.DeadlineExceeded
	err := c.BatchPut(ctx, "p", keysN("k", 4), tq.Batch{"x": tq.Stacked(seq[int64](0, 4))}, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want the commit error", err)
	}
	if st.Len() != 0 {
		t.Fatalf("store holds %d cells after a failed commit, want 0", st.Len())
	}
}

// slowWriteClient is a client (closed by the test itself) over the
// memory engine whose writes take delay: a put stays in flight that long.
func slowWriteClient(t *testing.T, delay time.Duration) (*tq.Client, *backendtest.Faulty, *memory.Store) {
	t.Helper()
	f := &backendtest.Faulty{}
	st := memory.New()
	c, err := tq.New(backendtest.Wrap(local(st), f))
	if err != nil {
		t.Fatal(err)
	}
	f.SetDelay(backendtest.OpWrite, delay)
	return c, f, st
}

// Close waits for a put in flight: the put finishes (data and commit), and
// only calls that start after Close began see ErrClosed.
func TestCloseWaitsForCallsInFlight(t *testing.T) {
	ctx := context.Background()
	c, f, st := slowWriteClient(t, 100*time.Millisecond)
	keys := keysN("k", 8)
	var wg sync.WaitGroup
	var putErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		putErr = c.BatchPut(ctx, "p", keys, tq.Batch{"x": tq.Stacked(seq[int64](0, 8))}, nil)
	}()
	for f.Calls(backendtest.OpWrite) == 0 {
		time.Sleep(time.Millisecond)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// Checked before waiting for the goroutine: Close itself must have
	// waited for the delayed write.
	if n := st.Len(); n != 8 {
		t.Fatalf("Close returned with %d of the put's 8 cells stored", n)
	}
	wg.Wait()
	if putErr != nil {
		t.Fatalf("put in flight at Close: %v", putErr)
	}
	if st.Len() != 8 {
		t.Fatalf("store holds %d cells, want the put's 8", st.Len())
	}
	if _, err := c.List(ctx, "p"); !errors.Is(err, tq.ErrClosed) {
		t.Fatalf("List after Close: %v, want ErrClosed", err)
	}
}

// A second Close, while the first waits for a put in flight, returns only
// once the first has finished: either return means the client is done.
func TestSecondCloseWaitsForTheFirst(t *testing.T) {
	ctx := context.Background()
	c, f, st := slowWriteClient(t, 200*time.Millisecond)
	keys := keysN("k", 8)
	putDone := make(chan error, 1)
	go func() { putDone <- c.BatchPut(ctx, "p", keys, tq.Batch{"x": tq.Stacked(seq[int64](0, 8))}, nil) }()
	for f.Calls(backendtest.OpWrite) == 0 {
		time.Sleep(time.Millisecond)
	}
	go func() { _ = c.Close() }()
	// Let the first Close start waiting for the put (a call made to see
	// that would queue behind it); whichever Close runs first, the other
	// must wait for it.
	time.Sleep(20 * time.Millisecond)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n := st.Len(); n != 8 {
		t.Errorf("a Close returned with %d of the put's 8 cells stored: the put was still in flight", n)
	}
	if err := <-putDone; err != nil {
		t.Fatalf("put in flight at Close: %v", err)
	}
}

// Small cells share one arena in the memory engine; each starts 16-byte
// aligned, so a decoded row's View aliases the stored bytes, every dtype.
func TestDecodedRowsViewWithoutCopy(t *testing.T) {
	ctx := context.Background()
	c, _ := memClient(t)
	keys := keysN("k", 5)
	rows := [][]int64{{1}, {2, 3}, {4, 5, 6}, {7}, {8, 9}}
	// Strings of odd lengths in field "a" (packed first) leave the arena at
	// odd offsets unless each cell's slot is rounded up.
	mustPut(t, c, "p", keys, tq.Batch{
		"a": tq.ValuesOf([]string{"x", "yyy", "zzzzz", "w", "vvvvvvv"}),
		"r": tq.JaggedOf(rows),
	}, nil)
	b, err := c.BatchGet(ctx, "p", keys, "r")
	if err != nil {
		t.Fatal(err)
	}
	ts, err := b["r"].Tensors()
	if err != nil {
		t.Fatal(err)
	}
	for i, tn := range ts {
		v, err := codec.View[int64](tn)
		if err != nil {
			t.Fatal(err)
		}
		if !codec.Aliases(v, tn) {
			t.Errorf("row %d: View copied: the cell is not aligned in the store", i)
		}
	}
}
