package tq_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/tqgo/tqgo/backends/backendtest"
	"github.com/tqgo/tqgo/tq"
)

// TestKeysLimitChunking: with KeysLimit 7, 10 keys x 3 fields (30 cells)
// take ceil(30/7) = 5 backend calls of at most 7 keys, for put, get and
// clear, and the storage keys are "<index>@<field>", field-major with the
// tensor fields first (tensor and packed cells go in the same Writes). On
// a Stager the packed cells are staged in one call, published by those
// Writes.
func TestKeysLimitChunking(t *testing.T) {
	const limit, nKeys = 7, 10
	for _, tc := range []struct {
		name  string
		alloc bool
		depth int
	}{
		{"put/serial", false, 1},
		{"put/depth4", false, 4},
		{"allocate/serial", true, 1},
		{"allocate/depth4", true, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := newSpy(nil)
			f := new(backendtest.Faulty)
			c := engClient(t, backendtest.Wrap(local(s.backend(tc.alloc)), f), tq.WithKeysLimit(limit), tq.WithIODepth(tc.depth))
			sizes := func(op backendtest.Op) []int {
				b := f.Batches(op)
				if tc.depth > 1 {
					slices.Sort(b)
					slices.Reverse(b)
				}
				return b
			}
			want5 := []int{7, 7, 7, 7, 2}
			keys := keysN("k", nKeys)
			// Columns named out of order: the cells go sorted by field.
			batch := tq.Batch{
				"c": tq.ValuesOf(keys),
				"a": tq.Stacked(seq[int64](0, nKeys), nKeys),
				"b": tq.JaggedOf(slices.Repeat([][]float32{{1, 2}, {3}}, nKeys/2)),
			}
			mustPut(t, c, "p", keys, batch, nil)

			var want []string // field-major: every key's a, then b, then c
			for _, f := range []string{"a", "b", "c"} {
				for i := range nKeys {
					want = append(want, fmt.Sprintf("%d@%s", i, f))
				}
			}
			if tc.alloc {
				// The packed cells (field c) are staged in one call.
				checkChunks(t, "allocate", s.callsOf("allocate"), want[20:], len(want), true)
				if n := f.Calls(backendtest.OpUnstage); n != 0 {
					t.Fatalf("%d unstages after a put that succeeded", n)
				}
			} else if n := f.Calls(backendtest.OpStage); n != 0 {
				t.Fatalf("%d stages on a store that does not stage", n)
			}
			if got := sizes(backendtest.OpWrite); !slices.Equal(got, want5) {
				t.Fatalf("write sizes %v, want %v", got, want5)
			}
			checkChunks(t, "put", s.callsOf("put"), want, limit, tc.depth == 1)
			if got := s.live(t); !slices.Equal(got, sorted(want)) {
				t.Fatalf("stored keys %v, want %v", got, sorted(want))
			}

			s.resetCalls()
			f.ResetCounts()
			got := mustGet(t, c, "p", keys)
			if len(got) != 3 || !slices.Equal(flat[int64](t, got["a"]), seq[int64](0, nKeys)) {
				t.Fatalf("read back %v", got.Fields())
			}
			checkChunks(t, "get", s.callsOf("get"), want, limit, tc.depth == 1)
			if got := sizes(backendtest.OpRead); !slices.Equal(got, want5) {
				t.Fatalf("read sizes %v, want %v", got, want5)
			}

			// One field of 10 keys: two calls.
			s.resetCalls()
			mustGet(t, c, "p", keys, "b")
			checkChunks(t, "get b", s.callsOf("get"), want[10:20], limit, tc.depth == 1)

			s.resetCalls()
			if err := c.Clear(ctx, "p", keys); err != nil {
				t.Fatal(err)
			}
			dels := s.callsOf("delete")
			if len(dels) != 5 {
				t.Fatalf("clear: %d delete calls, want 5", len(dels))
			}
			var deleted []string
			for _, d := range dels {
				if len(d.keys) > limit {
					t.Fatalf("clear: a delete of %d keys, limit %d", len(d.keys), limit)
				}
				deleted = append(deleted, d.keys...)
			}
			if !slices.Equal(sorted(deleted), sorted(want)) || s.inner.Len() != 0 {
				t.Fatalf("clear deleted %v, store keeps %d", deleted, s.inner.Len())
			}
		})
	}
}

// checkChunks: calls carry want in chunks of limit keys, each chunk a
// contiguous run of want starting at a multiple of limit; with inOrder, the
// chunks come in order too.
func checkChunks(t *testing.T, what string, calls []call, want []string, limit int, inOrder bool) {
	t.Helper()
	if n := (len(want) + limit - 1) / limit; len(calls) != n {
		t.Fatalf("%s: %d calls, want %d", what, len(calls), n)
	}
	seen := make([]bool, len(calls))
	for i, c := range calls {
		lo := slices.Index(want, c.keys[0])
		if lo < 0 || lo%limit != 0 || seen[lo/limit] {
			t.Fatalf("%s: call %d starts at %q, not at a chunk boundary of %v", what, i, c.keys[0], want)
		}
		seen[lo/limit] = true
		hi := min(lo+limit, len(want))
		if !slices.Equal(c.keys, want[lo:hi]) {
			t.Fatalf("%s: call %d keys %v, want %v", what, i, c.keys, want[lo:hi])
		}
		if inOrder && lo != i*limit {
			t.Fatalf("%s: call %d is chunk %d", what, i, lo/limit)
		}
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestStorageKeyLayout: the first write of a cell is "<index>@<field>", in
// the requested key order within each field; rewrites add "#<gen>".
func TestStorageKeyLayout(t *testing.T) {
	s := newSpy(nil)
	c := newClient(t, s, nil, tq.WithIODepth(1))
	mustPut(t, c, "p", []string{"b", "a"}, tq.Batch{"y": tq.ValuesOf([]int{1, 2}), "x": tq.ValuesOf([]int{3, 4})}, nil)
	mustPut(t, c, "p", []string{"a", "c"}, tq.Batch{"x": tq.ValuesOf([]int{5, 6})}, nil)
	puts := s.callsOf("put")
	if len(puts) != 2 {
		t.Fatalf("%d puts", len(puts))
	}
	if want := []string{"0@x", "1@x", "0@y", "1@y"}; !slices.Equal(puts[0].keys, want) {
		t.Fatalf("first put keys %v, want %v", puts[0].keys, want)
	}
	// a (index 1) rewrites x: generation 1; c is new (index 2).
	if want := []string{"1@x#1", "2@x"}; !slices.Equal(puts[1].keys, want) {
		t.Fatalf("second put keys %v, want %v", puts[1].keys, want)
	}
	if dels := s.callsOf("delete"); len(dels) != 1 || !slices.Equal(dels[0].keys, []string{"1@x"}) {
		t.Fatalf("deletes %v, want the replaced 1@x", dels)
	}
}
