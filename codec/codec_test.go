package codec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

// patterned returns n bytes that differ from their neighbours.
func patterned(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31) + seed
	}
	return b
}

func roundTrip(t *testing.T, v any) any {
	t.Helper()
	buf := mustEncode(t, v)
	got, err := Decode(buf)
	if err != nil {
		t.Fatalf("Decode(Encode(%v)): %v", v, err)
	}
	if want := normalize(v); !equal(want, got) {
		t.Fatalf("round trip of %#v gave %#v", v, got)
	}
	return got
}

func TestRoundTripEveryDType(t *testing.T) {
	for _, dt := range DTypes() {
		t.Run(dt.String(), func(t *testing.T) {
			data := patterned(6*dt.ItemSize(), byte(dt))
			if dt == Bool {
				for i := range data {
					data[i] &= 1
				}
			}
			x, err := NewTensor(dt, []int64{2, 3}, data)
			if err != nil {
				t.Fatal(err)
			}
			got := roundTrip(t, x).(Tensor)
			if got.DType != dt || !slices.Equal(got.Shape, []int64{2, 3}) {
				t.Fatalf("got %s%v", got.DType, got.Shape)
			}
			if parsed, err := ParseDType("torch." + dt.String()); err != nil || parsed != dt {
				t.Fatalf("ParseDType(torch.%s) = %v, %v", dt, parsed, err)
			}
		})
	}
}

func TestRoundTripTypedViews(t *testing.T) {
	check := func(name string, x Tensor, view func(Tensor) (any, error), want any) {
		t.Run(name, func(t *testing.T) {
			got := roundTrip(t, x).(Tensor)
			v, err := view(got)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(v) != fmt.Sprint(want) {
				t.Fatalf("View gave %v, want %v", v, want)
			}
		})
	}
	check("bool", mustFromSlice(t, []bool{true, false, true}), func(x Tensor) (any, error) { return View[bool](x) }, []bool{true, false, true})
	check("uint8", mustFromSlice(t, []uint8{0, 255}), func(x Tensor) (any, error) { return View[uint8](x) }, []uint8{0, 255})
	check("int8", mustFromSlice(t, []int8{-128, 127}), func(x Tensor) (any, error) { return View[int8](x) }, []int8{-128, 127})
	check("int16", mustFromSlice(t, []int16{-32768, 7}), func(x Tensor) (any, error) { return View[int16](x) }, []int16{-32768, 7})
	check("int32", mustFromSlice(t, []int32{math.MinInt32, 9}, 1, 2), func(x Tensor) (any, error) { return View[int32](x) }, []int32{math.MinInt32, 9})
	check("int64", mustFromSlice(t, []int64{math.MinInt64, math.MaxInt64}), func(x Tensor) (any, error) { return View[int64](x) }, []int64{math.MinInt64, math.MaxInt64})
	check("uint16", mustFromSlice(t, []uint16{65535}), func(x Tensor) (any, error) { return View[uint16](x) }, []uint16{65535})
	check("uint32", mustFromSlice(t, []uint32{1 << 31}), func(x Tensor) (any, error) { return View[uint32](x) }, []uint32{1 << 31})
	check("uint64", mustFromSlice(t, []uint64{math.MaxUint64}), func(x Tensor) (any, error) { return View[uint64](x) }, []uint64{math.MaxUint64})
	check("float32", mustFromSlice(t, []float32{1.5, float32(math.Inf(-1))}), func(x Tensor) (any, error) { return View[float32](x) }, []float32{1.5, float32(math.Inf(-1))})
	check("float64", mustFromSlice(t, []float64{math.Pi, -0.0}), func(x Tensor) (any, error) { return View[float64](x) }, []float64{math.Pi, -0.0})
	check("complex64", mustFromSlice(t, []complex64{1 + 2i}), func(x Tensor) (any, error) { return View[complex64](x) }, []complex64{1 + 2i})
	check("complex128", mustFromSlice(t, []complex128{3 - 4i}), func(x Tensor) (any, error) { return View[complex128](x) }, []complex128{3 - 4i})
	bf16, _ := NewTensor(BFloat16, []int64{2}, []byte{0x80, 0x3f, 0x00, 0x40})
	check("bfloat16 as uint16", bf16, func(x Tensor) (any, error) { return ViewAs[uint16](x) }, []uint16{0x3f80, 0x4000})
	f8, _ := NewTensor(Float8E4M3FN, []int64{3}, []byte{1, 2, 0xff})
	check("float8 as uint8", f8, func(x Tensor) (any, error) { return ViewAs[uint8](x) }, []uint8{1, 2, 0xff})
}

