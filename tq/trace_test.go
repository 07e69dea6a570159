package tq_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/tq"
)

// traced is one call a recordingTracer saw.
type traced struct {
	call    tq.Call
	end     tq.CallEnd
	started bool // TraceStart ran for it
	sameCtx bool // TraceEnd got the ctx TraceStart returned
}

type traceKey struct{}

// recordingTracer records every call; TraceStart puts a value of its own
// in the ctx, which TraceEnd checks it gets back.
type recordingTracer struct {
	mu    sync.Mutex
	n     int
	calls []traced
}

func (r *recordingTracer) TraceStart(ctx context.Context, _ *tq.Client, call tq.Call) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	r.calls = append(r.calls, traced{call: call, started: true})
	return context.WithValue(ctx, traceKey{}, r.n)
}

func (r *recordingTracer) TraceEnd(ctx context.Context, _ *tq.Client, call tq.Call, end tq.CallEnd) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id, _ := ctx.Value(traceKey{}).(int)
	if id < 1 || id > len(r.calls) || r.calls[id-1].call != call {
		r.calls = append(r.calls, traced{call: call, end: end}) // an end with no start
		return
	}
	r.calls[id-1].end, r.calls[id-1].sameCtx = end, true
}

// last returns the one call recorded since the last take, and forgets it.
func (r *recordingTracer) take(t *testing.T) traced {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.calls) != 1 {
		t.Fatalf("tracer saw %d calls, want 1: %+v", len(r.calls), r.calls)
	}
	c := r.calls[0]
	r.calls, r.n = nil, 0
	if !c.started || !c.sameCtx {
		t.Fatalf("%s: TraceStart ran %v, TraceEnd got its ctx %v", c.call.Op, c.started, c.sameCtx)
	}
	return c
}

// tripStore is the memory store that counts one round trip per call (as an
// engine does with backends.CountRoundTrips), the bytes of the cells it
// writes, and whether each Write's ctx carried the tracer's value.
type tripStore struct {
	*memory.Store
	written   atomic.Int64
	calls     atomic.Int64
	tracedCtx atomic.Bool
}

func (s *tripStore) Write(ctx context.Context, cells []backends.Cell) error {
	s.calls.Add(1)
	backends.CountRoundTrips(ctx, 1)
	_, ok := ctx.Value(traceKey{}).(int)
	s.tracedCtx.Store(ok)
	for _, c := range cells {
		s.written.Add(int64(len(c.Head) + len(c.Body)))
	}
	return s.Store.Write(ctx, cells)
}

func (s *tripStore) Read(ctx context.Context, cells []backends.ReadCell) error {
	s.calls.Add(1)
	backends.CountRoundTrips(ctx, 1)
	return s.Store.Read(ctx, cells)
}

func (s *tripStore) Delete(ctx context.Context, cells []backends.Cell) error {
	s.calls.Add(1)
	backends.CountRoundTrips(ctx, 1)
	return s.Store.Delete(ctx, cells)
}

// traceBatch is a [4,3] float32 stacked column and a 4-row values column:
// 8 cells.
func traceBatch() tq.Batch {
	return tq.Batch{"x": tq.Stacked(seq[float32](0, 12), 4, 3), "v": tq.ValuesOf([]string{"a", "b", "c", "d"})}
}

