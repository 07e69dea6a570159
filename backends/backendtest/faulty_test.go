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
	"github.com/tqgo/tqgo/backends/memory"
)

var errBoom = errors.New("boom")

func keysN(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

func valsN(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = []byte(fmt.Sprint("v", i))
	}
	return out
}

// present reports which keys the store holds.
func present(t *testing.T, s *memory.Store, keys []string) []bool {
	t.Helper()
	got, err := s.Get(context.Background(), keys)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]bool, len(got))
	for i, v := range got {
		out[i] = v != nil
	}
	return out
}

func TestWrapKeepsOptionalInterfaces(t *testing.T) {
	mem := memory.New()
	tier := newTiered()
	type has struct{ a, w, r, d bool }
	// One inner backend per combination of optional interfaces, built by
	// embedding in a struct only the interfaces wanted.
	type (
		B = backends.Backend
		A = backends.Allocator
		W = backends.TaggedWriter
		R = backends.TaggedReader
		D = backends.TaggedDeleter
	)
	inners := []struct {
		has   has
		inner backends.Backend
	}{
		{has{}, struct{ B }{mem}},
		{has{a: true}, struct {
			B
			A
		}{mem, mem}},
		{has{w: true}, struct {
			B
			W
		}{tier, tier}},
		{has{a: true, w: true}, struct {
			B
			A
			W
		}{tier, tier, tier}},
		{has{r: true}, struct {
			B
			R
		}{tier, tier}},
		{has{a: true, r: true}, struct {
			B
			A
			R
		}{tier, tier, tier}},
		{has{w: true, r: true}, struct {
			B
			W
			R
		}{tier, tier, tier}},
		{has{a: true, w: true, r: true}, struct {
			B
			A
			W
			R
		}{tier, tier, tier, tier}},
		{has{d: true}, struct {
			B
			D
		}{tier, tier}},
		{has{a: true, d: true}, struct {
			B
			A
			D
		}{tier, tier, tier}},
		{has{w: true, d: true}, struct {
			B
			W
			D
		}{tier, tier, tier}},
		{has{a: true, w: true, d: true}, struct {
			B
			A
			W
			D
		}{tier, tier, tier, tier}},
		{has{r: true, d: true}, struct {
			B
			R
			D
		}{tier, tier, tier}},
		{has{a: true, r: true, d: true}, struct {
			B
			A
			R
			D
		}{tier, tier, tier, tier}},
		{has{w: true, r: true, d: true}, struct {
			B
			W
			R
			D
		}{tier, tier, tier, tier}},
		{has{a: true, w: true, r: true, d: true}, tier},
	}
	ctx := t.Context()
	for _, tc := range inners {
		t.Run(fmt.Sprintf("%+v", tc.has), func(t *testing.T) {
			var f backendtest.Faulty
			b := backendtest.Wrap(tc.inner, &f)
			a, isA := b.(backends.Allocator)
			w, isW := b.(backends.TaggedWriter)
			r, isR := b.(backends.TaggedReader)
			d, isD := b.(backends.TaggedDeleter)
			if got := (has{isA, isW, isR, isD}); got != tc.has {
				t.Fatalf("wrapper implements %+v, inner %+v", got, tc.has)
			}
			// Each optional method reaches the inner backend, counted.
			keys := keysN(t.Name(), 2)
			if isA {
				st, err := a.Allocate(ctx, keys, []int{1, 2000})
				if err != nil {
					t.Fatal(err)
				}
				innerSt, err := tc.inner.(backends.Allocator).Allocate(ctx, keysN(t.Name()+"/inner", 1), []int{1})
				if err != nil {
					t.Fatal(err)
				}
				_, want := innerSt.(backends.TagReporter)
				if _, got := st.(backends.TagReporter); got != want {
					t.Errorf("wrapped Staged is a TagReporter: %t; inner Staged: %t", got, want)
				}
				if err := innerSt.Discard(ctx); err != nil {
					t.Fatal(err)
				}
				if err := st.Publish(ctx); err != nil {
					t.Fatal(err)
				}
				if f.Calls(backendtest.OpAllocate) != 1 || f.Calls(backendtest.OpPublish) != 1 {
					t.Errorf("Allocate, Publish counted %d, %d times, want 1, 1", f.Calls(backendtest.OpAllocate), f.Calls(backendtest.OpPublish))
				}
			}
			if isW {
				tags, err := w.PutTagged(ctx, keys, [][]byte{{1}, make([]byte, 2000)})
				if err != nil || !slices.Equal(tags, []string{"small", "large"}) {
					t.Fatalf("PutTagged = %q, %v; want the inner tags", tags, err)
				}
				if f.Calls(backendtest.OpPut) != 1 {
					t.Errorf("PutTagged counted %d times as Put, want 1", f.Calls(backendtest.OpPut))
				}
			}
			if isR {
				if _, err := r.GetTagged(ctx, keys, []string{"small", "bogus"}); !errors.Is(err, backends.ErrInvalid) {
					t.Errorf("GetTagged with an unknown tag: %v, want the inner ErrInvalid", err)
				}
				if f.Calls(backendtest.OpGet) != 1 {
					t.Errorf("GetTagged counted %d times as Get, want 1", f.Calls(backendtest.OpGet))
				}
			}
			if isD {
				if err := d.DeleteTagged(ctx, keys, []string{"small", "large"}); err != nil {
					t.Fatal(err)
				}
				if f.Calls(backendtest.OpDelete) != 1 {
					t.Errorf("DeleteTagged counted %d times as Delete, want 1", f.Calls(backendtest.OpDelete))
				}
			}
		})
	}
}

