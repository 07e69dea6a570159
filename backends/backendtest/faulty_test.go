package backendtest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest"
	"github.com/tqgo/tqgo/backends/backendtest/toykv"
	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/backends/metadata"
)

func cellsN(prefix string, n int) []backends.Cell {
	out := make([]backends.Cell, n)
	for i := range out {
		out[i] = backends.Cell{Key: fmt.Sprint(prefix, i), Body: []byte{byte(i)}}
	}
	return out
}

// present reports which of cells' keys s holds.
func present(t *testing.T, s backends.Store, cells []backends.Cell) []bool {
	t.Helper()
	rc := make([]backends.ReadCell, len(cells))
	for i, c := range cells {
		rc[i] = backends.ReadCell{Key: c.Key}
	}
	if err := s.Read(t.Context(), rc); err != nil {
		t.Fatal(err)
	}
	out := make([]bool, len(rc))
	for i, c := range rc {
		out[i] = c.Found
	}
	return out
}

// Wrap keeps each capability the inner engine has and adds none, for
// every combination of a Stager or plain Store and a Colocated, plain or
// nil MetaStore; the calls reach the inner engine and are counted.
func TestWrapCapabilities(t *testing.T) {
	ctx := t.Context()
	for _, stages := range []bool{false, true} {
		for _, meta := range []string{"nil", "plain", "colocated"} {
			t.Run(fmt.Sprintf("stager=%v,meta=%s", stages, meta), func(t *testing.T) {
				mem := memory.New()
				eng := backends.Engine{Data: backends.FromKV(toykv.New()), Local: true}
				if stages {
					eng.Data = mem
				}
				switch meta {
				case "plain":
					eng.Meta = memory.NewMetaStore()
				case "colocated":
					eng = newColo(t)
					if !stages {
						eng.Data = struct{ backends.Store }{eng.Data}
					}
				}
				f := new(backendtest.Faulty)
				w := backendtest.Wrap(eng, f)
				if w.Local != eng.Local {
					t.Errorf("Wrap: Local %v, want %v", w.Local, eng.Local)
				}
				st, isStager := w.Data.(backends.Stager)
				if isStager != stages {
					t.Fatalf("Wrap: Data is a Stager: %v, want %v", isStager, stages)
				}
				if (w.Meta == nil) != (meta == "nil") {
					t.Fatalf("Wrap: Meta %v, want nil: %v", w.Meta, meta == "nil")
				}
				c, isColo := w.Meta.(metadata.Colocated)
				if isColo != (meta == "colocated") {
					t.Fatalf("Wrap: Meta is a Colocated: %v, want %v", isColo, meta == "colocated")
				}
				cells := cellsN("k", 3)
				if stages {
					if err := st.Stage(ctx, cells, []int{1, 2, 3}); err != nil {
						t.Fatal(err)
					}
				}
				if err := w.Data.Write(ctx, cells); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(present(t, eng.Data, cells), []bool{true, true, true}) {
					t.Error("a wrapped Write did not reach the inner Store")
				}
				if stages {
					st.Unstage(cells)
					if f.Calls(backendtest.OpStage) != 1 || f.Calls(backendtest.OpUnstage) != 1 {
						t.Errorf("Stage, Unstage counted %d, %d times, want 1, 1", f.Calls(backendtest.OpStage), f.Calls(backendtest.OpUnstage))
					}
				}
				if w.Meta == nil {
					return
				}
				res, err := w.Meta.(metadata.MetaStore).Prepare(ctx, "p", []string{"a"}, []string{"f"}, nil)
				if err != nil {
					t.Fatal(err)
				}
				up := []metadata.RowUpdate{{Key: "a", Index: res[0].Index, Fields: map[string]metadata.FieldInfo{"f": {Gen: res[0].Gens["f"]}}}}
				if isColo {
					if _, err := c.WriteCommit(ctx, "p", cellsN("c", 1), up); err != nil {
						t.Fatal(err)
					}
					var saw []*metadata.Row
					rows, err := c.ReadRows(ctx, "p", []string{"a"}, func(r []*metadata.Row) ([]backends.ReadCell, error) { saw = r; return nil, nil })
					if err != nil || len(rows) != 1 || rows[0] == nil || saw[0] != rows[0] {
						t.Fatalf("wrapped ReadRows: %v, %v: want the committed row plan saw", rows, err)
					}
					if f.Calls(backendtest.OpWriteCommit) != 1 || f.Calls(backendtest.OpReadRows) != 1 {
						t.Errorf("WriteCommit, ReadRows counted %d, %d times, want 1, 1", f.Calls(backendtest.OpWriteCommit), f.Calls(backendtest.OpReadRows))
					}
				} else if _, err := w.Meta.(metadata.MetaStore).Commit(ctx, "p", up); err != nil {
					t.Fatal(err)
				}
				if rows, err := eng.Meta.(metadata.MetaStore).Lookup(ctx, "p", []string{"a"}); err != nil || rows[0] == nil {
					t.Errorf("the wrapped commit did not reach the inner MetaStore: %v, %v", rows, err)
				}
				if f.Calls(backendtest.OpPrepare) != 1 {
					t.Errorf("Prepare counted %d times, want 1", f.Calls(backendtest.OpPrepare))
				}
			})
		}
	}
}

