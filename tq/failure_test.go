package tq_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest"
	"github.com/tqgo/tqgo/tq"
)

// TestFailedPutLeavesNoTrace: a BatchPut that fails anywhere after
// validation (part-way through a Store.Write, at a later chunk, at the
// write that publishes staged cells, at Stage, at Prepare or Commit, or by
// its context) returns
// the error, makes nothing of itself readable (new rows stay unknown,
// existing rows keep their old values and tags) and leaves exactly the
// backend keys there were before. A retry then succeeds with no orphans.
func TestFailedPutLeavesNoTrace(t *testing.T) {
	type failCase struct {
		name  string
		alloc bool
		opts  []tq.Option
		fault func(f *backendtest.Faulty)  // set just before the failing put
		hook  func(cancel func()) hookFunc // armed for the failing put only
		meta  func(m *metaSpy, cancel func())
		want  error
	}
	small := []tq.Option{tq.WithKeysLimit(4)}
	serial := []tq.Option{tq.WithKeysLimit(4), tq.WithIODepth(1)}
	inj := backendtest.ErrInjected
	cancelAt := func(op string, nth int) func(cancel func()) hookFunc {
		return func(cancel func()) hookFunc {
			return func(_ context.Context, o string, n int, keys []string) (int, error) {
				if o == op && n == nth {
					cancel() // the store sees a cancelled context
				}
				return len(keys), nil
			}
		}
	}
	cases := []failCase{
		{name: "write fails after 5 cells", fault: func(f *backendtest.Faulty) { f.FailWriteAfter(1, 5, nil) }, want: inj},
		{name: "write fails after 9 cells, chunked", opts: serial, fault: func(f *backendtest.Faulty) { f.FailWriteAfter(3, 1, nil) }, want: inj},
		{name: "2nd write chunk fails", opts: serial, fault: func(f *backendtest.Faulty) { f.FailNth(backendtest.OpWrite, 2, nil) }, want: inj},
		{name: "2nd write chunk fails part-way, concurrent chunks", opts: small, fault: func(f *backendtest.Faulty) { f.FailWriteAfter(2, 3, nil) }, want: inj},
		{name: "last write chunk fails", opts: serial, fault: func(f *backendtest.Faulty) { f.FailNth(backendtest.OpWrite, 3, nil) }, want: inj},
		{name: "write of staged cells fails", alloc: true, opts: serial, fault: func(f *backendtest.Faulty) { f.FailNth(backendtest.OpWrite, 3, nil) }, want: inj},
		{name: "write of staged cells fails part-way, concurrent chunks", alloc: true, opts: small, fault: func(f *backendtest.Faulty) { f.FailWriteAfter(3, 1, nil) }, want: inj},
		{name: "single write fails, stager", alloc: true, fault: func(f *backendtest.Faulty) { f.FailNth(backendtest.OpWrite, 1, nil) }, want: inj},
		{name: "stage fails", alloc: true, opts: serial, fault: func(f *backendtest.Faulty) { f.FailNth(backendtest.OpStage, 1, nil) }, want: inj},
		{name: "write publishes part of its staged cells and fails", alloc: true, opts: serial, hook: func(func()) hookFunc {
			return func(_ context.Context, op string, n int, keys []string) (int, error) {
				if op == "put" && n == 3 {
					return 1, errInjected
				}
				return len(keys), nil
			}
		}, want: errInjected},
		{name: "prepare fails", meta: func(m *metaSpy, _ func()) { m.prepareErr = errInjected }, want: errInjected},
		{name: "commit fails", meta: func(m *metaSpy, _ func()) { m.commitErr = errInjected }, want: errInjected},
		{name: "commit fails, stager", alloc: true, opts: small, meta: func(m *metaSpy, _ func()) { m.commitErr = errInjected }, want: errInjected},
		{name: "context cancelled at 2nd write chunk", opts: serial, hook: cancelAt("put", 2), want: context.Canceled},
		{name: "context cancelled at 2nd write chunk, concurrent", opts: small, hook: cancelAt("put", 2), want: context.Canceled},
		{name: "context cancelled at the write of staged cells", alloc: true, opts: serial, hook: cancelAt("put", 3), want: context.Canceled},
		{name: "context cancelled after the data, before commit", meta: func(m *metaSpy, cancel func()) { m.beforeCommit = cancel }, want: context.Canceled},
		{name: "context cancelled after the data, before commit, stager", alloc: true, meta: func(m *metaSpy, cancel func()) { m.beforeCommit = cancel }, want: context.Canceled},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var armed atomic.Bool
			var hook hookFunc
			if tc.hook != nil {
				inner := tc.hook(cancel)
				hook = func(ctx context.Context, op string, n int, keys []string) (int, error) {
					if !armed.Load() {
						return len(keys), nil
					}
					return inner(ctx, op, n, keys)
				}
			}
			s := newSpy(hook)
			ms := newMetaSpy()
			f := new(backendtest.Faulty)
			c := engClient(t, backendtest.Wrap(backends.Engine{Data: s.backend(tc.alloc), Meta: ms}, f), tc.opts...)

			// Two existing rows with x and a tag.
			old := []string{"old0", "old1"}
			mustPut(t, c, "p", old, tq.Batch{"x": tq.Stacked([]int64{1, 2}, 2)}, []tq.Tag{{"v": int64(1)}, {"v": int64(1)}})
			before := s.live(t)
			s.resetCalls()

			// Overwrite x of the old rows, add y, add three new rows: 10 cells.
			keys := append(slices.Clone(old), "new0", "new1", "new2")
			batch := tq.Batch{
				"x": tq.Stacked([]int64{10, 20, 30, 40, 50}, 5),
				"y": tq.ValuesOf([]string{"a", "b", "c", "d", "e"}),
			}
			tags := []tq.Tag{{"v": int64(2)}, {"v": int64(2)}, {"v": int64(2)}, {"v": int64(2)}, {"v": int64(2)}}
			if tc.meta != nil {
				tc.meta(ms, cancel)
			}
			if tc.fault != nil {
				tc.fault(f)
			}
			f.ResetCounts()
			armed.Store(true)
			err := c.BatchPut(ctx, "p", keys, batch, tags)
			armed.Store(false)
			f.Clear()
			if !errors.Is(err, tc.want) {
				t.Fatalf("BatchPut: %v, want %v", err, tc.want)
			}
			if s.totalCalls() == 0 && ms.prepareErr == nil && tc.fault == nil {
				t.Fatal("the fault was never reached: no backend call")
			}
			// Cells staged for a put that failed are unstaged, once.
			if stages, unstages := s.count("allocate"), f.Calls(backendtest.OpUnstage); stages > 1 || unstages != stages {
				t.Fatalf("%d Stage calls, %d Unstage calls after the failed put: want one Unstage for the one Stage", stages, unstages)
			}

			bg := context.Background()
			if got := s.live(t); !slices.Equal(got, before) {
				t.Fatalf("backend keys %v after the failed put, want %v", got, before)
			}
			for _, k := range keys[2:] {
				if _, err := c.BatchGet(bg, "p", []string{k}); !isKeyErr(err, tq.ErrNotFound, k, "") {
					t.Fatalf("new row %s after the failed put: %v", k, err)
				}
			}
			if got := flat[int64](t, mustGet(t, c, "p", old, "x")["x"]); !slices.Equal(got, []int64{1, 2}) {
				t.Fatalf("old x after the failed put = %v, want [1 2]", got)
			}
			if _, err := c.BatchGet(bg, "p", old, "y"); !isKeyErr(err, tq.ErrNotReady, "old0", "y") {
				t.Fatalf("old y after the failed put: %v", err)
			}
			m, err := c.List(bg, "p")
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(m.Keys(), old) {
				t.Fatalf("List %v after the failed put", m.Keys())
			}
			for _, r := range m.Rows {
				if !reflect.DeepEqual(r.Tag, tq.Tag{"v": int64(1)}) || len(r.Fields) != 1 {
					t.Fatalf("row %s after the failed put: tag %v fields %v", r.Key, r.Tag, r.Fields)
				}
			}

			// The same put, faults off, succeeds and leaves no orphans.
			ms.prepareErr, ms.commitErr, ms.beforeCommit = nil, nil, nil
			if err := c.BatchPut(bg, "p", keys, batch, tags); err != nil {
				t.Fatalf("retry: %v", err)
			}
			if n := s.inner.Len(); n != 10 {
				t.Fatalf("retry: store %d cells, want 10 (%v)", n, s.live(t))
			}
			got := mustGet(t, c, "p", keys)
			if x := flat[int64](t, got["x"]); !slices.Equal(x, []int64{10, 20, 30, 40, 50}) {
				t.Fatalf("retry: x = %v", x)
			}
			if y := got["y"].Values(); !reflect.DeepEqual(y, []any{"a", "b", "c", "d", "e"}) {
				t.Fatalf("retry: y = %v", y)
			}
		})
	}
}

// TestFailedTagUpdate: a tag-only update whose commit fails changes no tag.
func TestFailedTagUpdate(t *testing.T) {
	ctx := context.Background()
	s := newSpy(nil)
	ms := newMetaSpy()
	c := newClient(t, s, ms)
	mustPut(t, c, "p", []string{"a"}, tq.Batch{"x": tq.Stacked([]int64{1}, 1)}, []tq.Tag{{"v": int64(1)}})
	ms.commitErr = errInjected
	if err := c.BatchPut(ctx, "p", []string{"a"}, nil, []tq.Tag{{"v": int64(2)}}); !errors.Is(err, errInjected) {
		t.Fatalf("tag update: %v", err)
	}
	ms.commitErr = nil
	m, err := c.Lookup(ctx, "p", []string{"a"})
	if err != nil || m.Rows[0].Tag["v"] != int64(1) {
		t.Fatalf("tag after a failed update: %v %v", m, err)
	}
}
