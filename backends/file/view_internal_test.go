package file

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tqgo/tqgo/backends"
)

// vanishFS fails the opening of a segment for reading with
// os.ErrNotExist the first fail times, each time adding a recycled
// segment's name to the directory: what a checkpoint of a holder does to
// a reader that listed the directory before it.
type vanishFS struct {
	osFS
	dir  string
	fail int
	n    int
}

func (f *vanishFS) OpenFile(name string, flag int, perm os.FileMode) (fsFile, error) {
	var seq uint64
	if flag == os.O_RDONLY && scanName(filepath.Base(name), "wal-%016x.log", &seq) && f.n < f.fail {
		f.n++
		if err := os.WriteFile(filepath.Join(f.dir, recycleName(uint64(1000+f.n))), nil, 0o644); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("open %s: %w", name, os.ErrNotExist)
	}
	return f.osFS.OpenFile(name, flag, perm)
}

// A view holds what the holder holds, as of its open, read again when
// the directory's files change under it, up to viewTries times.
func TestViewRetries(t *testing.T) {
	dir := t.TempDir()
	eng := openT(t, dir, Options{CheckpointMin: 4 << 10})
	ctx := t.Context()
	for i := range 50 {
		k := fmt.Sprintf("k%d", i)
		if err := eng.Data.Write(ctx, []backends.Cell{{Key: k, Body: make([]byte, 512)}}); err != nil {
			t.Fatal(err)
		}
		if _, err := eng.Log.Append(ctx, "p", backends.Pos{}, []backends.Record{{ID: uint64(i + 1), Data: []byte(k)}}); err != nil {
			t.Fatal(err)
		}
		if i%3 != 0 {
			if err := eng.Data.Delete(ctx, []backends.Cell{{Key: k}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	WaitCheckpointIdle(eng)
	if engineOf(eng).checkpoints.Load() == 0 {
		t.Fatal("no checkpoint written: the view would read the log alone")
	}
	want := dumpOf(engineOf(eng))

	defer func() { defaultFS = osFS{} }()
	for _, c := range []struct {
		fail      int
		wantTries int // 0: the open fails
	}{{0, 1}, {1, 2}, {viewTries - 1, viewTries}, {viewTries, 0}} {
		defaultFS = &vanishFS{dir: dir, fail: c.fail}
		view, err := Open(ctx, dir, Options{ReadOnly: true})
		if c.wantTries == 0 {
			if err == nil || !strings.Contains(err.Error(), "changed under each") {
				t.Errorf("%d failed reads: %v, want the open to fail saying the directory kept changing", c.fail, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%d failed reads: %v", c.fail, err)
		}
		v, _ := ViewOf(view)
		if v.Tries != c.wantTries {
			t.Errorf("%d failed reads: %d tries, want %d", c.fail, v.Tries, c.wantTries)
		}
		if d := want.diff(dumpOf(engineOf(view))); d != "" {
			t.Errorf("%d failed reads: the view differs from the holder:\n%s", c.fail, d)
		}
		_ = view.Data.Close()
		_ = view.Log.Close()
	}
}