func TestFaultyFailNth(t *testing.T) {
	ctx := t.Context()
	inner := newMemory(t)
	f := new(backendtest.Faulty)
	w := backendtest.Wrap(inner, f)
	sentinel := errors.New("boom")
	f.FailNth(backendtest.OpWrite, 2, sentinel)
	f.FailNth(backendtest.OpCommit, 1, nil)
	a, b, c := cellsN("a", 2), cellsN("b", 2), cellsN("c", 2)
	if err := w.Data.Write(ctx, a); err != nil {
		t.Fatalf("first Write: %v", err)
	}
	if err := w.Data.Write(ctx, b); !errors.Is(err, sentinel) {
		t.Fatalf("second Write: %v, want the injected error", err)
	}
	if err := w.Data.Write(ctx, c); err != nil {
		t.Fatalf("third Write: %v", err)
	}
	if got := present(t, inner.Data, slices.Concat(a, b, c)); !slices.Equal(got, []bool{true, true, false, false, true, true}) {
		t.Errorf("present after the second Write failed: %v, want it to have reached nothing", got)
	}
	res, err := w.Meta.(metadata.MetaStore).Prepare(ctx, "p", []string{"k"}, []string{"f"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	up := []metadata.RowUpdate{{Key: "k", Index: res[0].Index, Fields: map[string]metadata.FieldInfo{"f": {}}}}
	if _, err := w.Meta.(metadata.MetaStore).Commit(ctx, "p", up); !errors.Is(err, backendtest.ErrInjected) {
		t.Fatalf("Commit: %v, want ErrInjected", err)
	}
	if rows, _ := inner.Meta.(metadata.MetaStore).Lookup(ctx, "p", []string{"k"}); rows[0] != nil {
		t.Error("a failed Commit reached the inner MetaStore")
	}
	if _, err := w.Meta.(metadata.MetaStore).Commit(ctx, "p", up); err != nil {
		t.Fatalf("Commit after the fault: %v", err)
	}
}

// FailAfter lets the call through and loses its reply.
func TestFaultyFailAfter(t *testing.T) {
	ctx := t.Context()
	inner := newMemory(t)
	f := new(backendtest.Faulty)
	w := backendtest.Wrap(inner, f)
	f.FailAfter(backendtest.OpCommit, 1, backends.ErrOutcomeUnknown)
	res, err := w.Meta.(metadata.MetaStore).Prepare(ctx, "p", []string{"k"}, []string{"f"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	up := []metadata.RowUpdate{{Key: "k", Index: res[0].Index, Fields: map[string]metadata.FieldInfo{"f": {}}}}
	if _, err := w.Meta.(metadata.MetaStore).Commit(ctx, "p", up); !errors.Is(err, backends.ErrOutcomeUnknown) {
		t.Fatalf("Commit: %v, want ErrOutcomeUnknown", err)
	}
	if rows, _ := inner.Meta.(metadata.MetaStore).Lookup(ctx, "p", []string{"k"}); rows[0] == nil {
		t.Error("FailAfter: the Commit did not reach the inner MetaStore")
	}
}

func TestFaultyFailWriteAfter(t *testing.T) {
	ctx := t.Context()
	inner := newMemory(t)
	f := new(backendtest.Faulty)
	w := backendtest.Wrap(inner, f)
	f.FailWriteAfter(1, 2, nil)
	cells := cellsN("k", 5)
	if err := w.Data.Write(ctx, cells); !errors.Is(err, backendtest.ErrInjected) {
		t.Fatalf("Write: %v, want ErrInjected", err)
	}
	if got := present(t, inner.Data, cells); !slices.Equal(got, []bool{true, true, false, false, false}) {
		t.Errorf("present after FailWriteAfter(1, 2): %v, want the first 2", got)
	}
}

func TestFaultyFailAllAndClear(t *testing.T) {
	ctx := t.Context()
	f := new(backendtest.Faulty)
	w := backendtest.Wrap(newMemory(t), f)
	f.FailAll(backendtest.OpRead, nil)
	rc := []backends.ReadCell{{Key: "k"}}
	for i := range 3 {
		if err := w.Data.Read(ctx, rc); !errors.Is(err, backendtest.ErrInjected) {
			t.Fatalf("Read %d: %v, want ErrInjected", i, err)
		}
	}
	f.Clear()
	if err := w.Data.Read(ctx, rc); err != nil {
		t.Fatalf("Read after Clear: %v", err)
	}
	if n := f.Calls(backendtest.OpRead); n != 4 {
		t.Errorf("Calls(Read) = %d, want 4", n)
	}
}

func TestFaultyUnstageCannotFail(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("FailAll(OpUnstage) did not panic")
		}
	}()
	new(backendtest.Faulty).FailAll(backendtest.OpUnstage, nil)
}

func TestFaultyDelay(t *testing.T) {
	f := new(backendtest.Faulty)
	w := backendtest.Wrap(newMemory(t), f)
	f.SetDelay(backendtest.OpWrite, time.Hour)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	if err := w.Data.Write(ctx, cellsN("k", 1)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("delayed Write past its deadline: %v, want DeadlineExceeded", err)
	}
	f.SetDelay(backendtest.OpWrite, 0)
	if err := w.Data.Write(t.Context(), cellsN("k", 1)); err != nil {
		t.Fatalf("Write with the delay off: %v", err)
	}
}

func TestFaultyCounts(t *testing.T) {
	ctx := t.Context()
	f := new(backendtest.Faulty)
	w := backendtest.Wrap(newMemory(t), f)
	for _, n := range []int{3, 1, 4} {
		if err := w.Data.Write(ctx, cellsN("k", n)); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.Batches(backendtest.OpWrite); !slices.Equal(got, []int{3, 1, 4}) {
		t.Errorf("Batches(Write) = %v, want [3 1 4]", got)
	}
	if got := f.Keys(backendtest.OpWrite); got != 8 {
		t.Errorf("Keys(Write) = %d, want 8", got)
	}
	f.FailNth(backendtest.OpWrite, 1, nil)
	f.ResetCounts()
	if f.Calls(backendtest.OpWrite) != 0 || f.Keys(backendtest.OpWrite) != 0 {
		t.Error("ResetCounts left counts")
	}
	if err := w.Data.Write(ctx, cellsN("k", 1)); !errors.Is(err, backendtest.ErrInjected) {
		t.Errorf("the fault set before ResetCounts on the next call: %v, want ErrInjected", err)
	}
}

// Under concurrent calls a one-shot fault fires exactly once.
func TestFaultyConcurrent(t *testing.T) {
	f := new(backendtest.Faulty)
	w := backendtest.Wrap(newMemory(t), f)
	f.FailNth(backendtest.OpWrite, 5, nil)
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	for g := range 8 {
		wg.Go(func() {
			for i := range 10 {
				if err := w.Data.Write(t.Context(), cellsN(fmt.Sprint(g, "/", i, "/"), 2)); err != nil {
					mu.Lock()
					failed++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if failed != 1 || f.Calls(backendtest.OpWrite) != 80 {
		t.Errorf("%d of %d calls failed, want 1 of 80", failed, f.Calls(backendtest.OpWrite))
	}
}