func TestRoundTripGeneralTypes(t *testing.T) {
	x := mustFromSlice(t, []float32{1, 2, 3, 4}, 2, 2)
	px := &x
	var nilTensor *Tensor
	longStr := strings.Repeat("ü", 40000) // str32 (80000 bytes)
	many := make(map[string]any)
	for i := range 40 { // map16
		many[fmt.Sprintf("k%02d", i)] = i
	}
	longList := make([]any, 70000) // array32
	for i := range longList {
		longList[i] = i % 300
	}
	cases := []struct {
		name string
		v    any
	}{
		{"nil", nil},
		{"true", true},
		{"false", false},
		{"int", -1},
		{"int big", math.MaxInt},
		{"int8", int8(math.MinInt8)},
		{"int16", int16(math.MinInt16)},
		{"int32", int32(math.MaxInt32)},
		{"int64 min", int64(math.MinInt64)},
		{"int64 max", int64(math.MaxInt64)},
		{"int64 small positive", int64(5)},
		{"uint", uint(7)},
		{"uint8 zero", uint8(0)},
		{"uint8", uint8(255)},
		{"uint16", uint16(65535)},
		{"uint32", uint32(math.MaxUint32)},
		{"uint64", uint64(math.MaxUint64)},
		{"uintptr", uintptr(1234567)},
		{"float32", float32(1.25)},
		{"float32 NaN", float32(math.NaN())},
		{"float32 -0", float32(math.Copysign(0, -1))},
		{"float64", 1e300},
		{"float64 -Inf", math.Inf(-1)},
		{"float64 NaN", math.NaN()},
		{"empty string", ""},
		{"string", "héllo"},
		{"str8", strings.Repeat("a", 200)},
		{"str16", strings.Repeat("b", 1000)},
		{"str32", longStr},
		{"empty bytes", []byte{}},
		{"nil bytes", []byte(nil)},
		{"bytes", []byte{0, 1, 2, 0xff}},
		{"bin16", patterned(300, 1)},
		{"bin32", patterned(70000, 2)},
		{"empty list", []any{}},
		{"nil list", []any(nil)},
		{"list", []any{1, "a", nil, true, 2.5}},
		{"long list", longList},
		{"empty map", map[string]any{}},
		{"nil map", map[string]any(nil)},
		{"map", map[string]any{"a": 1, "b": []any{uint8(2)}, "": "empty key"}},
		{"map16", many},
		{"nested", map[string]any{"l": []any{map[string]any{"deep": []any{[]any{int16(-3)}}}}, "m": map[string]any{}}},
		{"tensor", x},
		{"*tensor", px},
		{"nil *tensor", nilTensor},
		{"tensors in list", []any{x, px, nilTensor, x}},
		{"tensors in map", map[string]any{"a": x, "b": px, "c": []any{x}}},
		{"mixed", map[string]any{"ids": []any{int64(1), uint64(2)}, "t": x, "name": "s", "raw": []byte("r")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := roundTrip(t, c.v)
			// The decoded types are the normalised ones, not merely equal values.
			if want := normalize(c.v); fmt.Sprintf("%T", want) != fmt.Sprintf("%T", got) {
				t.Fatalf("decoded %T, want %T", got, want)
			}
		})
	}
}

func TestEmptyAndScalarTensors(t *testing.T) {
	cases := []struct {
		name  string
		x     Tensor
		shape []int64
	}{
		{"shape [0]", mustFromSlice(t, []float32{}), []int64{0}},
		{"shape [3,0]", mustFromSlice(t, []int64{}, 3, 0), []int64{3, 0}},
		{"shape [0,5]", mustFromSlice(t, []uint8{}, 0, 5), []int64{0, 5}},
		{"0-d float64", Scalar(3.5), []int64{}},
		{"0-d bool", Scalar(true), []int64{}},
		{"0-d int8", Scalar(int8(-3)), []int64{}},
		{"0-d nil shape", Tensor{DType: Int32, Data: []byte{1, 2, 3, 4}}, []int64{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := roundTrip(t, c.x).(Tensor)
			if got.Shape == nil || !slices.Equal(got.Shape, c.shape) {
				t.Fatalf("shape %#v, want %#v", got.Shape, c.shape)
			}
			n, err := NumElements(got.Shape)
			if err != nil || n*got.DType.ItemSize() != len(got.Data) {
				t.Fatalf("NumElements = %d, %v for %d bytes", n, err, len(got.Data))
			}
		})
	}
	v, err := View[float64](roundTrip(t, Scalar(3.5)).(Tensor))
	if err != nil || len(v) != 1 || v[0] != 3.5 {
		t.Fatalf("scalar view = %v, %v", v, err)
	}
}

func TestDecodeIsZeroCopy(t *testing.T) {
	x := mustFromSlice(t, []float32{1, 2, 3, 4, 5, 6, 7, 8})
	raw := []byte("raw bytes payload")
	buf := mustEncode(t, map[string]any{"t": x, "b": raw, "s": "str"})
	v, err := Decode(buf)
	if err != nil {
		t.Fatal(err)
	}
	m := v.(map[string]any)
	gotT, gotB := m["t"].(Tensor), m["b"].([]byte)
	if !within(gotT.Data, buf) || !within(gotB, buf) {
		t.Fatalf("decoded tensor or bytes do not alias the buffer")
	}
	if cap(gotB) != len(gotB) || cap(gotT.Data) != len(gotT.Data) {
		t.Fatalf("aliased views must be capacity-limited: cap %d/%d, len %d/%d", cap(gotB), cap(gotT.Data), len(gotB), len(gotT.Data))
	}
	if off := uintptr(unsafe.Pointer(&gotT.Data[0])) - uintptr(unsafe.Pointer(&buf[0])); off%tensorAlign != 0 {
		t.Fatalf("tensor payload at offset %d, not %d-aligned", off, tensorAlign)
	}
	gotT.Data[0] ^= 0xff // writes reach the buffer
	if !bytes.Contains(buf, gotT.Data[:4]) {
		t.Fatal("write through the decoded tensor did not reach the buffer")
	}
	// An append to a decoded []byte must not clobber what follows it.
	before := slices.Clone(buf)
	_ = append(gotB, 'X')
	if !bytes.Equal(before, buf) {
		t.Fatal("append to a decoded []byte wrote into the buffer")
	}

	bufs, err := HeapAllocator([]int{len(buf), len(buf)})
	if err != nil {
		t.Fatal(err)
	}
	copy(bufs[0], buf)
	copy(bufs[1], buf)
	vs, err := BatchDecodeFrom(bufs)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vs {
		m := v.(map[string]any)
		if !within(m["t"].(Tensor).Data, bufs[i]) || !within(m["b"].([]byte), bufs[i]) {
			t.Fatalf("batch object %d does not alias its buffer", i)
		}
	}
}

