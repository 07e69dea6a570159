package backendtest

import (
	"bytes"
	"context"

	"github.com/tqgo/tqgo/backends"
)

// splitReader returns the backend's SplitReader, or skips the subtest.
func (d *dt) splitReader() backends.SplitReader {
	d.t.Helper()
	r, ok := d.b.(backends.SplitReader)
	if !ok {
		d.t.Skip("backend is not a backends.SplitReader")
	}
	return r
}

// testSplitRead: values of the expected length land in Head and Body,
// others come back whole in Other, missing keys are not Found; over many
// keys and sizes from a few bytes to a few MiB, so that engines reading in
// rounds cross their round boundaries.
func testSplitRead(d *dt) {
	r := d.splitReader()
	const head = 7
	sizes := []int{head, head + 1, 100, 4 << 10, 300 << 10, 3 << 20}
	var keys []string
	var vals [][]byte
	for _, size := range sizes {
		ks := d.keys("s"+string(rune('a'+len(keys))), 40)
		for i, k := range ks {
			keys = append(keys, k)
			vals = append(vals, value(k, size+i%2)) // every other one a byte longer than expected
		}
	}
	present := make([]bool, len(keys))
	var putKeys []string
	var putVals [][]byte
	for i := range keys {
		if i%5 != 3 {
			present[i] = true
			putKeys, putVals = append(putKeys, keys[i]), append(putVals, vals[i])
		}
	}
	d.put(putKeys, putVals)

	dst := make([]backends.SplitValue, len(keys))
	for i := range dst {
		exp := len(vals[i]) - i%2 // what the reader expects: the even size
		dst[i] = backends.SplitValue{Head: make([]byte, head), Body: make([]byte, exp-head), Found: true, Other: []byte("stale")}
	}
	if err := r.GetSplit(d.ctx, keys, dst); err != nil {
		d.t.Fatalf("GetSplit: %v", err)
	}
	for i, v := range dst {
		switch {
		case !present[i]:
			if v.Found {
				d.t.Fatalf("key %d (missing): Found", i)
			}
		case !v.Found:
			d.t.Fatalf("key %d: not Found", i)
		case i%2 == 1:
			if !bytes.Equal(v.Other, vals[i]) {
				d.t.Fatalf("key %d (%d bytes, expected %d): Other %d bytes, want the whole value", i, len(vals[i]), len(vals[i])-1, len(v.Other))
			}
		default:
			if v.Other != nil {
				d.t.Fatalf("key %d: Other set for a value of the expected length", i)
			}
			if !bytes.Equal(v.Head, vals[i][:head]) || !bytes.Equal(v.Body, vals[i][head:]) {
				d.t.Fatalf("key %d: Head and Body %s", i, firstDiff(append(v.Head, v.Body...), vals[i]))
			}
		}
	}

	// A cancelled context fails, and the backend still works after it.
	ctx, cancel := context.WithCancel(d.ctx)
	cancel()
	d.wantErr("GetSplit with a cancelled context", r.GetSplit(ctx, keys[:1], dst[:1]), context.Canceled)
	if err := r.GetSplit(d.ctx, keys[:2], dst[:2]); err != nil || !dst[0].Found {
		d.t.Fatalf("GetSplit after a cancelled one: %v, found %v", err, dst[0].Found)
	}
	d.wantErr("GetSplit of mismatched lengths", r.GetSplit(d.ctx, keys[:2], dst[:1]), backends.ErrInvalid)
	if err := d.b.Close(); err != nil {
		d.t.Fatalf("Close: %v", err)
	}
	d.wantErr("GetSplit after Close", r.GetSplit(d.ctx, keys[:1], dst[:1]), backends.ErrClosed)
}

// splitWriter returns the backend's SplitWriter, or skips the subtest.
func (d *dt) splitWriter() backends.SplitWriter {
	d.t.Helper()
	w, ok := d.b.(backends.SplitWriter)
	if !ok {
		d.t.Skip("backend is not a backends.SplitWriter")
	}
	return w
}

// testSplitWrite: a value stored in two parts reads back joined, for heads
// shared among keys and bodies from empty to a few MiB (engines treat large
// bodies apart), replacing what was there.
func testSplitWrite(d *dt) {
	w := d.splitWriter()
	head := []byte("shared-head:")
	sizes := []int{0, 1, 100, 16<<10 - 1, 16 << 10, 300 << 10, 3 << 20}
	var keys []string
	var heads, bodies, want [][]byte
	for si, size := range sizes {
		for i, k := range d.keys("w"+string(rune('a'+si)), 30) {
			h := head
			if i%3 == 1 {
				h = nil // no head at all
			}
			body := value(k, size)
			keys, heads, bodies = append(keys, k), append(heads, h), append(bodies, body)
			want = append(want, append(append([]byte{}, h...), body...))
		}
	}
	d.put(keys[:5], values(keys[:5], func(int) int { return 9 })) // replaced below
	if err := w.PutSplit(d.ctx, keys, heads, bodies); err != nil {
		d.t.Fatalf("PutSplit: %v", err)
	}
	d.expect("Get after PutSplit", keys, d.get(keys), want)

	ctx, cancel := context.WithCancel(d.ctx)
	cancel()
	d.wantErr("PutSplit with a cancelled context", w.PutSplit(ctx, d.keys("x", 1), heads[:1], bodies[:1]), context.Canceled)
	d.wantErr("PutSplit of mismatched lengths", w.PutSplit(d.ctx, keys[:2], heads[:2], bodies[:1]), backends.ErrInvalid)
	if err := d.b.Close(); err != nil {
		d.t.Fatalf("Close: %v", err)
	}
	d.wantErr("PutSplit after Close", w.PutSplit(d.ctx, keys[:1], heads[:1], bodies[:1]), backends.ErrClosed)
}