func TestFaultyFailNth(t *testing.T) {
	ctx := t.Context()
	mem := memory.New()
	var f backendtest.Faulty
	b := backendtest.Wrap(mem, &f)
	keys := keysN("k", 3)

	f.FailNth(backendtest.OpPut, 2, errBoom)
	if err := b.Put(ctx, keys[:1], valsN(1)); err != nil {
		t.Fatalf("first Put: %v", err)
	}
	if err := b.Put(ctx, keys[1:2], valsN(1)); !errors.Is(err, errBoom) {
		t.Fatalf("second Put: %v, want %v", err, errBoom)
	}
	if err := b.Put(ctx, keys[2:], valsN(1)); err != nil {
		t.Fatalf("third Put: %v", err)
	}
	if got := present(t, mem, keys); !slices.Equal(got, []bool{true, false, true}) {
		t.Errorf("keys present after a failed second Put: %v", got)
	}

	f.FailNth(backendtest.OpGet, 1, nil)
	if _, err := b.Get(ctx, keys); !errors.Is(err, backendtest.ErrInjected) {
		t.Errorf("Get with a nil-error fault: %v, want %v", err, backendtest.ErrInjected)
	}
	if got, err := b.Get(ctx, keys); err != nil || got[0] == nil {
		t.Errorf("Get after the fault fired = %q, %v", got, err)
	}

	f.FailNth(backendtest.OpDelete, 1, backends.ErrClosed)
	if err := b.Delete(ctx, keys); !errors.Is(err, backends.ErrClosed) {
		t.Errorf("Delete: %v, want one wrapping %v", err, backends.ErrClosed)
	}
	if got := present(t, mem, keys); !slices.Equal(got, []bool{true, false, true}) {
		t.Errorf("keys present after a failed Delete: %v", got)
	}
	if err := b.Delete(ctx, keys); err != nil {
		t.Errorf("Delete after the fault fired: %v", err)
	}
	if mem.Len() != 0 {
		t.Errorf("store holds %d keys after Delete, want 0", mem.Len())
	}
	for op, want := range map[backendtest.Op]int{backendtest.OpPut: 3, backendtest.OpGet: 2, backendtest.OpDelete: 2} {
		if got := f.Calls(op); got != want {
			t.Errorf("Calls(%v) = %d, want %d", op, got, want)
		}
	}
}