// alignedCopy returns a copy of b whose first byte sits at an address
// congruent to shift modulo 16.
func alignedCopy(b []byte, shift int) []byte {
	raw := make([]byte, len(b)+32)
	start := (16 - int(uintptr(unsafe.Pointer(&raw[0]))%16)) % 16
	out := raw[start+shift : start+shift+len(b)]
	copy(out, b)
	return out
}

func TestViewAlignment(t *testing.T) {
	want := []float64{1.5, -2.25, 1e10}
	buf := mustEncode(t, mustFromSlice(t, want))
	cases := []struct {
		name    string
		shift   int
		aliases bool
	}{
		{"aligned", 0, true},
		{"odd address", 1, false},
		{"4-aligned only", 4, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := alignedCopy(buf, c.shift)
			v, err := Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			x := v.(Tensor)
			if !within(x.Data, b) {
				t.Fatal("decoded tensor does not alias the buffer")
			}
			got, err := View[float64](x)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("View = %v, want %v", got, want)
			}
			if Aliases(got, x) != c.aliases {
				t.Fatalf("Aliases = %v, want %v", !c.aliases, c.aliases)
			}
			got[0] = 99
			if again, _ := View[float64](x); (again[0] == 99) != c.aliases {
				t.Fatalf("write through View reached Data: %v, want %v", again[0] == 99, c.aliases)
			}
		})
	}
}

func TestViewErrors(t *testing.T) {
	f32 := mustFromSlice(t, []float32{1})
	bf16, _ := NewTensor(BFloat16, []int64{1}, []byte{0, 0})
	badBool := Tensor{DType: Bool, Shape: []int64{2}, Data: []byte{1, 2}}
	cases := []struct {
		name string
		f    func() error
		want error
	}{
		{"View wrong type", func() error { _, err := View[int32](f32); return err }, ErrDTypeMismatch},
		{"View float16 as uint16", func() error { _, err := View[uint16](bf16); return err }, ErrDTypeMismatch},
		{"ViewAs wrong size", func() error { _, err := ViewAs[uint32](bf16); return err }, ErrDTypeMismatch},
		{"ViewAs bool as uint8", func() error { _, err := ViewAs[uint8](Scalar(true)); return err }, ErrDTypeMismatch},
		{"View invalid bool", func() error { _, err := View[bool](badBool); return err }, ErrInvalidBool},
		{"ViewAs invalid bool", func() error { _, err := ViewAs[bool](badBool); return err }, ErrInvalidBool},
		{"View bad shape", func() error {
			_, err := View[float32](Tensor{DType: Float32, Shape: []int64{2}, Data: make([]byte, 4)})
			return err
		}, ErrShapeMismatch},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := c.f(); !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
		})
	}
	if v, err := ViewAs[uint16](bf16); err != nil || len(v) != 1 {
		t.Fatalf("ViewAs[uint16](bfloat16) = %v, %v", v, err)
	}
}

func TestRowStackSameLayout(t *testing.T) {
	x := mustFromSlice(t, []int32{1, 2, 3, 4, 5, 6}, 3, 2)
	r1, err := x.Row(1)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := View[int32](r1); !slices.Equal(v, []int32{3, 4}) || !within(r1.Data, x.Data) {
		t.Fatalf("Row(1) = %v", v)
	}
	if _, err := x.Row(3); !errors.Is(err, ErrRowIndex) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("Row(3): %v", err)
	}
	if _, err := (Tensor{DType: Int32, Shape: []int64{4, 2}, Data: x.Data}).Row(3); !errors.Is(err, ErrShapeMismatch) {
		t.Fatalf("Row of a tensor shorter than its shape: %v", err)
	}
	if _, err := Scalar(1.0).Row(0); !errors.Is(err, ErrShapeMismatch) {
		t.Fatalf("Row of 0-d: %v", err)
	}
	rows, err := x.Rows()
	if err != nil || len(rows) != 3 {
		t.Fatalf("Rows = %d rows, %v", len(rows), err)
	}
	for i, r := range rows {
		if ri, _ := x.Row(i); !reflect.DeepEqual(r, ri) || cap(r.Data) != cap(ri.Data) || cap(r.Shape) != cap(ri.Shape) {
			t.Fatalf("Rows()[%d] = %#v, Row(%d) = %#v", i, r, i, ri)
		}
	}
	if _, err := (Tensor{DType: Int32, Shape: []int64{4, 2}, Data: x.Data}).Rows(); !errors.Is(err, ErrShapeMismatch) {
		t.Fatalf("Rows of a tensor shorter than its shape: %v", err)
	}
	if _, err := Scalar(1.0).Rows(); !errors.Is(err, ErrShapeMismatch) {
		t.Fatalf("Rows of 0-d: %v", err)
	}
	r0, _ := x.Row(0)
	r2, _ := x.Row(2)
	s, err := Stack([]Tensor{r2, r0})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := View[int32](s); !slices.Equal(s.Shape, []int64{2, 2}) || !slices.Equal(v, []int32{5, 6, 1, 2}) {
		t.Fatalf("Stack = %v%v", s.Shape, v)
	}
	if !SameLayout(r0, r2) || SameLayout(r0, x) {
		t.Fatal("SameLayout")
	}
	if _, err := Stack([]Tensor{r0, x}); !errors.Is(err, ErrShapeMismatch) {
		t.Fatalf("Stack of mixed layouts: %v", err)
	}
	if _, err := Stack(nil); !errors.Is(err, ErrShapeMismatch) {
		t.Fatalf("Stack(nil): %v", err)
	}
}

