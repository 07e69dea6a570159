package file

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
)

// A checkpoint that does not complete (it fails, or the process dies while
// it runs) leaves the segment before it on disk; a segment in a recycled
// file is cut at its own end when the next one begins, so that its former
// frames are not read as damage and Open recovers everything.
func TestStaleTailOfAnOlderSegment(t *testing.T) {
	dir := t.TempDir()
	o := Options{Sync: SyncEvery(time.Millisecond), CheckpointMin: 1 << 10}
	eng := openT(t, dir, o)
	e := engineOf(eng)
	for i := 0; e.reused.Load() < 2; i++ {
		if i == 50 {
			t.Fatal("no reuse")
		}
		workload(t, eng, 20)
		waitCheckpoints(t, e, int64(i+1))
	}
	if err := errors.Join(eng.Data.Close(), eng.Log.Close()); err != nil {
		t.Fatal(err)
	}
	eng = openT(t, dir, o) // its segment: a recycled file, former frames past its end
	e = engineOf(eng)
	t.Logf("reopened: reused=%d %v", e.reused.Load(), dirNames(t, dir))
	// The next checkpoint fails (as on ENOSPC or EIO writing its temp file).
	if err := os.Mkdir(filepath.Join(dir, ckptTemp), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; e.ckptErr.Load() == nil; i++ {
		if i == 50 {
			t.Fatal("no checkpoint attempted")
		}
		workload(t, eng, 5)
		WaitCheckpointIdle(eng)
	}
	t.Logf("checkpoint failed: %v; dir %v", *e.ckptErr.Load(), dirNames(t, dir))
	want := dumpOf(e)
	if err := errors.Join(eng.Data.Close(), eng.Log.Close()); err != nil {
		t.Fatal(err)
	}
	again, err := Open(t.Context(), dir, o)
	if err != nil {
		t.Fatalf("reopen after a failed checkpoint and a clean Close: %v", err)
	}
	defer func() { _ = again.Data.Close(); _ = again.Log.Close() }()
	if d := want.diff(dumpOf(engineOf(again))); d != "" {
		t.Fatal(d)
	}
}

// A batch queued while a write was failing is not written after the
// failure: it fails, definitely, as every later write does (fail-stop).
func TestNoAckAfterFailure(t *testing.T) {
	dir := t.TempDir()
	eng := openT(t, dir, Options{Sync: SyncAlways})
	e := engineOf(eng)
	ctx := t.Context()
	if err := eng.Data.Write(ctx, []backends.Cell{{Key: "before", Body: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	e.segMu.Lock()
	good := e.seg
	e.seg = w // a disk that hangs, then fails
	e.segMu.Unlock()
	errA := make(chan error, 1)
	go func() {
		errA <- eng.Data.Write(ctx, []backends.Cell{{Key: "A", Body: make([]byte, 1<<20)}})
	}()
	// The writer is writing A once the pipe has its first byte (and it
	// stays blocked: A is far more than the pipe holds), so that B queues
	// behind it rather than joining its batch.
	if _, err := r.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	errB := make(chan error, 1)
	go func() { errB <- eng.Data.Write(ctx, []backends.Cell{{Key: "B", Body: []byte("v")}}) }()
	for deadline := time.Now().Add(10 * time.Second); ; {
		e.qmu.Lock()
		n := len(e.queue)
		e.qmu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("B not queued behind A in 10 s (queue %d)", n)
		}
		time.Sleep(time.Millisecond)
	}
	_ = r.Close() // A's write fails: EPIPE
	a, b := <-errA, <-errB
	c := eng.Data.Write(ctx, []backends.Cell{{Key: "C", Body: []byte("v")}})
	e.segMu.Lock()
	e.seg = good // the writer is idle: A, B and C were answered
	e.segMu.Unlock()
	_ = w.Close()
	for name, err := range map[string]error{"A (its write failed)": a, "B (queued before the failure)": b, "C (after it)": c} {
		if !errors.Is(err, ErrFailed) {
			t.Errorf("%s: %v, want ErrFailed", name, err)
		}
	}
	if errors.Is(b, backends.ErrOutcomeUnknown) {
		t.Errorf("B, never written: %v, want a definite failure", b)
	}
}
