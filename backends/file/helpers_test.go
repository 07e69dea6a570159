package file

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/tqgo/tqgo/backends"
)

// dump is a state in a form to compare: equal states give equal dumps.
type dump struct {
	cells map[string]string
	logs  map[string]string
	next  uint64
}

func dumpOf(e *engine) dump {
	e.mu.RLock()
	defer e.mu.RUnlock()
	d := dump{cells: map[string]string{}, logs: map[string]string{}, next: e.st.next}
	for i := range e.st.cells {
		for k, en := range e.st.cells[i] {
			d.cells[k] = string(en.v)
		}
	}
	for name, l := range e.st.logs {
		var b strings.Builder
		fmt.Fprintf(&b, "snap %v %q start %v emptied %v\n", l.Snap != nil, l.Snap, l.Start, l.Emptied)
		for _, en := range l.Entries {
			fmt.Fprintf(&b, "%d %x %d %d %q\n", en.N, en.ID, en.Time, en.Base, en.Data)
		}
		d.logs[name] = b.String()
	}
	return d
}

// diff describes how two dumps differ ("" if alike).
func (d dump) diff(o dump) string {
	var b strings.Builder
	if d.next != o.next {
		fmt.Fprintf(&b, "next index %d, then %d\n", d.next, o.next)
	}
	for _, k := range slices.Sorted(maps.Keys(d.cells)) {
		if v, ok := o.cells[k]; !ok {
			fmt.Fprintf(&b, "cell %q lost\n", k)
		} else if v != d.cells[k] {
			fmt.Fprintf(&b, "cell %q changed\n", k)
		}
	}
	for k := range o.cells {
		if _, ok := d.cells[k]; !ok {
			fmt.Fprintf(&b, "cell %q appeared\n", k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(d.logs)) {
		if d.logs[k] != o.logs[k] {
			fmt.Fprintf(&b, "log %q:\n%s\nthen:\n%s\n", k, d.logs[k], o.logs[k])
		}
	}
	for k := range o.logs {
		if _, ok := d.logs[k]; !ok {
			fmt.Fprintf(&b, "log %q appeared\n", k)
		}
	}
	return b.String()
}

// engineOf is the engine behind an Engine Open returned.
func engineOf(eng backends.Engine) *engine { return eng.Data.(*store).e }

// checkReopen closes keep (the last reference to dir's engine: every other
// client closed) and reopens dir: the state must be the one closed.
func checkReopen(t *testing.T, dir string, o Options, keep backends.Engine) {
	t.Helper()
	e := engineOf(keep)
	registry.mu.Lock()
	refs := e.refs
	registry.mu.Unlock()
	if refs != 2 {
		t.Errorf("%d handles still open at the end", refs-2)
		return
	}
	before := dumpOf(e)
	if err := keep.Data.Close(); err != nil {
		t.Fatal(err)
	}
	if err := keep.Log.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := Open(context.Background(), dir, o)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer func() { _ = again.Data.Close(); _ = again.Log.Close() }()
	if d := before.diff(released(before, dumpOf(engineOf(again)))); d != "" {
		t.Errorf("the reopened engine differs:\n%s", d)
	}
}

// released is after without the records Open appended to end the claims
// of the engine closed (see releaseClaims): settles (K) after the
// entries before held.
func released(before, after dump) dump {
	for k, l := range after.logs {
		rest, ok := strings.CutPrefix(l, before.logs[k])
		if !ok {
			continue
		}
		settles := true
		for _, line := range strings.Split(strings.TrimSuffix(rest, "\n"), "\n") {
			settles = settles && (line == "" || strings.Contains(line, ` "K`))
		}
		if settles {
			after.logs[k] = before.logs[k]
		}
	}
	return after
}

// openT opens the engine over dir, closed at the test's end.
func openT(t testing.TB, dir string, o Options) backends.Engine {
	t.Helper()
	eng, err := Open(t.Context(), dir, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Data.Close(); _ = eng.Log.Close() })
	return eng
}