// batchValues is a batch mixing large tensors (several shares of the pool),
// small tensors, and objects with several tensors and padding between them.
func batchValues(t *testing.T) []any {
	large1 := mustFromSlice(t, make([]float32, 300<<10/4))
	copy(large1.Data, patterned(len(large1.Data), 3))
	large2, _ := NewTensor(Uint8, []int64{1 << 20}, patterned(1<<20, 5))
	small, _ := NewTensor(Int16, []int64{3}, patterned(6, 7))
	odd, _ := NewTensor(Uint8, []int64{13}, patterned(13, 9))
	return []any{
		large1,
		small,
		map[string]any{"a": odd, "b": large2, "c": small, "n": 3},
		"just a string",
		&large2,
		[]any{odd, odd, odd},
		Scalar(int64(42)),
		nil,
	}
}

// dirtyAlloc hands out buffers filled with junk and longer than asked, to
// prove that packing writes every byte of the packed size.
func dirtyAlloc(sizes []int) ([][]byte, error) {
	out := make([][]byte, len(sizes))
	for i, s := range sizes {
		out[i] = bytes.Repeat([]byte{0xa5}, s+7)
	}
	return out, nil
}

func TestPoolAndSerialPackIdentically(t *testing.T) {
	vals := batchValues(t)
	var want [][]byte
	for _, v := range vals {
		want = append(want, mustEncode(t, v))
	}
	cases := []struct {
		name     string
		opts     Options
		alloc    Allocator
		wantPool bool
	}{
		{"serial", Options{DSMaxWorkers: 1}, HeapAllocator, false},
		{"serial dirty", Options{DSMaxWorkers: 1}, dirtyAlloc, false},
		{"pool16", Options{DSMaxWorkers: 16, Oversubscribe: true, PackThreshold: 1, PoolMinBatchBytes: 1}, HeapAllocator, true},
		{"pool16 dirty", Options{DSMaxWorkers: 16, Oversubscribe: true, PackThreshold: 1, PoolMinBatchBytes: 1}, dirtyAlloc, true},
		{"pool2 dirty", Options{DSMaxWorkers: 2, Oversubscribe: true, PackThreshold: 1, PoolMinBatchBytes: 1}, dirtyAlloc, true},
		{"sizeaware gate closed", Options{DSMaxWorkers: 16, Oversubscribe: true, PoolMinBatchBytes: 1 << 30}, dirtyAlloc, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := NewPacker(c.opts)
			defer p.Close()
			for range 3 { // scratch reuse must not leak between batches
				got, err := p.BatchEncodeInto(vals, c.alloc)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != len(want) {
					t.Fatalf("%d buffers, want %d", len(got), len(want))
				}
				for i := range want {
					if !bytes.Equal(got[i], want[i]) {
						t.Fatalf("object %d: packed %d bytes differ from Encode's %d", i, len(got[i]), len(want[i]))
					}
				}
				decoded, err := BatchDecodeFrom(got)
				if err != nil {
					t.Fatal(err)
				}
				for i, v := range vals {
					if !equal(normalize(v), decoded[i]) {
						t.Fatalf("object %d did not round-trip", i)
					}
				}
			}
			if s := p.Stats(); (s.PoolRuns > 0) != c.wantPool || s.Batches != 3 {
				t.Fatalf("stats %+v, want pool used = %v", s, c.wantPool)
			}
		})
	}
}

func TestPackerStats(t *testing.T) {
	big, _ := NewTensor(Uint8, []int64{1 << 20}, make([]byte, 1<<20))
	mid, _ := NewTensor(Uint8, []int64{300 << 10}, make([]byte, 300<<10))
	small, _ := NewTensor(Uint8, []int64{512}, make([]byte, 512))
	smalls := []any{small, small, small, "x", map[string]any{"t": small}}
	cases := []struct {
		name                      string
		opts                      Options
		vals                      []any
		serial, pooled, poolRuns  uint64
		minTasks                  uint64
		noTasks                   bool
		alsoCheckDefaultThreshold bool
	}{
		{
			name: "small objects never reach the pool",
			opts: Options{DSMaxWorkers: 16, Oversubscribe: true, PoolMinBatchBytes: 1},
			vals: smalls, serial: 5, noTasks: true,
		},
		{
			name: "large objects go to the pool, small ones stay",
			opts: Options{DSMaxWorkers: 16, Oversubscribe: true, PoolMinBatchBytes: 1},
			vals: append([]any{big, big}, smalls...), serial: 5, pooled: 2, poolRuns: 1, minTasks: 1,
		},
		{
			name: "large bytes below PoolMinBatchBytes do not wake the pool",
			opts: Options{DSMaxWorkers: 16, Oversubscribe: true, PoolMinBatchBytes: 1 << 30},
			vals: append([]any{big, mid, mid}, smalls...), serial: 8, noTasks: true,
		},
		{
			name: "one worker is serial",
			opts: Options{DSMaxWorkers: 1, PackThreshold: 1, PoolMinBatchBytes: 1},
			vals: []any{big, big, big}, serial: 3, noTasks: true,
		},
		{
			name: "too little to share stays on the caller",
			opts: Options{DSMaxWorkers: 16, Oversubscribe: true, PackThreshold: 1, PoolMinBatchBytes: 1},
			vals: smalls, serial: 5, noTasks: true,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := NewPacker(c.opts)
			defer p.Close()
			if _, err := p.BatchEncodeInto(c.vals, HeapAllocator); err != nil {
				t.Fatal(err)
			}
			s := p.Stats()
			if s.Batches != 1 || s.SerialObjects != c.serial || s.PooledObjects != c.pooled || s.PoolRuns != c.poolRuns {
				t.Fatalf("stats %+v, want serial %d pooled %d runs %d", s, c.serial, c.pooled, c.poolRuns)
			}
			if c.noTasks && s.PoolTasks != 0 || s.PoolTasks < c.minTasks {
				t.Fatalf("PoolTasks = %d", s.PoolTasks)
			}
		})
	}
	if got := NewPacker(Options{}).Options(); got.PoolMinBatchBytes != DefaultPoolMinBatchBytes || got.PackThreshold != DefaultPackThreshold {
		t.Fatalf("defaults: %+v", got)
	}
	// The default gate: a batch just under DefaultPoolMinBatchBytes of large
	// objects stays serial, one just over it wakes the pool.
	under, _ := NewTensor(Uint8, []int64{DefaultPoolMinBatchBytes - 4096}, make([]byte, DefaultPoolMinBatchBytes-4096))
	over, _ := NewTensor(Uint8, []int64{DefaultPackThreshold}, make([]byte, DefaultPackThreshold))
	for _, c := range []struct {
		vals []any
		pool bool
	}{{[]any{under, small}, false}, {[]any{under, over, small}, true}} {
		p := NewPacker(Options{DSMaxWorkers: 2, Oversubscribe: true})
		if _, err := p.BatchEncodeInto(c.vals, HeapAllocator); err != nil {
			t.Fatal(err)
		}
		if s := p.Stats(); (s.PoolRuns == 1) != c.pool {
			t.Fatalf("default gate: stats %+v, want pool %v", s, c.pool)
		}
		p.Close()
	}
}