// TestTracer: every traced method reports its Op, Partition and Keys at
// start and its Rows, Cells, Bytes, RoundTrips and Err at end, with the
// ctx TraceStart returned reaching the engine and TraceEnd.
func TestTracer(t *testing.T) {
	for _, counting := range []bool{false, true} {
		name := "memory"
		if counting {
			name = "counting round trips"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			rec := &recordingTracer{}
			st := &tripStore{Store: memory.New()}
			var data backends.Store = st.Store
			if counting {
				data = st
			}
			c := newClient(t, data, nil, tq.WithTracer(rec))
			keys := keysN("k", 4)
			trips := func(tr traced) {
				t.Helper()
				if !counting && tr.end.RoundTrips != 0 {
					t.Errorf("%s: %d round trips on the memory engine, want 0", tr.call.Op, tr.end.RoundTrips)
				}
			}
			wantTrips := func(tr traced, calls int64) {
				t.Helper()
				trips(tr)
				if counting && tr.end.RoundTrips != calls {
					t.Errorf("%s: %d round trips, the store saw %d calls", tr.call.Op, tr.end.RoundTrips, calls)
				}
			}

			st.calls.Store(0)
			mustPut(t, c, "p", keys, traceBatch(), nil)
			put := rec.take(t)
			if put.call != (tq.Call{Op: "BatchPut", Partition: "p", Keys: 4}) {
				t.Errorf("put call %+v", put.call)
			}
			if put.end.Rows != 4 || put.end.Cells != 8 || put.end.Err != nil || put.end.Duration <= 0 {
				t.Errorf("put end %+v, want 4 rows, 8 cells, no error", put.end)
			}
			if counting {
				if put.end.Bytes != st.written.Load() {
					t.Errorf("put Bytes %d, the store was given %d", put.end.Bytes, st.written.Load())
				}
				if !st.tracedCtx.Load() {
					t.Error("the store's Write did not get the ctx TraceStart returned")
				}
			}
			if put.end.Bytes < 4*12 {
				t.Errorf("put Bytes %d, less than the tensor data alone", put.end.Bytes)
			}
			wantTrips(put, st.calls.Load())

			for _, get := range []struct {
				op  string
				run func() error
			}{
				{"BatchGet", func() error { _, err := c.BatchGet(ctx, "p", keys); return err }},
				{"BatchGetInto", func() error { _, err := c.BatchGetInto(ctx, "p", keys, traceBatch()); return err }},
				{"BatchGetByMeta", func() error {
					_, err := c.BatchGetByMeta(ctx, &tq.BatchMeta{Partition: "p", Rows: []tq.RowInfo{{Key: "k0"}, {Key: "k1"}, {Key: "k2"}, {Key: "k3"}}})
					return err
				}},
			} {
				st.calls.Store(0)
				if err := get.run(); err != nil {
					t.Fatalf("%s: %v", get.op, err)
				}
				tr := rec.take(t)
				if tr.call != (tq.Call{Op: get.op, Partition: "p", Keys: 4}) {
					t.Errorf("%s call %+v", get.op, tr.call)
				}
				if tr.end.Rows != 4 || tr.end.Cells != 8 || tr.end.Bytes != put.end.Bytes || tr.end.Err != nil {
					t.Errorf("%s end %+v, want 4 rows, 8 cells, the %d bytes written", get.op, tr.end, put.end.Bytes)
				}
				wantTrips(tr, st.calls.Load())
			}

			// A failed call reports its error.
			if _, err := c.BatchGet(ctx, "p", []string{"nope"}); !errors.Is(err, tq.ErrNotFound) {
				t.Fatalf("BatchGet of an unknown key: %v", err)
			}
			if tr := rec.take(t); !errors.Is(tr.end.Err, tq.ErrNotFound) || tr.end.Rows != 0 || tr.call.Keys != 1 {
				t.Errorf("failed BatchGet traced as %+v %+v, want Err ErrNotFound", tr.call, tr.end)
			}

			if _, err := c.List(ctx, "p"); err != nil {
				t.Fatal(err)
			}
			if tr := rec.take(t); tr.call != (tq.Call{Op: "List", Partition: "p"}) || tr.end.Rows != 4 || tr.end.Cells != 0 || tr.end.Err != nil {
				t.Errorf("List traced as %+v %+v", tr.call, tr.end)
			} else {
				trips(tr)
			}
			if _, err := c.Lookup(ctx, "p", keys[:2]); err != nil {
				t.Fatal(err)
			}
			if tr := rec.take(t); tr.call != (tq.Call{Op: "Lookup", Partition: "p", Keys: 2}) || tr.end.Rows != 2 || tr.end.Err != nil {
				t.Errorf("Lookup traced as %+v %+v", tr.call, tr.end)
			}
			if _, err := c.Partitions(ctx); err != nil {
				t.Fatal(err)
			}
			if tr := rec.take(t); tr.call != (tq.Call{Op: "Partitions"}) || tr.end.Err != nil {
				t.Errorf("Partitions traced as %+v %+v", tr.call, tr.end)
			}

			st.calls.Store(0)
			if err := c.Clear(ctx, "p", keys[:1]); err != nil {
				t.Fatal(err)
			}
			if tr := rec.take(t); tr.call != (tq.Call{Op: "Clear", Partition: "p", Keys: 1}) || tr.end.Rows != 1 || tr.end.Cells != 2 || tr.end.Err != nil {
				t.Errorf("Clear traced as %+v %+v, want 1 row, 2 cells", tr.call, tr.end)
			} else {
				wantTrips(tr, st.calls.Load())
			}
			st.calls.Store(0)
			if err := c.ClearPartition(ctx, "p"); err != nil {
				t.Fatal(err)
			}
			if tr := rec.take(t); tr.call != (tq.Call{Op: "ClearPartition", Partition: "p"}) || tr.end.Rows != 3 || tr.end.Cells != 6 || tr.end.Err != nil {
				t.Errorf("ClearPartition traced as %+v %+v, want 3 rows, 6 cells", tr.call, tr.end)
			} else {
				wantTrips(tr, st.calls.Load())
			}
			if _, err := c.Reclaim(ctx, "p", 0); err != nil {
				t.Fatal(err)
			}
			if tr := rec.take(t); tr.call != (tq.Call{Op: "Reclaim", Partition: "p"}) || tr.end.Cells != 0 || tr.end.Err != nil {
				t.Errorf("Reclaim traced as %+v %+v", tr.call, tr.end)
			}
			if _, err := c.Reclaim(ctx, "p", -time.Second); !errors.Is(err, tq.ErrInvalid) {
				t.Fatalf("Reclaim(-1s): %v", err)
			}
			if tr := rec.take(t); !errors.Is(tr.end.Err, tq.ErrInvalid) {
				t.Errorf("failed Reclaim traced with Err %v, want ErrInvalid", tr.end.Err)
			}
		})
	}
}

