package file

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
)

// killState copies dir as a kill -9 of the engine open on it leaves it:
// every file as written, in the page cache.
func killState(t *testing.T, dir string) string {
	t.Helper()
	return copyDir(t, dir)
}

// writeRecords writes n cells of 5000 bytes, one batch each (each
// record on pages of its own), and returns the segment's frame offsets
// after the header as the files are now.
func writeRecords(t *testing.T, eng backends.Engine, n int) {
	t.Helper()
	for i := range n {
		if err := eng.Data.Write(t.Context(), []backends.Cell{{Key: fmt.Sprintf("k%d", i), Body: make([]byte, 5000)}}); err != nil {
			t.Fatal(err)
		}
	}
}

// zero overwrites path's bytes [from, to) with zeros: pages a crash of
// the machine did not write back.
func zero(t *testing.T, path string, from, to int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, to-from), from); err != nil {
		t.Fatal(err)
	}
}

// A crash of the machine may write back the pages written since the last
// fsync in any order: a record there that never reached the disk, with a
// whole one after it, is a torn tail, cut on reopen with what follows it.
// Where the log says the bytes were fsynced (under sync=always, every
// batch before the last), the same bad record is damage.
func TestUnsyncedPagesOutOfOrder(t *testing.T) {
	for _, tc := range []struct {
		o      Options
		damage bool
	}{
		{Options{Sync: SyncEvery(time.Hour)}, false},
		{Options{Sync: SyncNever}, false},
		{Options{Sync: SyncAlways}, true},
	} {
		t.Run(tc.o.Sync.String(), func(t *testing.T) {
			dir := t.TempDir()
			eng := openT(t, dir, tc.o)
			writeRecords(t, eng, 3)
			cdir := killState(t, dir)
			seg := filepath.Join(cdir, filepath.Base(lastSegment(t, dir)))
			offs := frameOffsets(t, seg)
			// The second data record's bytes are lost but for its first
			// hundred (its length intact, on a page written back); the
			// third's are on the disk. (Under sync=always, a mark precedes
			// each batch after the first: skip it.)
			var recs []int
			b, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < len(offs)-1; i++ {
				if b[offs[i]+frameHeader] == kindWrite {
					recs = append(recs, i)
				}
			}
			if len(recs) != 3 {
				t.Fatalf("%d write records in the segment, want 3", len(recs))
			}
			lost := recs[1]
			zero(t, seg, offs[lost]+100, offs[lost+1])
			e, err := Open(t.Context(), cdir, tc.o)
			if tc.damage {
				var ce *CorruptError
				if !errors.As(err, &ce) || ce.Offset != offs[lost] {
					t.Fatalf("a record lost where the log says it was fsynced: Open gave %v, want a CorruptError at %d", err, offs[lost])
				}
				return
			}
			if err != nil {
				t.Fatalf("a record lost in the unsynced tail, one after it whole: %v", err)
			}
			defer func() { _ = e.Data.Close(); _ = e.Log.Close() }()
			rc := []backends.ReadCell{{Key: "k0"}, {Key: "k1"}, {Key: "k2"}}
			if err := e.Data.Read(t.Context(), rc); err != nil {
				t.Fatal(err)
			}
			if !rc[0].Found || rc[1].Found || rc[2].Found {
				t.Fatalf("found %v %v %v, want the first record alone (cut at the lost one)", rc[0].Found, rc[1].Found, rc[2].Found)
			}
		})
	}
}