func TestDeterministicMaps(t *testing.T) {
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%03d", (i*37)%100)
	}
	forward, backward := map[string]any{}, map[string]any{}
	for i, k := range keys {
		forward[k] = map[string]any{"i": i, k: []any{k}}
	}
	for i := len(keys) - 1; i >= 0; i-- {
		backward[keys[i]] = map[string]any{keys[i]: []any{keys[i]}, "i": i}
	}
	want := mustEncode(t, forward)
	for range 20 {
		if !bytes.Equal(mustEncode(t, forward), want) || !bytes.Equal(mustEncode(t, backward), want) {
			t.Fatal("equal maps encoded to different bytes")
		}
	}
	// The keys appear sorted in the bytes.
	sorted := slices.Sorted(func(yield func(string) bool) {
		for k := range forward {
			if !yield(k) {
				return
			}
		}
	})
	last := -1
	for _, k := range sorted {
		at := bytes.Index(want, append([]byte{byte(0xa0 | len(k))}, k...))
		if at <= last {
			t.Fatalf("key %q at %d, after %d", k, at, last)
		}
		last = at
	}
}

func TestDepthLimit(t *testing.T) {
	nest := func(depth int) any {
		var v any = int64(1)
		for range depth {
			v = []any{v}
		}
		return v
	}
	roundTrip(t, nest(MaxDepth))
	if _, err := Encode(nest(MaxDepth + 1)); !errors.Is(err, ErrTooDeep) {
		t.Fatalf("too deep: %v", err)
	}
	cyclic := []any{1, nil}
	cyclic[1] = cyclic
	if _, err := Encode(cyclic); !errors.Is(err, ErrTooDeep) {
		t.Fatalf("cyclic list: %v", err)
	}
	wide := []any{nil, nil, nil}
	wide[0], wide[1], wide[2] = wide, wide, wide
	if _, err := Encode(wide); !errors.Is(err, ErrTooDeep) {
		t.Fatalf("cyclic fan-out list: %v", err)
	}
	m := map[string]any{"x": 1}
	m["self"] = []any{m}
	if _, err := Encode(m); !errors.Is(err, ErrTooDeep) {
		t.Fatalf("cyclic map: %v", err)
	}
	p := NewPacker(Options{})
	defer p.Close()
	_, err := p.BatchEncodeInto([]any{1, cyclic}, HeapAllocator)
	var oe *ObjectError
	if !errors.As(err, &oe) || oe.Index != 1 || !errors.Is(err, ErrTooDeep) {
		t.Fatalf("batch with a cyclic value: %v", err)
	}
}

func TestNumElementsAndValidate(t *testing.T) {
	cases := []struct {
		name  string
		shape []int64
		n     int
		err   error
	}{
		{"0-d", nil, 1, nil},
		{"empty", []int64{3, 0}, 0, nil},
		{"plain", []int64{2, 3, 4}, 24, nil},
		{"negative", []int64{2, -1}, 0, ErrNegativeDim},
		{"overflow", []int64{1 << 62, 1 << 62}, 0, ErrTooLarge},
		{"over MaxInt", []int64{1 << 62, 2}, 0, ErrTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n, err := NumElements(c.shape)
			if !errors.Is(err, c.err) || (c.err == nil && n != c.n) {
				t.Fatalf("NumElements(%v) = %d, %v; want %d, %v", c.shape, n, err, c.n, c.err)
			}
		})
	}
	tensors := []struct {
		name string
		t    Tensor
		err  error
	}{
		{"invalid dtype", Tensor{Shape: []int64{1}, Data: []byte{0}}, ErrUnknownDType},
		{"dtype out of table", Tensor{DType: 200, Shape: []int64{1}, Data: []byte{0}}, ErrUnknownDType},
		{"short data", Tensor{DType: Float32, Shape: []int64{2}, Data: make([]byte, 7)}, ErrShapeMismatch},
		{"long data", Tensor{DType: Float32, Shape: []int64{2}, Data: make([]byte, 9)}, ErrShapeMismatch},
		{"negative", Tensor{DType: Uint8, Shape: []int64{-4}}, ErrNegativeDim},
		// 2^30 float64 elements claim 8 GiB: more than the table can
		// describe, and more than the 16 bytes there are.
		{"claims 8 GiB", Tensor{DType: Float64, Shape: []int64{1 << 30}, Data: make([]byte, 16)}, ErrShapeMismatch},
		// elements fit in an int, bytes overflow uint64
		{"bytes overflow", Tensor{DType: Float64, Shape: []int64{1 << 61}, Data: make([]byte, 8)}, ErrShapeMismatch},
		{"elements overflow", Tensor{DType: Uint8, Shape: []int64{1 << 40, 1 << 40}, Data: nil}, ErrTooLarge},
		{"huge but empty", Tensor{DType: Float64, Shape: []int64{1 << 40, 0}, Data: nil}, nil},
	}
	for _, c := range tensors {
		t.Run(c.name, func(t *testing.T) {
			if err := c.t.Validate(); !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
				t.Fatalf("Validate = %v, want %v", err, c.err)
			}
			// Encode agrees with Validate, with and without the fast path.
			for _, v := range []any{c.t, &c.t, []any{c.t}} {
				if _, err := Encode(v); !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
					t.Fatalf("Encode(%T) = %v, want %v", v, err, c.err)
				}
			}
		})
	}
}