// SlogTracer logs one record per call, at its Level or at Warn for a
// failed call, with the call's attributes.
func TestSlogTracer(t *testing.T) {
	ctx := context.Background()
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, _ := memClient(t, tq.WithTracer(tq.SlogTracer{Logger: logger, Level: slog.LevelInfo}))
	mustPut(t, c, "p", keysN("k", 4), traceBatch(), nil)
	if _, err := c.BatchGet(ctx, "p", []string{"nope"}); !errors.Is(err, tq.ErrNotFound) {
		t.Fatalf("BatchGet of an unknown key: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d log records, want 2:\n%s", len(lines), buf.String())
	}
	var recs []map[string]any
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("record %q: %v", l, err)
		}
		recs = append(recs, m)
	}
	put, get := recs[0], recs[1]
	for k, want := range map[string]any{"level": "INFO", "msg": "tq call", "op": "BatchPut", "partition": "p", "rows": 4.0, "cells": 8.0, "round_trips": 0.0} {
		if put[k] != want {
			t.Errorf("put record %s = %v, want %v (%v)", k, put[k], want, put)
		}
	}
	if b, _ := put["bytes"].(float64); b < 4*12 {
		t.Errorf("put record bytes %v", put["bytes"])
	}
	if _, ok := put["duration"]; !ok {
		t.Errorf("put record has no duration: %v", put)
	}
	if _, ok := put["err"]; ok {
		t.Errorf("put record has an err: %v", put)
	}
	for k, want := range map[string]any{"level": "WARN", "op": "BatchGet", "partition": "p", "rows": 0.0} {
		if get[k] != want {
			t.Errorf("get record %s = %v, want %v (%v)", k, get[k], want, get)
		}
	}
	if e, _ := get["err"].(string); !strings.Contains(e, "nope") {
		t.Errorf("get record err %q, want the error naming the key", get["err"])
	}

	// Below the logger's level, nothing is logged.
	buf.Reset()
	quiet := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c2, _ := memClient(t, tq.WithTracer(tq.SlogTracer{Logger: quiet, Level: slog.LevelInfo}))
	mustPut(t, c2, "p", []string{"a"}, tq.Batch{"x": tq.Stacked([]int64{1}, 1)}, nil)
	if buf.Len() != 0 {
		t.Errorf("a call below the logger's level was logged: %s", buf.String())
	}
}

