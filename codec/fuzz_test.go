package codec

import (
	"bytes"
	"errors"
	"math"
	"testing"
)

// fuzzSeeds are valid encodings of every kind of value, and a few corrupt
// buffers, to start FuzzDecode from.
func fuzzSeeds(tb testing.TB) [][]byte {
	f32 := mustFromSlice(tb, []float32{1.5, -2, 0.25})
	i64 := mustFromSlice(tb, []int64{-1, 0, math.MaxInt64, 4}, 2, 2)
	u8 := mustFromSlice(tb, []uint8{1, 2, 3})
	b := mustFromSlice(tb, []bool{true, false})
	c128 := mustFromSlice(tb, []complex128{1 + 1i})
	bf16, _ := NewTensor(BFloat16, []int64{1, 2}, []byte{0x80, 0x3f, 0, 0x40})
	f8, _ := NewTensor(Float8E5M2, []int64{0, 4}, nil)
	values := []any{
		f32, i64, u8, b, c128, bf16, f8,
		Scalar(2.5), Scalar(int16(-7)), Scalar(true),
		mustFromSlice(tb, []float64{}), mustFromSlice(tb, []int32{}, 3, 0),
		nil, true, int64(-1), int64(300), uint64(0), uint64(math.MaxUint64), float32(1.5), math.Inf(1),
		"", "hello", []byte{}, []byte{1, 2, 3}, []any{}, map[string]any{},
		[]any{f32, u8, map[string]any{"b": b}},
		map[string]any{"step": uint64(3), "t": f32, "ok": []any{true, int64(-1)}, "raw": []byte("x"), "s": "y"},
		map[string]any{"deep": []any{[]any{[]any{map[string]any{"x": []any{i64}}}}}},
	}
	var seeds [][]byte
	for _, v := range values {
		seeds = append(seeds, mustEncode(tb, v))
	}
	valid := mustEncode(tb, f32)
	corrupt := func(f func(b []byte)) []byte {
		c := bytes.Clone(valid)
		f(c)
		return c
	}
	seeds = append(seeds,
		nil,
		[]byte{1, 0, 0},
		[]byte{0, 0, 0, 0},
		[]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0},
		valid[:len(valid)-1],
		corrupt(func(b []byte) { b[4] = 0 }),                    // payload 0 inside the table
		corrupt(func(b []byte) { b[16] = 0xff }),                // tensor size out of range
		corrupt(func(b []byte) { b[0x1f] = '3' }),               // float33
		corrupt(func(b []byte) { b[0x21] = 0xff }),              // dim -1
		corrupt(func(b []byte) { b[0x25] = 1 }),                 // reference to tensor 1
		corrupt(func(b []byte) { b[0x14] = 0x91 }),              // header of 1
		craft(append(hdr(), bytes.Repeat([]byte{0x91}, 70)...)), // too deep
		craft(append(hdr(), 0xdd, 0xff, 0xff, 0xff, 0xff)),      // huge list
		craft(append(hdr(), 0x92, 0xd6, tensorExt, 0, 0, 0, 0)), // reference without a tensor
	)
	return seeds
}

// FuzzDecode: Decode never panics; a failure is always ErrCorrupt; and a
// value it returns re-encodes, decodes to an equal value, and re-encodes to
// the same bytes (encoding is canonical).
//
//	go test ./codec -run '^$' -fuzz '^FuzzDecode$' -fuzztime 20s
func FuzzDecode(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decode error outside ErrCorrupt: %v", err)
			}
			return
		}
		again, err := Encode(v)
		if err != nil {
			t.Fatalf("decoded %#v, which does not encode: %v", v, err)
		}
		v2, err := Decode(again)
		if err != nil {
			t.Fatalf("re-encoded value does not decode: %v", err)
		}
		if !equal(v, v2) {
			t.Fatalf("round trip changed the value:\n%#v\n%#v", v, v2)
		}
		third, err := Encode(v2)
		if err != nil || !bytes.Equal(third, again) {
			t.Fatalf("encoding is not canonical: %v", err)
		}
	})
}

func TestFuzzSeedsDecodeAsExpected(t *testing.T) {
	valid, corrupt := 0, 0
	for _, s := range fuzzSeeds(t) {
		if _, err := Decode(s); err == nil {
			valid++
		} else {
			corrupt++
		}
	}
	if valid < 25 || corrupt < 12 {
		t.Fatalf("%d valid and %d corrupt seeds", valid, corrupt)
	}
}