func TestEncodeErrors(t *testing.T) {
	manyTensors := make([]any, MaxTensors+1)
	for i := range manyTensors {
		manyTensors[i] = Tensor{DType: Uint8, Shape: []int64{0}}
	}
	manyDims := make([]int64, maxDims+1)
	for i := range manyDims {
		manyDims[i] = 1
	}
	type unsupported struct{}
	cases := []struct {
		name string
		v    any
		want error
	}{
		{"invalid dtype", Tensor{DType: 0, Shape: []int64{1}, Data: []byte{1}}, ErrUnknownDType},
		{"unknown dtype", Tensor{DType: numDTypes, Shape: []int64{1}, Data: []byte{1}}, ErrUnknownDType},
		{"unknown dtype in a map", map[string]any{"t": Tensor{DType: 99}}, ErrUnknownDType},
		{"shape mismatch", Tensor{DType: Float32, Shape: []int64{3}, Data: make([]byte, 8)}, ErrShapeMismatch},
		{"negative dim", Tensor{DType: Float32, Shape: []int64{-1}}, ErrNegativeDim},
		{"negative dim behind a pointer", &Tensor{DType: Float32, Shape: []int64{2, -2}}, ErrNegativeDim},
		{"unsupported type", unsupported{}, ErrUnsupportedType},
		{"unsupported in a list", []any{1, make(chan int)}, ErrUnsupportedType},
		{"unsupported map type", map[string]int{"a": 1}, ErrUnsupportedType},
		{"typed slice", []int{1}, ErrUnsupportedType},
		{"too many tensors", manyTensors, ErrTooLarge},
		{"too many dimensions", Tensor{DType: Uint8, Shape: manyDims, Data: []byte{7}}, ErrTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Encode(c.v)
			if !errors.Is(err, c.want) {
				t.Fatalf("Encode = %v, want %v", err, c.want)
			}
			if errors.Is(err, ErrCorrupt) {
				t.Fatalf("an encoding error must not claim a corrupt buffer: %v", err)
			}
		})
	}
	roundTrip(t, manyTensors[:MaxTensors])
}

// craft builds a packed buffer from raw payloads, laid out as the encoder
// lays them out, so a test can put any header and body on the wire.
func craft(head []byte, tensors ...[]byte) []byte {
	count := 1 + len(tensors)
	end := 4 + 8*count + len(head)
	offs := []int{4 + 8*count}
	for _, t := range tensors {
		end = align(end)
		offs = append(offs, end)
		end += len(t)
	}
	buf := make([]byte, end)
	binary.LittleEndian.PutUint32(buf, uint32(count))
	for i, p := range append([][]byte{head}, tensors...) {
		binary.LittleEndian.PutUint32(buf[4+8*i:], uint32(offs[i]))
		binary.LittleEndian.PutUint32(buf[8+8*i:], uint32(len(p)))
		copy(buf[offs[i]:], p)
	}
	return buf
}

// hdr is the header bytes for tensors described as dtype name and shape.
func hdr(metas ...tensorMeta) []byte {
	h := header{Version: formatVersion, Tensors: metas}
	b, err := h.MarshalMsg(nil)
	if err != nil {
		panic(err)
	}
	return b
}