// A newest segment whose size reached the disk before its header (zeros
// where the header goes, nothing whole after it) is a segment a crash
// interrupted as it began: Open drops it and recovers the rest. With a
// record after it that the log says was fsynced, it is damage.
func TestNewestSegmentHeaderNotOnDisk(t *testing.T) {
	dir := t.TempDir()
	o := Options{Sync: SyncAlways}
	eng := openT(t, dir, o)
	writeRecords(t, eng, 2)
	want := dumpOf(engineOf(eng))
	cdir := killState(t, dir)
	seg := lastSegment(t, cdir)
	var seq uint64
	if !scanName(filepath.Base(seg), "wal-%016x.log", &seq) {
		t.Fatal(seg)
	}
	next := filepath.Join(cdir, segName(seq+1))
	if err := os.WriteFile(next, make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	e, err := Open(t.Context(), cdir, o)
	if err != nil {
		t.Fatalf("a newest segment of zeros: %v", err)
	}
	if d := want.diff(dumpOf(engineOf(e))); d != "" {
		t.Fatalf("state differs:\n%s", d)
	}
	if err := e.Data.Write(t.Context(), []backends.Cell{{Key: "later", Body: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(e.Data.Close(), e.Log.Close()); err != nil {
		t.Fatal(err)
	}

	// The newest segment's header zeroed, its records (and a mark that
	// says they were fsynced) whole: damage.
	cdir = killState(t, dir)
	zero(t, filepath.Join(cdir, filepath.Base(seg)), 0, segHeader)
	if _, err := Open(t.Context(), cdir, o); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a fsynced segment's header zeroed: Open gave %v, want ErrCorrupt", err)
	}
}

// A checkpoint is on the disk only once the log records whose writes it
// holds are: the cells are copied after the checkpoint's segment began,
// so a row cleared meanwhile is gone from the checkpoint, and a crash of
// the machine that kept the checkpoint but lost the log's unsynced
// second would list the row with its cells gone. Here a row is cleared
// (its log record, then its cells' delete) just as a checkpoint starts
// copying, under sync=everysec; the state a crash leaves with only what
// was fsynced must hold the clear, or the cells.
func TestCheckpointAfterItsRecords(t *testing.T) {
	dir := t.TempDir()
	rec := newRecFS()
	defaultFS = rec
	defer func() { defaultFS = osFS{} }()
	o := Options{Sync: SyncEvery(time.Hour), CheckpointMin: 1}
	eng := openT(t, dir, o)
	ctx := t.Context()
	lc := eng.Log.(backends.LogCells)
	if _, err := lc.AppendCells(ctx, "p", backends.Pos{}, []backends.Cell{{Key: "row@a", Body: make([]byte, 64)}}, []backends.Record{{ID: 1, Indexes: 1, Data: []byte("put")}}); err != nil {
		t.Fatal(err)
	}
	cleared := make(chan error, 1)
	var once sync.Once
	rec.onOpen = func(name string) {
		if filepath.Base(name) != ckptTemp {
			return
		}
		once.Do(func() {
			_, err := eng.Log.Append(ctx, "p", backends.Pos{}, []backends.Record{{ID: 2, Data: []byte("clear")}})
			if err == nil {
				err = eng.Data.Delete(ctx, []backends.Cell{{Key: "row@a"}})
			}
			cleared <- err
		})
	}
	e := engineOf(eng)
	for i := 0; e.checkpoints.Load() == 0; i++ {
		if i == 1000 {
			t.Fatal("no checkpoint")
		}
		if err := eng.Data.Write(ctx, []backends.Cell{{Key: "filler", Body: make([]byte, 512)}}); err != nil {
			t.Fatal(err)
		}
		if err := eng.Data.Delete(ctx, []backends.Cell{{Key: "filler"}}); err != nil {
			t.Fatal(err)
		}
		WaitCheckpointIdle(eng)
	}
	if err := <-cleared; err != nil {
		t.Fatal(err)
	}
	st := rec.states(rec.Len(), nil, 1)[0] // what was fsynced
	cdir := t.TempDir()
	if err := st.materialize(cdir); err != nil {
		t.Fatal(err)
	}
	defaultFS = osFS{}
	again := openT(t, cdir, o)
	tail, err := again.Log.Read(ctx, "p", backends.Pos{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	clearKept := false
	for _, en := range tail.Entries {
		clearKept = clearKept || string(en.Data) == "clear"
	}
	rc := []backends.ReadCell{{Key: "row@a"}}
	if err := again.Data.Read(ctx, rc); err != nil {
		t.Fatal(err)
	}
	if !clearKept && !rc[0].Found {
		t.Fatalf("after a crash: the row's put is in the log, its clear is not, and its cell is gone (files %v)", dirNames(t, cdir))
	}
}
