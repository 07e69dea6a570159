package codec_test

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/tqgo/tqgo/codec"
)

// Large packed buffers are allocated without zeroing (internal/uninit):
// the packer must write every byte, padding included, so a value packs to
// the same bytes whatever the memory held before. Freed memory full of a
// pattern is left for the allocator between encodings.
func TestLargePackingWritesEveryByte(t *testing.T) {
	litter := func(b byte) {
		for range 8 {
			junk := make([]byte, 4<<20)
			for i := range junk {
				junk[i] = b
			}
			runtime.KeepAlive(junk)
		}
		runtime.GC()
	}
	// Tensors whose data does not end on the codec's alignment, so that
	// padding sits between payloads and between the batch's buffers.
	var vals []any
	for i, n := range []int{100_003, 70_001, 300_007} {
		data := make([]byte, n)
		for j := range data {
			data[j] = byte(i + j*7)
		}
		tn, err := codec.FromSlice(data, int64(n))
		if err != nil {
			t.Fatal(err)
		}
		vals = append(vals, []any{tn, "tag", tn})
	}
	encodeAll := func() [][]byte {
		var out [][]byte
		for _, v := range vals {
			b, err := codec.Encode(v)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, b)
		}
		batch, err := codec.BatchEncodeInto(vals, codec.HeapAllocator, codec.Options{DSMaxWorkers: 1})
		if err != nil {
			t.Fatal(err)
		}
		return append(out, batch...)
	}
	litter(0xAB)
	first := encodeAll()
	litter(0xCD)
	second := encodeAll()
	for i := range first {
		if !bytes.Equal(first[i], second[i]) {
			t.Fatalf("buffer %d packed to different bytes after the heap held other garbage", i)
		}
		if i >= len(vals) && !bytes.Equal(first[i], first[i-len(vals)]) {
			t.Fatalf("BatchEncodeInto buffer %d differs from Encode of the same value", i-len(vals))
		}
		if bytes.Contains(first[i], bytes.Repeat([]byte{0xAB}, 16)) {
			t.Fatalf("buffer %d holds a run of the garbage pattern", i)
		}
	}
}

// garbageAllocator is HeapAllocator with every byte set to 0xEE, as
// memory from a non-zeroing allocator may be.
func garbageAllocator(sizes []int) ([][]byte, error) {
	out := make([][]byte, len(sizes))
	for i, n := range sizes {
		out[i] = bytes.Repeat([]byte{0xEE}, n)
	}
	return out, nil
}

// The packer writes every byte of the buffers it is given, on the serial
// path and through the pool alike: packing into garbage gives what Encode
// gives.
func TestPackingIntoGarbageMatchesEncode(t *testing.T) {
	var vals []any
	for i := range 24 {
		n := 1000 + i*9973 // sizes off the codec's alignment
		data := make([]byte, n)
		for j := range data {
			data[j] = byte(i*3 + j)
		}
		tn, err := codec.FromSlice(data, int64(n))
		if err != nil {
			t.Fatal(err)
		}
		vals = append(vals, []any{tn, int64(i), tn})
	}
	for _, opts := range []codec.Options{
		{DSMaxWorkers: 1},
		{DSMaxWorkers: 16, Oversubscribe: true, PackThreshold: 1, PoolMinBatchBytes: 1},
		{DSMaxWorkers: 2, PackThreshold: 1, PoolMinBatchBytes: 1},
	} {
		p := codec.NewPacker(opts)
		got, err := p.BatchEncodeInto(vals, garbageAllocator)
		p.Close()
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			want, err := codec.Encode(v)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got[i], want) {
				t.Fatalf("workers %d: object %d packed into garbage differs from Encode", opts.DSMaxWorkers, i)
			}
		}
	}
}