func ref(i uint32) []byte { return binary.BigEndian.AppendUint32([]byte{0xd6, tensorExt}, i) }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func TestDecodeErrors(t *testing.T) {
	f32 := mustFromSlice(t, []float32{1, 2})
	valid := mustEncode(t, f32) // [2][20,len0][48,8] header body pad data
	headLen := int(binary.LittleEndian.Uint32(valid[8:]))
	mutate := func(f func(b []byte) []byte) []byte { return f(slices.Clone(valid)) }
	put := func(off int, v uint32) []byte {
		return mutate(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[off:], v); return b })
	}
	f32meta := tensorMeta{DType: "float32", Shape: []int64{2}}
	eight := make([]byte, 8)
	deep := cat(bytes.Repeat([]byte{0x91}, MaxDepth+1), []byte{0xc0})

	cases := []struct {
		name string
		buf  []byte
		want []error // every one must match, besides ErrCorrupt
	}{
		{"empty", nil, []error{ErrTruncated}},
		{"3 bytes", valid[:3], []error{ErrTruncated}},
		{"table cut", valid[:10], []error{ErrCountTooLarge}},
		{"header cut", valid[:20+headLen-1], []error{ErrOutOfRange}},
		{"data cut", valid[:len(valid)-1], []error{ErrOutOfRange}},
		{"header shorter than it says", craft(hdr(f32meta)[:5], eight), []error{ErrTruncated}},
		{"count 0", put(0, 0), []error{ErrCountTooLarge}},
		{"count too large for buffer", put(0, math.MaxUint32), []error{ErrCountTooLarge}},
		{"count over MaxTensors", cat(binary.LittleEndian.AppendUint32(nil, MaxTensors+2), make([]byte, 8*(MaxTensors+2))), []error{ErrCountTooLarge}},
		{"table has more payloads than the header", craft(cat(hdr(f32meta), ref(0)), eight, eight), []error{ErrCountTooLarge}},
		{"header lists more tensors than the table", craft(cat(hdr(f32meta, f32meta), ref(0), ref(1)), eight), []error{ErrCountTooLarge}},
		{"offset past the end", put(4, uint32(len(valid))), []error{ErrOutOfRange}},
		{"size past the end", put(8, math.MaxUint32), []error{ErrOutOfRange}},
		{"offset+size wraps 32 bits", put(12, math.MaxUint32-3), []error{ErrOutOfRange}},
		{"payload overlaps the table", put(4, 0), []error{ErrOutOfRange}},
		{"tensor size out of range", put(16, 1<<20), []error{ErrOutOfRange}},
		{"corrupt header: not a tuple", mutate(func(b []byte) []byte { b[20] = 0x93; return b }), nil},
		{"corrupt header: not a list", mutate(func(b []byte) []byte { b[20] = 0xc0; return b }), nil},
		{"unknown version", mutate(func(b []byte) []byte { b[21] = 2; return b }), nil},
		{"dtype not a string", craft(cat([]byte{0x92, 0x01, 0x91, 0x92, 0x07, 0x91, 0x02}, ref(0)), eight), nil},
		{"unknown dtype name", mutate(func(b []byte) []byte {
			i := bytes.Index(b, []byte("float32"))
			b[i+6] = '3' // float33
			return b
		}), []error{ErrUnknownDType}},
		{"torch. prefix on the wire", craft(cat(hdr(tensorMeta{DType: "torch.float32", Shape: []int64{2}}), ref(0)), eight), []error{ErrUnknownDType}},
		{"shape x itemsize != payload size", put(16, 4), []error{ErrShapeMismatch}},
		{"negative dim", craft(cat(hdr(tensorMeta{DType: "float32", Shape: []int64{-2}}), ref(0)), eight), []error{ErrNegativeDim}},
		{"shape overflows", craft(cat(hdr(tensorMeta{DType: "uint8", Shape: []int64{1 << 62, 1 << 62}}), ref(0)), nil), []error{ErrTooLarge}},
		{"dims count past the header", craft(cat([]byte{0x92, 0x01, 0x91, 0x92, 0xa5}, []byte("uint8"), []byte{0xdc, 0xff, 0xff}), nil), []error{ErrTruncated}},
		{"more dims than allowed", craft(cat([]byte{0x92, 0x01, 0x91, 0x92, 0xa5}, []byte("uint8"), []byte{0xdd, 0xff, 0xff, 0xff, 0xff}), nil), nil},
		{"bytes after the value", craft(cat(hdr(), []byte{0xc0, 0xc0})), nil},
		{"no value", craft(hdr()), []error{ErrTruncated}},
		{"tensor reference out of range", craft(cat(hdr(f32meta), ref(5)), eight), []error{ErrOutOfRange}},
		{"tensor referenced twice", craft(cat(hdr(f32meta), []byte{0x92}, ref(0), ref(0)), eight), []error{ErrOutOfRange}},
		{"tensors referenced out of order", craft(cat(hdr(f32meta, f32meta), []byte{0x92}, ref(1), ref(0)), eight, eight), []error{ErrOutOfRange}},
		{"tensor never referenced", craft(cat(hdr(f32meta), []byte{0xc0}), eight), []error{ErrCountTooLarge}},
		{"truncated reference", craft(cat(hdr(), []byte{0xd6, tensorExt, 0})), []error{ErrTruncated}},
		{"unknown extension", craft(cat(hdr(), []byte{0xd6, 5, 0, 0, 0, 0})), nil},
		{"other extension", craft(cat(hdr(), []byte{0xd4, tensorExt, 0})), nil},
		{"nested too deeply", craft(cat(hdr(), deep)), []error{ErrTooDeep}},
		{"list count past the body", craft(cat(hdr(), []byte{0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0})), []error{ErrTruncated}},
		{"nested list counts past the body", craft(cat(hdr(), []byte{0x9f, 0x9e, 0x9d}, bytes.Repeat([]byte{0xc0}, 20))), []error{ErrTruncated}},
		{"map count past the body", craft(cat(hdr(), []byte{0xdf, 0x00, 0x10, 0x00, 0x00, 0xc0})), []error{ErrTruncated}},
		{"map key not a string", craft(cat(hdr(), []byte{0x81, 0x01, 0xc0})), nil},
		{"never-used type byte", craft(cat(hdr(), []byte{0xc1})), nil},
		{"string past the body", craft(cat(hdr(), []byte{0xa5, 'a'})), []error{ErrTruncated}},
		{"bin past the body", craft(cat(hdr(), []byte{0xc6, 0xff, 0xff, 0xff, 0xff})), []error{ErrTruncated}},
		{"uint cut", craft(cat(hdr(), []byte{0xcf, 0})), []error{ErrTruncated}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, err := Decode(c.buf)
			if err == nil {
				t.Fatalf("Decode succeeded with %#v", v)
			}
			for _, want := range append(c.want, ErrCorrupt) {
				if !errors.Is(err, want) {
					t.Fatalf("err = %v, want it to match %v", err, want)
				}
			}
			_, err = BatchDecodeFrom([][]byte{valid, c.buf})
			var oe *ObjectError
			if !errors.As(err, &oe) || oe.Index != 1 || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("BatchDecodeFrom: %v", err)
			}
		})
	}
	// Every prefix and every single-byte corruption of a valid buffer fails
	// cleanly or decodes to a value that re-encodes.
	nested := mustEncode(t, map[string]any{"t": f32, "l": []any{uint16(300), "s", []byte{1}}})
	for n := range len(nested) {
		if _, err := Decode(nested[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("prefix of %d bytes: %v", n, err)
		}
	}
	for i := range nested {
		for _, x := range []byte{0x01, 0x80, 0xff} {
			b := slices.Clone(nested)
			b[i] ^= x
			if v, err := Decode(b); err != nil && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("byte %d ^ %#x: %v", i, x, err)
			} else if err == nil {
				if _, err := Encode(v); err != nil {
					t.Fatalf("byte %d ^ %#x decoded to a value Encode rejects: %v", i, x, err)
				}
			}
		}
	}
}