func TestFaultyFailPutAfter(t *testing.T) {
	ctx := t.Context()
	keys := keysN("k", 5)
	t.Run("Put", func(t *testing.T) {
		mem := memory.New()
		var f backendtest.Faulty
		b := backendtest.Wrap(mem, &f)
		f.FailPutAfter(1, 3, errBoom)
		if err := b.Put(ctx, keys, valsN(5)); !errors.Is(err, errBoom) {
			t.Fatalf("Put: %v, want %v", err, errBoom)
		}
		if got := present(t, mem, keys); !slices.Equal(got, []bool{true, true, true, false, false}) {
			t.Errorf("keys written by a Put failing after 3: %v", got)
		}
		// More keys than the Put has: all written, still an error.
		f.FailPutAfter(1, 10, nil)
		if err := b.Put(ctx, keys, valsN(5)); !errors.Is(err, backendtest.ErrInjected) {
			t.Fatalf("Put: %v, want %v", err, backendtest.ErrInjected)
		}
		if mem.Len() != 5 {
			t.Errorf("store holds %d keys, want 5", mem.Len())
		}
		f.FailPutAfter(1, 1, nil)
		if err := b.Put(ctx, keys, valsN(4)); !errors.Is(err, backends.ErrInvalid) {
			t.Errorf("partial Put of mismatched lengths: %v, want one wrapping %v", err, backends.ErrInvalid)
		}
	})
	t.Run("PutTagged", func(t *testing.T) {
		tier := newTiered()
		var f backendtest.Faulty
		b := backendtest.Wrap(tier, &f).(backends.TaggedWriter)
		f.FailPutAfter(2, 2, errBoom)
		if _, err := b.PutTagged(ctx, keys[:1], valsN(1)); err != nil {
			t.Fatalf("first PutTagged: %v", err)
		}
		tags, err := b.PutTagged(ctx, keys[1:], valsN(4))
		if !errors.Is(err, errBoom) || tags != nil {
			t.Fatalf("second PutTagged = %q, %v; want nil, %v", tags, err, errBoom)
		}
		if got := present(t, tier.stores["small"], keys); !slices.Equal(got, []bool{true, true, true, false, false}) {
			t.Errorf("keys written: %v", got)
		}
	})
}