// Put takes plain Go slices: []T is a 1-d tensor cell, [][]T a 2-d one;
// rows of one shape read back stacked.
func TestPutPlainSlices(t *testing.T) {
	ctx := context.Background()
	c, _ := memClient(t)
	if err := c.Put(ctx, "p", "a", map[string]any{"x": []float32{1, 2, 3}, "m": [][]int64{{1, 2}, {3, 4}}, "s": "hello"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Put(ctx, "p", "b", map[string]any{"x": []float32{4, 5, 6}, "m": [][]int64{{5, 6}, {7, 8}}, "s": "world"}, tq.Tag{"n": int64(1)}); err != nil {
		t.Fatal(err)
	}
	m, err := c.Lookup(ctx, "p", []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range m.Rows {
		if fi := r.Fields["x"]; fi.DType != "float32" || !slices.Equal(fi.Shape, []int{3}) {
			t.Errorf("row %s x: %+v, want a float32 [3] tensor", r.Key, fi)
		}
		if fi := r.Fields["m"]; fi.DType != "int64" || !slices.Equal(fi.Shape, []int{2, 2}) {
			t.Errorf("row %s m: %+v, want an int64 [2 2] tensor", r.Key, fi)
		}
	}
	got := mustGet(t, c, "p", []string{"a", "b"})
	x := stackedOf(t, got["x"])
	if !slices.Equal(x.Shape, []int64{2, 3}) || !slices.Equal(flat[float32](t, got["x"]), []float32{1, 2, 3, 4, 5, 6}) {
		t.Errorf("x read back %v %v", x.Shape, flat[float32](t, got["x"]))
	}
	mx := stackedOf(t, got["m"])
	if !slices.Equal(mx.Shape, []int64{2, 2, 2}) || !slices.Equal(flat[int64](t, got["m"]), seq[int64](1, 8)) {
		t.Errorf("m read back %v %v", mx.Shape, flat[int64](t, got["m"]))
	}
	if s := got["s"].Values(); !slices.Equal(s, []any{"hello", "world"}) {
		t.Errorf("s read back %v", s)
	}
	if m.Rows[1].Tag["n"] != int64(1) {
		t.Errorf("b's tag %v", m.Rows[1].Tag)
	}
}

// A MultiTracer gives each tracer every call, with the context its own
// TraceStart returned.
func TestMultiTracer(t *testing.T) {
	a, b := &ctxTracer{name: "a"}, &ctxTracer{name: "b"}
	c, err := tq.Open(t.Context(), "memory://", tq.WithTracer(tq.MultiTracer{a, b}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Put(t.Context(), "p", "k", map[string]any{"x": int64(1)}, nil); err != nil {
		t.Fatal(err)
	}
	for _, tr := range []*ctxTracer{a, b} {
		if tr.ends != 1 || tr.wrong != 0 {
			t.Errorf("tracer %s: %d ends, %d with another's context", tr.name, tr.ends, tr.wrong)
		}
	}
}

type ctxTracerKey struct{}

type ctxTracer struct {
	name        string
	ends, wrong int
}

func (c *ctxTracer) TraceStart(ctx context.Context, _ *tq.Client, _ tq.Call) context.Context {
	return context.WithValue(ctx, ctxTracerKey{}, c.name)
}

func (c *ctxTracer) TraceEnd(ctx context.Context, _ *tq.Client, _ tq.Call, _ tq.CallEnd) {
	c.ends++
	if ctx.Value(ctxTracerKey{}) != c.name {
		c.wrong++
	}
}