func TestAllocErrors(t *testing.T) {
	vals := []any{mustFromSlice(t, []float32{1, 2}), "two", 3}
	boom := errors.New("backend out of memory")
	cases := []struct {
		name  string
		alloc Allocator
		index int // -1: no *ObjectError
		also  error
	}{
		{"error", func([]int) ([][]byte, error) { return nil, boom }, -1, boom},
		{"too few buffers", func(s []int) ([][]byte, error) { b, _ := HeapAllocator(s); return b[:2], nil }, -1, nil},
		{"too many buffers", func(s []int) ([][]byte, error) { b, _ := HeapAllocator(append(s, 1)); return b, nil }, -1, nil},
		{"nil buffers", func(s []int) ([][]byte, error) { return nil, nil }, -1, nil},
		{"buffer too small", func(s []int) ([][]byte, error) {
			b, _ := HeapAllocator(s)
			b[1] = b[1][:len(b[1])-1]
			return b, nil
		}, 1, nil},
	}
	for _, c := range cases {
		for _, opts := range []Options{{DSMaxWorkers: 1}, {DSMaxWorkers: 16, Oversubscribe: true, PackThreshold: 1, PoolMinBatchBytes: 1}} {
			t.Run(fmt.Sprintf("%s/workers=%d", c.name, opts.DSMaxWorkers), func(t *testing.T) {
				p := NewPacker(opts)
				defer p.Close()
				bufs, err := p.BatchEncodeInto(vals, c.alloc)
				if !errors.Is(err, ErrAlloc) || bufs != nil {
					t.Fatalf("err = %v, bufs %v", err, bufs)
				}
				if c.also != nil && !errors.Is(err, c.also) {
					t.Fatalf("err = %v, want it to wrap %v", err, c.also)
				}
				var oe *ObjectError
				if got := errors.As(err, &oe); got != (c.index >= 0) || got && oe.Index != c.index {
					t.Fatalf("err = %v, want *ObjectError index %d", err, c.index)
				}
				if s := p.Stats(); s.Batches != 0 {
					t.Fatalf("a failed batch counted: %+v", s)
				}
			})
		}
	}
	// A bad value fails before alloc is called, naming the object.
	called := false
	p := NewPacker(Options{})
	defer p.Close()
	_, err := p.BatchEncodeInto([]any{1, 2, Tensor{DType: Float32, Shape: []int64{3}}}, func(s []int) ([][]byte, error) {
		called = true
		return HeapAllocator(s)
	})
	var oe *ObjectError
	if !errors.As(err, &oe) || oe.Index != 2 || !errors.Is(err, ErrShapeMismatch) || called {
		t.Fatalf("err = %v, alloc called %v", err, called)
	}
	if !strings.Contains(err.Error(), "object 2") {
		t.Fatalf("message %q does not name the object", err)
	}
	// Longer buffers are cut to the packed size.
	bufs, err := p.BatchEncodeInto(vals, dirtyAlloc)
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range bufs {
		if want := mustEncode(t, vals[i]); !bytes.Equal(b, want) {
			t.Fatalf("object %d: %d bytes, want %d", i, len(b), len(want))
		}
	}
	// An empty batch is fine.
	if bufs, err := p.BatchEncodeInto(nil, HeapAllocator); err != nil || len(bufs) != 0 {
		t.Fatalf("empty batch: %v, %v", bufs, err)
	}
}

func TestClose(t *testing.T) {
	opts := Options{DSMaxWorkers: 16, Oversubscribe: true, PackThreshold: 1, PoolMinBatchBytes: 1}
	p := NewPacker(opts)
	if _, err := p.BatchEncodeInto(batchValues(t), HeapAllocator); err != nil {
		t.Fatal(err)
	}
	if p.Stats().PoolRuns == 0 {
		t.Fatal("the pool did not run")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := p.BatchEncodeInto([]any{1}, HeapAllocator); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	// The package-level BatchEncodeInto closes its own packer.
	if _, err := BatchEncodeInto(batchValues(t), HeapAllocator, opts); err != nil {
		t.Fatal(err)
	}
	verifyNoLeaks(t)
}

func TestConcurrentBatches(t *testing.T) {
	p := NewPacker(Options{DSMaxWorkers: 4, Oversubscribe: true, PackThreshold: 64 << 10, PoolMinBatchBytes: 1})
	vals := batchValues(t)
	var want [][]byte
	for _, v := range vals {
		want = append(want, mustEncode(t, v))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 4 {
		wg.Go(func() {
			for range 10 {
				alloc := Allocator(HeapAllocator)
				if g%2 == 1 {
					alloc = dirtyAlloc
				}
				got, err := p.BatchEncodeInto(vals, alloc)
				if err != nil {
					errs <- err
					return
				}
				for i := range want {
					if !bytes.Equal(got[i], want[i]) {
						errs <- fmt.Errorf("goroutine %d: object %d differs", g, i)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Batches != 40 || s.PoolRuns == 0 {
		t.Fatalf("stats %+v", s)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	verifyNoLeaks(t)
}
