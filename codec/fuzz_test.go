package codec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"testing"
	"unsafe"
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

// FuzzDecodeTensors: BatchDecodeTensors either declines a buffer or gives
// exactly the tensor Decode gives, aliasing the same bytes.
//
//	go test ./codec -run '^$' -fuzz '^FuzzDecodeTensors$' -fuzztime 20s
func FuzzDecodeTensors(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecodeTensors(t, data)
	})
}

// checkDecodeTensors checks BatchDecodeTensors against Decode on buf, and
// reports whether it took buf.
func checkDecodeTensors(t *testing.T, buf []byte) bool {
	t.Helper()
	ts, ok := BatchDecodeTensors([][]byte{buf})
	if !ok {
		return false
	}
	v, err := Decode(buf)
	if err != nil {
		t.Fatalf("BatchDecodeTensors took a buffer Decode rejects: %v", err)
	}
	want, isT := v.(Tensor)
	if !isT {
		t.Fatalf("BatchDecodeTensors took a buffer that decodes to %T", v)
	}
	got := ts[0]
	if !reflect.DeepEqual(got, want) || unsafe.SliceData(got.Data) != unsafe.SliceData(want.Data) || cap(got.Data) != cap(want.Data) || cap(got.Shape) != cap(want.Shape) {
		t.Fatalf("BatchDecodeTensors = %#v, Decode = %#v", got, want)
	}
	checkDecodeStack(t, [][]byte{buf, buf, buf})
	return true
}

// checkDecodeStack checks BatchDecodeStack against Stack of what Decode
// gives, and reports whether it took bufs.
func checkDecodeStack(t *testing.T, bufs [][]byte) bool {
	t.Helper()
	got, ok := BatchDecodeStack(bufs)
	var rows []Tensor
	for _, b := range bufs {
		v, err := Decode(b)
		x, isT := v.(Tensor)
		if err != nil || !isT {
			if ok {
				t.Fatalf("BatchDecodeStack took a buffer that decodes to %T, %v", v, err)
			}
			return false
		}
		rows = append(rows, x)
	}
	want, err := Stack(rows)
	if !ok {
		if err == nil {
			t.Fatalf("BatchDecodeStack declined rows Stack stacks: %v", rows)
		}
		return false
	}
	if err != nil || !reflect.DeepEqual(got, want) || cap(got.Data) != cap(want.Data) || cap(got.Shape) != cap(want.Shape) {
		t.Fatalf("BatchDecodeStack = %#v, Stack = %#v, %v", got, want, err)
	}
	return true
}

func TestBatchDecodeTensors(t *testing.T) {
	took := 0
	for _, s := range fuzzSeeds(t) {
		if checkDecodeTensors(t, s) {
			took++
		}
	}
	// Every bare tensor the encoder writes takes the fast path, shapes of
	// many and large dimensions included.
	tensors := []Tensor{
		mustFromSlice(t, []float32{1.5, -2, 0.25}),
		Scalar(int16(-7)),
		mustFromSlice(t, []int32{}, 3, 0),
		mustFromSlice(t, make([]uint8, 300), 300),
		mustFromSlice(t, make([]uint8, 70000), 1, 70000),
		mustFromSlice(t, []int64{5}, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1),
	}
	var bufs [][]byte
	for _, x := range tensors {
		b := mustEncode(t, x)
		if !checkDecodeTensors(t, b) {
			t.Errorf("BatchDecodeTensors declined %s%v", x.DType, x.Shape)
		}
		bufs = append(bufs, b)
	}
	ts, ok := BatchDecodeTensors(bufs)
	if !ok || len(ts) != len(tensors) {
		t.Fatalf("batch of %d tensors: %d, %v", len(tensors), len(ts), ok)
	}
	if checkDecodeStack(t, bufs) {
		t.Errorf("BatchDecodeStack stacked tensors of different shapes")
	}
	other := mustEncode(t, mustFromSlice(t, []int32{1, 2, 3})) // float32[3] and int32[3]
	if checkDecodeStack(t, [][]byte{bufs[0], other}) || checkDecodeStack(t, [][]byte{bufs[0], mustEncode(t, "x")}) {
		t.Errorf("BatchDecodeStack stacked different dtypes, or a string")
	}
	for _, pair := range [][2]Tensor{
		{mustFromSlice(t, make([]int32, 6), 2, 3), mustFromSlice(t, make([]int32, 6), 3, 2)},
		{mustFromSlice(t, make([]uint8, 4), 4), mustFromSlice(t, make([]int32, 1), 1)},
	} {
		if checkDecodeStack(t, [][]byte{mustEncode(t, pair[0]), mustEncode(t, pair[1])}) {
			t.Errorf("BatchDecodeStack stacked %s%v and %s%v", pair[0].DType, pair[0].Shape, pair[1].DType, pair[1].Shape)
		}
	}
	// A cell with the header of the one before it is still checked whole.
	short := bytes.Clone(bufs[0])
	binary.LittleEndian.PutUint32(short[16:], 8) // 8 bytes for a float32[3]
	if _, err := Decode(short); err == nil {
		t.Fatal("a float32[3] of 8 bytes decodes")
	}
	if _, ok := BatchDecodeTensors([][]byte{bufs[0], short}); ok {
		t.Errorf("BatchDecodeTensors took a float32[3] of 8 bytes after a good one")
	}
	if _, ok := BatchDecodeStack([][]byte{bufs[0], short}); ok {
		t.Errorf("BatchDecodeStack took a float32[3] of 8 bytes after a good one")
	}
	if _, ok := BatchDecodeStack(nil); ok {
		t.Errorf("BatchDecodeStack of no buffers")
	}
	if _, ok := BatchDecodeTensors(nil); ok {
		t.Errorf("BatchDecodeTensors of no buffers")
	}
	if took < 7 {
		t.Errorf("BatchDecodeTensors took %d of the seeds", took)
	}
	// 16 dimensions do not fit a fixarray: left to Decode, which reads them.
	deep := mustEncode(t, mustFromSlice(t, []int64{5}, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1))
	if checkDecodeTensors(t, deep) {
		t.Errorf("BatchDecodeTensors took a 16-d shape")
	}
	if _, ok := BatchDecodeTensors([][]byte{bufs[0], mustEncode(t, "x")}); ok {
		t.Errorf("BatchDecodeTensors took a string")
	}
}

// FuzzDecodeTensorsPairs: the header cache of BatchDecodeTensors and
// BatchDecodeStack across two cells never yields something Decode would not.
func FuzzDecodeTensorsPairs(f *testing.F) {
	seeds := fuzzSeeds(f)
	for i := range seeds {
		f.Add(seeds[i], seeds[(i+1)%len(seeds)])
		f.Add(seeds[i], seeds[i])
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		bufs := [][]byte{a, b, a}
		ts, ok := BatchDecodeTensors(bufs)
		if ok {
			for i, buf := range bufs {
				v, err := Decode(buf)
				if err != nil {
					t.Fatalf("cell %d: BatchDecodeTensors took what Decode rejects: %v", i, err)
				}
				if !reflect.DeepEqual(v, ts[i]) {
					t.Fatalf("cell %d: %#v vs %#v", i, ts[i], v)
				}
			}
		}
		st, ok := BatchDecodeStack(bufs)
		if ok {
			if len(ts) != 3 {
				t.Fatalf("BatchDecodeStack took cells BatchDecodeTensors declined")
			}
			want, err := Stack(ts)
			if err != nil || !reflect.DeepEqual(want, st) {
				t.Fatalf("stack mismatch: %v", err)
			}
		}
	})
}
