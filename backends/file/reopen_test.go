package file

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
)

// workload writes cells, appends records, compacts and deletes, through
// eng, in steps: step i does a little of each.
func workload(t *testing.T, eng backends.Engine, steps int) {
	t.Helper()
	ctx := t.Context()
	lc := eng.Log.(backends.LogCells)
	from := map[string]backends.Pos{}
	for i := range steps {
		part := fmt.Sprintf("p%d", i%3)
		cells := []backends.Cell{
			{Key: fmt.Sprintf("%d@a", i), Head: []byte("h"), Body: []byte(fmt.Sprint("body", i))},
			{Key: fmt.Sprintf("%d@b", i%5), Body: make([]byte, i*37%300)}, // overwritten: the log outgrows the live data
		}
		if err := eng.Data.Write(ctx, cells[:1]); err != nil {
			t.Fatal(err)
		}
		recs := []backends.Record{{ID: uint64(i)*2 + 1, Indexes: uint64(i % 4), Data: []byte(fmt.Sprint("rec", i))}, {ID: uint64(i)*2 + 2}}
		tail, err := lc.AppendCells(ctx, part, from[part], cells[1:], recs)
		if err != nil {
			t.Fatal(err)
		}
		from[part] = tail.End(from[part])
		if i%5 == 4 {
			if err := eng.Log.Compact(ctx, part, from[part], []byte(fmt.Sprint("snap", i))); err != nil {
				t.Fatal(err)
			}
		}
		if i%7 == 6 {
			if err := eng.Data.Delete(ctx, []backends.Cell{{Key: fmt.Sprintf("%d@a", i-3)}, {Key: "missing"}}); err != nil {
				t.Fatal(err)
			}
		}
		if i%11 == 10 {
			if err := eng.Log.Compact(ctx, part, from[part], nil); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// reopen closes eng (the directory's only clients) and opens dir again.
func reopen(t *testing.T, dir string, o Options, eng backends.Engine) (backends.Engine, dump) {
	t.Helper()
	before := dumpOf(engineOf(eng))
	if err := errors.Join(eng.Data.Close(), eng.Log.Close()); err != nil {
		t.Fatal(err)
	}
	again := openT(t, dir, o)
	if d := before.diff(dumpOf(engineOf(again))); d != "" {
		t.Fatalf("reopened, the state differs:\n%s", d)
	}
	return again, before
}

// waitCheckpoints waits until e has written n checkpoints.
func waitCheckpoints(t *testing.T, e *engine, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.checkpoints.Load() < n || e.ckptRunning.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("%d checkpoints written in 10s, want %d", e.checkpoints.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// Everything written is there after a reopen, with and without
// checkpoints, and writes go on after it.
func TestReopen(t *testing.T) {
	for _, o := range []Options{{Sync: SyncNever}, {Sync: SyncAlways, CheckpointMin: 4 << 10}} {
		t.Run(o.String(), func(t *testing.T) {
			dir := t.TempDir()
			eng := openT(t, dir, o)
			workload(t, eng, 40)
			if o.CheckpointMin > 0 {
				waitCheckpoints(t, engineOf(eng), 1)
			}
			eng, _ = reopen(t, dir, o, eng)
			workload(t, eng, 30)
			eng, _ = reopen(t, dir, o, eng)
			if len(dumpOf(engineOf(eng)).cells) == 0 {
				t.Fatal("no cells")
			}
		})
	}
}

// A checkpoint replaces the segments before it: they are removed, and
// the directory holds the checkpoint and the segments after.
func TestCheckpointDropsSegments(t *testing.T) {
	dir := t.TempDir()
	o := Options{Sync: SyncNever, CheckpointMin: 1 << 10}
	eng := openT(t, dir, o)
	e := engineOf(eng)
	for i := range 3 {
		workload(t, eng, 20)
		waitCheckpoints(t, e, int64(i+1))
	}
	names := dirNames(t, dir)
	var ckpts, segs int
	for _, n := range names {
		var seq uint64
		switch {
		case scanName(n, "checkpoint-%016x.ckpt", &seq):
			ckpts++
		case scanName(n, "wal-%016x.log", &seq):
			segs++
		}
	}
	if ckpts != 1 || segs > 2 {
		t.Fatalf("after %d checkpoints the directory holds %v: want one checkpoint and the segments after it", e.checkpoints.Load(), names)
	}
	reopen(t, dir, o, eng)
}

func dirNames(t testing.TB, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

// lastSegment is the newest segment of dir.
func lastSegment(t *testing.T, dir string) string {
	t.Helper()
	var last string
	for _, n := range dirNames(t, dir) {
		var seq uint64
		if scanName(n, "wal-%016x.log", &seq) {
			last = filepath.Join(dir, n)
		}
	}
	if last == "" {
		t.Fatal("no segment")
	}
	return last
}

// frameOffsets returns where each frame of a segment begins, and its end.
func frameOffsets(t *testing.T, path string) []int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var offs []int64
	off := int64(segHeader)
	for off < int64(len(b)) {
		offs = append(offs, off)
		off += frameHeader + int64(binary.LittleEndian.Uint32(b[off:]))
	}
	return append(offs, off)
}

// dropCloseMark cuts the kindSynced frame Close wrote at the end of the
// segment at path.
func dropCloseMark(t *testing.T, path string) {
	t.Helper()
	offs := frameOffsets(t, path)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	last := offs[len(offs)-2]
	if b[last+frameHeader] != kindSynced {
		t.Fatalf("%s does not end in the mark Close writes", path)
	}
	if err := os.Truncate(path, last); err != nil {
		t.Fatal(err)
	}
}

// copyDir copies the files of src into a new directory.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	for _, n := range dirNames(t, src) {
		b, err := os.ReadFile(filepath.Join(src, n))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// A write torn by a crash, the newest segment cut anywhere inside its
// last record, is dropped whole on reopen: the state is the one before
// it, and the engine writes on.
func TestTornTail(t *testing.T) {
	dir := t.TempDir()
	o := Options{Sync: SyncNever}
	eng := openT(t, dir, o)
	workload(t, eng, 12)
	before := dumpOf(engineOf(eng))
	// The last record: cells and two log records, one frame.
	lc := eng.Log.(backends.LogCells)
	cells := []backends.Cell{{Key: "last@a", Body: []byte("the last write")}, {Key: "last@b", Body: make([]byte, 100)}}
	if _, err := lc.AppendCells(t.Context(), "p0", backends.Pos{}, cells, []backends.Record{{ID: 77, Indexes: 2, Data: []byte("last")}}); err != nil {
		t.Fatal(err)
	}
	after := dumpOf(engineOf(eng))
	if err := errors.Join(eng.Data.Close(), eng.Log.Close()); err != nil {
		t.Fatal(err)
	}
	seg := lastSegment(t, dir)
	// The state a crash leaves is the log without the mark Close writes
	// after its fsync (which would make a garbled record damage).
	dropCloseMark(t, seg)
	offs := frameOffsets(t, seg)
	start, end := offs[len(offs)-2], offs[len(offs)-1]
	for cut := start; cut <= end; cut++ {
		cdir := copyDir(t, dir)
		cseg := filepath.Join(cdir, filepath.Base(seg))
		if err := os.Truncate(cseg, cut); err != nil {
			t.Fatal(err)
		}
		e, err := Open(t.Context(), cdir, o)
		if err != nil {
			t.Fatalf("cut at %d of the last record [%d, %d): %v", cut, start, end, err)
		}
		want := before
		if cut == end {
			want = after
		}
		if d := want.diff(dumpOf(engineOf(e))); d != "" {
			t.Fatalf("cut at %d of the last record [%d, %d): state differs:\n%s", cut, start, end, d)
		}
		// It writes on, and that survives a reopen.
		if err := e.Data.Write(t.Context(), []backends.Cell{{Key: "later", Body: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
		again, _ := reopen(t, cdir, o, e)
		if err := errors.Join(again.Data.Close(), again.Log.Close()); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(cdir); err != nil {
			t.Fatal(err)
		}
	}
	// A garbled last record (a byte flipped, the length intact) is torn
	// too: nothing whole follows it.
	cdir := copyDir(t, dir)
	flip(t, filepath.Join(cdir, filepath.Base(seg)), end-3)
	e := openT(t, cdir, o)
	if d := before.diff(dumpOf(engineOf(e))); d != "" {
		t.Fatalf("last record garbled: state differs:\n%s", d)
	}
}

func flip(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b[:], off); err != nil {
		t.Fatal(err)
	}
}

// A record garbled in the middle of the log, or in a checkpoint, is
// corruption: Open fails naming the file and the record's offset, and
// applies nothing.
func TestCorrupt(t *testing.T) {
	dir := t.TempDir()
	o := Options{Sync: SyncNever}
	eng := openT(t, dir, o)
	workload(t, eng, 12)
	if err := errors.Join(eng.Data.Close(), eng.Log.Close()); err != nil {
		t.Fatal(err)
	}
	seg := lastSegment(t, dir)
	offs := frameOffsets(t, seg)
	for _, i := range []int{0, len(offs) / 2, len(offs) - 3} {
		cdir := copyDir(t, dir)
		cseg := filepath.Join(cdir, filepath.Base(seg))
		flip(t, cseg, offs[i]+frameHeader+1)
		_, err := Open(t.Context(), cdir, o)
		var ce *CorruptError
		if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
			t.Fatalf("record %d garbled: Open gave %v, want a CorruptError", i, err)
		}
		if ce.File != cseg || ce.Offset != offs[i] {
			t.Fatalf("record %d garbled: error names %s at %d, want %s at %d", i, ce.File, ce.Offset, cseg, offs[i])
		}
	}

	// A checkpoint's record.
	o = Options{Sync: SyncNever, CheckpointMin: 1}
	dir = t.TempDir()
	eng = openT(t, dir, o)
	workload(t, eng, 20)
	waitCheckpoints(t, engineOf(eng), 1)
	if err := errors.Join(eng.Data.Close(), eng.Log.Close()); err != nil {
		t.Fatal(err)
	}
	var ckpt string
	for _, n := range dirNames(t, dir) {
		var seq uint64
		if scanName(n, "checkpoint-%016x.ckpt", &seq) {
			ckpt = n
		}
	}
	cdir := copyDir(t, dir)
	flip(t, filepath.Join(cdir, ckpt), ckptHeader+frameHeader+3)
	if _, err := Open(t.Context(), cdir, o); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("checkpoint garbled: Open gave %v, want ErrCorrupt", err)
	}
	// Cut short.
	cdir = copyDir(t, dir)
	info, err := os.Stat(filepath.Join(cdir, ckpt))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(cdir, ckpt), info.Size()-1); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(t.Context(), cdir, o); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("checkpoint cut short: Open gave %v, want ErrCorrupt", err)
	}
}

// Opens of one directory in one process share one engine, closed with
// the last client; a second lock on the directory (another process's)
// is refused.
func TestShared(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	a, err := Open(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(ctx, filepath.Join(dir, "..", filepath.Base(dir)), Options{Sync: DefaultSync})
	if err != nil {
		t.Fatal(err)
	}
	if engineOf(a) != engineOf(b) {
		t.Fatal("two Opens of one directory opened two engines")
	}
	if _, err := Open(ctx, dir, Options{Sync: SyncAlways}); !errors.Is(err, backends.ErrInvalid) {
		t.Fatalf("Open with other options: %v, want ErrInvalid", err)
	}
	if _, err := lockDir(dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("a second lock: %v, want ErrLocked", err)
	}
	if err := a.Data.Write(ctx, []backends.Cell{{Key: "k", Body: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(a.Data.Close(), a.Log.Close()); err != nil {
		t.Fatal(err)
	}
	if err := a.Data.Write(ctx, []backends.Cell{{Key: "k", Body: []byte("v")}}); !errors.Is(err, backends.ErrClosed) {
		t.Fatalf("Write on a closed client: %v", err)
	}
	rc := []backends.ReadCell{{Key: "k"}}
	if err := b.Data.Read(ctx, rc); err != nil || !rc[0].Found || string(rc[0].Value) != "v" {
		t.Fatalf("the other client reads %q %v %v", rc[0].Value, rc[0].Found, err)
	}
	if err := errors.Join(b.Data.Close(), b.Log.Close()); err != nil {
		t.Fatal(err)
	}
	unlock, err := lockDir(dir)
	if err != nil {
		t.Fatalf("the last Close left the directory locked: %v", err)
	}
	if err := unlock(); err != nil {
		t.Fatal(err)
	}
	registry.mu.Lock()
	n := len(registry.m)
	registry.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d engines left open", n)
	}
}

func TestParseURL(t *testing.T) {
	for _, c := range []struct {
		url, dir string
		o        Options
		bad      bool
	}{
		{url: "file:///var/lib/tq", dir: "/var/lib/tq"},
		{url: "file://localhost/var/lib/tq?sync=always", dir: "/var/lib/tq", o: Options{Sync: SyncAlways}},
		{url: "file:tq-job", dir: "tq-job"},
		{url: "file:./a/b/?sync=never&checkpoint=1MiB", dir: "a/b", o: Options{Sync: SyncNever, CheckpointMin: 1 << 20}},
		{url: "file:///d?sync=everysec", dir: "/d", o: Options{Sync: SyncEvery(time.Second)}},
		{url: "file:///d?sync=100ms", dir: "/d", o: Options{Sync: SyncEvery(100 * time.Millisecond)}},
		{url: "file:///d%20x", dir: "/d x"},
		{url: "file://", bad: true},
		{url: "file://host/d", bad: true},
		{url: "file:///d?sync=sometimes", bad: true},
		{url: "file:///d?sync=-1s", bad: true},
		{url: "file:///d?checkpoint=0", bad: true},
		{url: "file:///d?other=1", bad: true},
	} {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		dir, o, err := ParseURL(u)
		switch {
		case c.bad && !errors.Is(err, backends.ErrInvalid):
			t.Errorf("%s: %v, want ErrInvalid", c.url, err)
		case !c.bad && err != nil:
			t.Errorf("%s: %v", c.url, err)
		case !c.bad && (dir != filepath.FromSlash(c.dir) || !o.same(c.o) || o.Sync != c.o.Sync):
			t.Errorf("%s: %q %v, want %q %v", c.url, dir, o, c.dir, c.o)
		}
	}
}

// The scheme is registered: backends.Open knows file://.
func TestRegistered(t *testing.T) {
	dir := t.TempDir()
	eng, err := backends.Open(t.Context(), "file://"+filepath.ToSlash(dir)+"?sync=never")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = eng.Data.Close(); _ = eng.Log.Close() }()
	if !eng.Local || eng.Log == nil || eng.Meta != nil {
		t.Fatalf("engine %+v: want Local with a Log", eng)
	}
}

// A failed write stops the engine's writes (fail-stop): the write's
// error says whether it may have reached the log, later writes fail
// with ErrFailed, reads go on, and a reopen recovers what was written
// before.
func TestFailStop(t *testing.T) {
	dir := t.TempDir()
	o := Options{Sync: SyncNever}
	eng, err := Open(t.Context(), dir, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := eng.Data.Write(ctx, []backends.Cell{{Key: "before", Body: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	want := dumpOf(engineOf(eng))
	// The segment's file, swapped under the writer for one it cannot
	// write to (a disk gone bad): writes fail, and so does cutting back.
	e := engineOf(eng)
	ro, err := os.Open(e.seg.Name())
	if err != nil {
		t.Fatal(err)
	}
	e.qmu.Lock() // the writer is idle: nothing queued
	e.segMu.Lock()
	good := e.seg
	e.seg = ro
	e.segMu.Unlock()
	e.qmu.Unlock()
	err = eng.Data.Write(ctx, []backends.Cell{{Key: "lost", Body: []byte("v")}})
	if !errors.Is(err, ErrFailed) || !errors.Is(err, backends.ErrOutcomeUnknown) {
		t.Fatalf("a write that failed and could not be cut back: %v, want ErrFailed and ErrOutcomeUnknown", err)
	}
	_, err = eng.Log.Append(ctx, "p", backends.Pos{}, []backends.Record{{ID: 1}})
	if !errors.Is(err, ErrFailed) || errors.Is(err, backends.ErrOutcomeUnknown) {
		t.Fatalf("a later append: %v, want ErrFailed alone (nothing written)", err)
	}
	rc := []backends.ReadCell{{Key: "before"}, {Key: "lost"}}
	if err := eng.Data.Read(ctx, rc); err != nil || !rc[0].Found || rc[1].Found {
		t.Fatalf("reads after the failure: %v, found %v %v", err, rc[0].Found, rc[1].Found)
	}
	e.segMu.Lock()
	e.seg = good
	e.segMu.Unlock()
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(eng.Data.Close(), eng.Log.Close()); err != nil {
		t.Fatal(err)
	}
	again := openT(t, dir, o)
	if d := want.diff(dumpOf(engineOf(again))); d != "" {
		t.Fatalf("reopened after the failure:\n%s", d)
	}
}

// A write whose context ends while it waits for the disk reports its
// outcome unknown, and the engine goes on.
func TestWriteContextEnds(t *testing.T) {
	eng := openT(t, t.TempDir(), Options{Sync: SyncNever})
	e := engineOf(eng)
	ctx, cancel := context.WithCancel(t.Context())
	e.qmu.Lock() // hold the writer back
	done := make(chan error, 1)
	go func() { done <- eng.Data.Write(ctx, []backends.Cell{{Key: "k", Body: []byte("v")}}) }()
	time.Sleep(10 * time.Millisecond)
	e.qmu.Unlock()
	cancel()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, backends.ErrOutcomeUnknown) {
			t.Fatalf("write: %v, want nil or ErrOutcomeUnknown", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("write did not return")
	}
	if err := eng.Data.Write(t.Context(), []backends.Cell{{Key: "k2", Body: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
}

// A segment written in a recycled file holds, past its own frames, those
// of the file's former life: they read as a torn tail, cut on reopen,
// and nothing of them applies.
func TestRecycledSegment(t *testing.T) {
	dir := t.TempDir()
	o := Options{Sync: SyncEvery(time.Millisecond), CheckpointMin: 1 << 10}
	eng := openT(t, dir, o)
	e := engineOf(eng)
	for i := 0; e.reused.Load() < 2; i++ {
		if i == 50 {
			t.Fatalf("no segment reused after %d checkpoints", e.checkpoints.Load())
		}
		workload(t, eng, 20)
		waitCheckpoints(t, e, int64(i+1))
	}
	// Reopened with no checkpoint due, the engine starts its segment in a
	// recycled file: a little written into it, its former frames follow.
	quiet := Options{Sync: o.Sync, CheckpointMin: 1 << 30}
	eng, _ = reopen(t, dir, quiet, eng)
	e = engineOf(eng)
	if e.reused.Load() != 1 {
		t.Fatalf("reopened, %d segments started in recycled files, want 1", e.reused.Load())
	}
	if err := eng.Data.Write(t.Context(), []backends.Cell{{Key: "small", Body: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	seg := lastSegment(t, dir)
	e.segMu.Lock()
	written := e.segSize
	e.segMu.Unlock()
	if info, err := os.Stat(seg); err != nil || info.Size() <= written {
		t.Fatalf("the recycled segment: %v, want more than the %d bytes written (its former frames)", err, written)
	}
	again, _ := reopen(t, dir, quiet, eng)
	info, err := os.Stat(seg)
	if err != nil {
		t.Fatal(err)
	}
	const mark = frameHeader + 1 + 8 + stampSize // Close's kindSynced frame
	if info.Size() != written+mark {
		t.Fatalf("the recycled segment %s is %d bytes after reopen, %d were written to it (and Close's mark)", seg, info.Size(), written)
	}
	if got := engineOf(again).truncated; len(got) != 1 {
		t.Fatalf("cut on reopen: %v, want the recycled segment's former frames", got)
	}
	workload(t, again, 10)
	reopen(t, dir, quiet, again)
}
