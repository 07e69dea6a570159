package file

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/tqgo/tqgo/backends"
)

// View says what a read-only engine (Options.ReadOnly, mode=ro) holds:
// the directory's state as of its open, which the engine never updates.
type View struct {
	// Dir is the directory (absolute, symlinks resolved).
	Dir string
	// AsOf is the time of the last record the view read (the writer's
	// clock as it queued it; zero if the directory held none): the
	// view holds every write acknowledged before it.
	AsOf time.Time
	// Segment is the newest log segment read ("" if none), and Offset
	// where the view stopped in it: its end as the open found it, or a
	// record the writer had not finished writing (0 in a segment the
	// writer is starting, its header not written yet).
	Segment string
	Offset  int64
	// Tries is how many times the open read the directory: more than
	// once when a checkpoint of the writer's replaced files as it read.
	Tries int
}

// String says what the view is and how fresh: "a read-only view of DIR
// as of 04:27:59.372 UTC (2026-12-07), log position wal-….log offset 473".
func (v View) String() string {
	return fmt.Sprintf("a read-only view of %s %s", v.Dir, v.Freshness())
}

// Freshness says how fresh the view is: "as of 04:27:59.372 UTC
// (2026-12-07), log position wal-….log offset 473".
func (v View) Freshness() string {
	at := "no record"
	if !v.AsOf.IsZero() {
		at = v.AsOf.UTC().Format("15:04:05.000 UTC (2006-01-02)")
	}
	pos := "no log"
	if v.Segment != "" {
		pos = fmt.Sprintf("%s offset %d", filepath.Base(v.Segment), v.Offset)
	}
	return fmt.Sprintf("as of %s, log position %s", at, pos)
}

// ViewOf returns the View of eng if Open opened it read-only (false
// otherwise, or if eng is not this package's).
func ViewOf(eng backends.Engine) (View, bool) {
	var e *engine
	switch d := eng.Data.(type) {
	case *store:
		e = d.e
	default:
		return View{}, false
	}
	if !e.readOnly {
		return View{}, false
	}
	return e.view, true
}

// viewTries bounds how many times a read-only open reads a directory a
// checkpoint keeps changing.
const viewTries = 8

// openView reads dir's state without writing anything. A checkpoint
// running meanwhile in the holder may remove or recycle a segment the
// open lists or reads: when the read fails and the directory's names
// changed while it read, it reads again, up to viewTries times.
func openView(dir string, o Options) (*engine, error) {
	abs, err := filepath.Abs(dir)
	if err == nil {
		abs, err = filepath.EvalSymlinks(abs)
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: file: a read-only view of %s: no such directory (%v)", backends.ErrInvalid, dir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("file: a read-only view of %s: %w", dir, err)
	}
	if info, err := os.Stat(abs); err != nil || !info.IsDir() {
		return nil, fmt.Errorf("%w: file: a read-only view of %s: not a directory", backends.ErrInvalid, abs)
	}
	o = o.withDefaults()
	for try := 1; ; try++ {
		before, lerr := listNames(abs)
		e := &engine{dir: abs, opts: o, fs: defaultFS, readOnly: true, wakes: map[string]chan struct{}{},
			kick: make(chan struct{}, 1), stop: make(chan struct{})}
		e.st = newState(&e.frames)
		e.clock = o.clock
		if lerr == nil {
			_, err = e.recoverDir()
		} else {
			err = lerr
		}
		if err == nil {
			e.view.Dir, e.view.Tries = abs, try
			if e.lastStamp != 0 {
				e.view.AsOf = time.UnixMicro(e.lastStamp)
			}
			return e, nil
		}
		after, lerr := listNames(abs)
		if lerr != nil || slices.Equal(before, after) && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("file: a read-only view of %s: %w", abs, err)
		}
		if try == viewTries {
			return nil, fmt.Errorf("file: a read-only view of %s: the directory changed under each of %d reads (the holder's checkpoints replacing its files); try again: %w", abs, try, err)
		}
	}
}

// listNames lists the names of dir's checkpoints and segments, sorted.
func listNames(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, de := range entries {
		var n uint64
		if name := de.Name(); scanName(name, "wal-%016x.log", &n) || scanName(name, "checkpoint-%016x.ckpt", &n) || scanName(name, "recycle-%016x.log", &n) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names, nil
}

// closeView closes a read-only engine: it holds no file open.
func (e *engine) closeView() error {
	e.qmu.Lock()
	e.closed = true
	e.qmu.Unlock()
	close(e.stop)
	e.mu.Lock()
	for p, ch := range e.wakes {
		close(ch)
		delete(e.wakes, p)
	}
	e.mu.Unlock()
	return nil
}