func TestFaultyStaged(t *testing.T) {
	ctx := t.Context()
	mem := memory.New()
	var f backendtest.Faulty
	a := backendtest.Wrap(mem, &f).(backends.Allocator)
	keys := keysN("k", 3)

	f.FailNth(backendtest.OpAllocate, 1, errBoom)
	if st, err := a.Allocate(ctx, keys, []int{1, 2, 3}); !errors.Is(err, errBoom) || st != nil {
		t.Fatalf("Allocate = %v, %v; want nil, %v", st, err, errBoom)
	}

	st, err := a.Allocate(ctx, keys, []int{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	f.FailNth(backendtest.OpPublish, 1, errBoom)
	if err := st.Publish(ctx); !errors.Is(err, errBoom) {
		t.Fatalf("Publish: %v, want %v", err, errBoom)
	}
	if mem.Len() != 0 {
		t.Errorf("store holds %d keys after a failed Publish, want 0", mem.Len())
	}
	// The failed Publish left the inner Staged whole: a retry publishes it.
	if err := st.Publish(ctx); err != nil {
		t.Fatalf("Publish after a failed one: %v", err)
	}
	if mem.Len() != 3 {
		t.Errorf("store holds %d keys after Publish, want 3", mem.Len())
	}

	st, err = a.Allocate(ctx, keysN("d", 2), []int{1, 1})
	if err != nil {
		t.Fatal(err)
	}
	f.FailNth(backendtest.OpPublish, 1, nil)
	if err := st.Publish(ctx); !errors.Is(err, backendtest.ErrInjected) {
		t.Fatalf("Publish: %v, want %v", err, backendtest.ErrInjected)
	}
	f.FailNth(backendtest.OpDiscard, 1, errBoom)
	if err := st.Discard(ctx); !errors.Is(err, errBoom) {
		t.Errorf("Discard: %v, want %v", err, errBoom)
	}
	if err := st.Discard(ctx); err != nil {
		t.Errorf("Discard after a failed Publish: %v", err)
	}
	if err := st.Publish(ctx); err == nil {
		t.Error("Publish after Discard: nil error")
	}
	if mem.Len() != 3 {
		t.Errorf("store holds %d keys, want 3", mem.Len())
	}
	if got, want := f.Batches(backendtest.OpPublish), []int{3, 3, 2, 2}; !slices.Equal(got, want) {
		t.Errorf("Batches(Publish) = %v, want %v", got, want)
	}
	if got, want := f.Batches(backendtest.OpAllocate), []int{3, 3, 2}; !slices.Equal(got, want) {
		t.Errorf("Batches(Allocate) = %v, want %v", got, want)
	}
}

func TestFaultyFailAllAndClear(t *testing.T) {
	ctx := t.Context()
	var f backendtest.Faulty
	b := backendtest.Wrap(memory.New(), &f)
	f.FailAll(backendtest.OpGet, errBoom)
	f.FailNth(backendtest.OpPut, 5, errBoom)
	for i := range 3 {
		if _, err := b.Get(ctx, []string{"k"}); !errors.Is(err, errBoom) {
			t.Fatalf("Get %d under FailAll: %v", i, err)
		}
	}
	if err := b.Put(ctx, []string{"k"}, valsN(1)); err != nil {
		t.Fatalf("Put under a Get fault: %v", err)
	}
	f.Clear()
	got, err := b.Get(ctx, []string{"k"})
	if err != nil || got[0] == nil {
		t.Fatalf("Get after Clear = %q, %v", got, err)
	}
	for i := range 5 {
		if err := b.Put(ctx, []string{"k"}, valsN(1)); err != nil {
			t.Fatalf("Put %d after Clear removed its fault: %v", i, err)
		}
	}
	if got := f.Calls(backendtest.OpGet); got != 4 {
		t.Errorf("Calls(Get) = %d after Clear, want 4 (Clear keeps counts)", got)
	}
}

func TestFaultyDelay(t *testing.T) {
	ctx := t.Context()
	var f backendtest.Faulty
	b := backendtest.Wrap(memory.New(), &f)
	const d = 30 * time.Millisecond
	f.SetDelay(backendtest.OpGet, d)
	start := time.Now()
	if _, err := b.Get(ctx, []string{"k"}); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < d {
		t.Errorf("delayed Get took %v, want at least %v", el, d)
	}
	start = time.Now()
	if err := b.Put(ctx, []string{"k"}, valsN(1)); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el >= d {
		t.Errorf("Put, with only Get delayed, took %v", el)
	}

	f.SetDelay(backendtest.OpDelete, time.Hour)
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := b.Delete(short, []string{"k"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Delete whose context ends during its delay: %v, want %v", err, context.DeadlineExceeded)
	}
	f.Clear()
	if got, err := b.Get(ctx, []string{"k"}); err != nil || got[0] == nil {
		t.Errorf("the Delete cut short by its context deleted the key: %q, %v", got, err)
	}
}

func TestFaultyCounts(t *testing.T) {
	ctx := t.Context()
	var f backendtest.Faulty
	b := backendtest.Wrap(memory.New(), &f)
	for _, n := range []int{3, 5, 0} {
		if err := b.Put(ctx, keysN("k", n), valsN(n)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Get(ctx, keysN("k", 4)); err != nil {
		t.Fatal(err)
	}
	if got, want := f.Batches(backendtest.OpPut), []int{3, 5, 0}; !slices.Equal(got, want) {
		t.Errorf("Batches(Put) = %v, want %v", got, want)
	}
	if got := f.Keys(backendtest.OpPut); got != 8 {
		t.Errorf("Keys(Put) = %d, want 8", got)
	}
	if got := f.Calls(backendtest.OpGet); got != 1 {
		t.Errorf("Calls(Get) = %d, want 1", got)
	}
	if got := f.Calls(backendtest.OpDelete); got != 0 {
		t.Errorf("Calls(Delete) = %d, want 0", got)
	}

	f.FailNth(backendtest.OpPut, 2, errBoom)
	f.ResetCounts()
	if f.Calls(backendtest.OpPut) != 0 || f.Keys(backendtest.OpPut) != 0 || f.Batches(backendtest.OpPut) != nil {
		t.Errorf("after ResetCounts: %d calls, %d keys, batches %v", f.Calls(backendtest.OpPut), f.Keys(backendtest.OpPut), f.Batches(backendtest.OpPut))
	}
	if err := b.Put(ctx, keysN("k", 1), valsN(1)); err != nil {
		t.Fatalf("first Put after ResetCounts: %v", err)
	}
	if err := b.Put(ctx, keysN("k", 1), valsN(1)); !errors.Is(err, errBoom) {
		t.Fatalf("second Put after ResetCounts: %v, want the fault set before it", err)
	}
	if got := backendtest.OpPublish.String(); got != "Publish" {
		t.Errorf("OpPublish.String() = %q", got)
	}
}

// TestFaultyConcurrent checks that counts add up and a one-shot fault
// fires exactly once when calls race, and that faults may be set while
// calls are in flight.
func TestFaultyConcurrent(t *testing.T) {
	ctx := t.Context()
	var f backendtest.Faulty
	b := backendtest.Wrap(memory.New(), &f)
	const workers, calls = 8, 50
	f.FailNth(backendtest.OpPut, 100, errBoom)
	f.FailNth(backendtest.OpPut, 200, errBoom)
	var failed sync.Map // call index -> error
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range calls {
				if w == 0 && i == calls/2 {
					f.FailNth(backendtest.OpGet, 1, errBoom)
				}
				if err := b.Put(ctx, []string{fmt.Sprint(w, "/", i)}, valsN(1)); err != nil {
					failed.Store(fmt.Sprint(w, "/", i), err)
				}
				_, _ = b.Get(ctx, []string{fmt.Sprint(w, "/", i)})
			}
		})
	}
	wg.Wait()
	n := 0
	failed.Range(func(_, v any) bool {
		n++
		if !errors.Is(v.(error), errBoom) {
			t.Errorf("unexpected error %v", v)
		}
		return true
	})
	if n != 2 {
		t.Errorf("%d Puts failed, want 2 (calls 100 and 200)", n)
	}
	if got := f.Calls(backendtest.OpPut); got != workers*calls {
		t.Errorf("Calls(Put) = %d, want %d", got, workers*calls)
	}
	if got := len(f.Batches(backendtest.OpGet)); got != workers*calls {
		t.Errorf("len(Batches(Get)) = %d, want %d", got, workers*calls)
	}
}

// TestWrapSplitReader: a wrapped engine that reads into or writes from
// caller memory still does, and GetSplit is counted and failed as a Get.
func TestWrapSplitReader(t *testing.T) {
	var f backendtest.Faulty
	b := backendtest.Wrap(splitMem{memory.New()}, &f)
	sr, isS := b.(backends.SplitReader)
	_, isW := b.(backends.SplitWriter)
	if _, isA := b.(backends.Allocator); !isS || !isA || !isW {
		t.Fatalf("wrapped engine: SplitReader %t, SplitWriter %t, Allocator %t; want all", isS, isW, isA)
	}
	ctx := t.Context()
	keys := keysN(t.Name(), 1)
	if err := b.Put(ctx, keys, [][]byte{[]byte("abcd")}); err != nil {
		t.Fatal(err)
	}
	dst := []backends.SplitValue{{Head: make([]byte, 1), Body: make([]byte, 3)}}
	if err := sr.GetSplit(ctx, keys, dst); err != nil || !dst[0].Found || string(dst[0].Body) != "bcd" {
		t.Fatalf("GetSplit: %v, %+v", err, dst[0])
	}
	boom := errors.New("boom")
	f.FailNth(backendtest.OpGet, 1, boom)
	if err := sr.GetSplit(ctx, keys, dst); !errors.Is(err, boom) {
		t.Fatalf("GetSplit with a Get fault: %v, want it", err)
	}
	if got := f.Calls(backendtest.OpGet); got != 2 {
		t.Errorf("GetSplit counted %d times as Get, want 2", got)
	}
}

// splitMem is the memory engine with a SplitReader, copying from Get.
type splitMem struct{ *memory.Store }

func (m splitMem) GetSplit(ctx context.Context, keys []string, dst []backends.SplitValue) error {
	return backends.GetSplitFromGet(ctx, m.Store, keys, dst)
}
