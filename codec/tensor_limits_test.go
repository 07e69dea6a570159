package codec

import (
	"errors"
	"fmt"
	"testing"
	"unsafe"
)

// catchPanic runs f and returns what it panicked with, or nil.
func catchPanic(f func()) (p any) {
	defer func() { p = recover() }()
	f()
	return nil
}

// A ~50-byte buffer that Encode writes and Decode accepts describes a
// uint8 tensor of shape [2^62, 0]: zero elements, so it validates. Rows of
// it must fail (ErrTooLarge), not make 2^62 rows (a panic in makeslice; at
// 2^36 a fatal out-of-memory; at 2^24 ~1 GiB from 50 bytes of input).
func TestRowsOfDecodedHugeEmptyTensor(t *testing.T) {
	src := Tensor{DType: Uint8, Shape: []int64{1 << 62, 0}}
	buf, err := Encode(src)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	v, err := Decode(buf)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	x := v.(Tensor)
	var rerr error
	if p := catchPanic(func() { _, rerr = x.Rows() }); p != nil {
		t.Fatalf("Rows of a decoded %d-byte buffer (shape %v) panicked: %v", len(buf), x.Shape, p)
	}
	if rerr == nil {
		t.Fatalf("Rows of shape %v returned %d rows without error", x.Shape, x.Shape[0])
	}
}

// Stack (and BatchDecodeStack, "Stack of what BatchDecodeTensors gives")
// never returns a tensor its own Validate rejects: each row [2^62, 0] is
// valid, and the stacked [2, 2^62, 0] must be refused, not returned (Row,
// Rows and Encode of it would fail, and tq's stacked column would turn every
// row into a zero Tensor{}).
func TestStackOfHugeEmptyRows(t *testing.T) {
	row := Tensor{DType: Uint8, Shape: []int64{1 << 62, 0}}
	if err := row.Validate(); err != nil {
		t.Fatalf("row: %v", err)
	}
	var problems []string
	if st, err := Stack([]Tensor{row, row}); err == nil {
		if verr := st.Validate(); verr != nil {
			problems = append(problems, fmt.Sprintf("Stack returned %v%v with nil error, but Validate: %v", st.DType, st.Shape, verr))
		}
	}
	buf, err := Encode(row)
	if err != nil {
		t.Fatal(err)
	}
	if st, ok := BatchDecodeStack([][]byte{buf, buf}); ok {
		if _, rerr := st.Row(0); rerr != nil {
			problems = append(problems, fmt.Sprintf("BatchDecodeStack ok, but Row(0) of %v: %v", st.Shape, rerr))
		}
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// RowBytes of a valid tensor with no rows, int16 [0, 2^62], whose row
// would be 2^63 bytes, is not a negative wrapped product.
func TestRowBytesOfNoRowsDoesNotOverflow(t *testing.T) {
	x := Tensor{DType: Int16, Shape: []int64{0, 1 << 62}}
	if err := x.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if rb := x.RowBytes(); rb < 0 {
		t.Fatalf("RowBytes of %s%v = %d", x.DType, x.Shape, rb)
	}
}

// A caller's bad row index is ErrRowIndex, a call error: it must not match
// ErrCorrupt (a malformed buffer), as ErrOutOfRange would.
func TestRowIndexErrorIsNotCorrupt(t *testing.T) {
	x, err := FromSlice([]int32{1, 2, 3, 4}, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	_, err = x.Row(5)
	if err == nil {
		t.Fatal("Row(5) of 2 rows succeeded")
	}
	if errors.Is(err, ErrCorrupt) {
		t.Fatalf("Row(5) on a valid in-memory tensor matches ErrCorrupt: %v", err)
	}
}

// When every pool worker is busy, the nonblocking pool refuses every
// Submit and the caller copies all chunks itself: PoolRuns and
// PooledObjects must not count a batch no pool goroutine touched.
func TestStatsCountNoPoolRunWhenNoTaskWasSubmitted(t *testing.T) {
	p := NewPacker(Options{DSMaxWorkers: 2, Oversubscribe: true, PackThreshold: 1, PoolMinBatchBytes: 1})
	defer p.Close()
	pool := p.poolLocked()
	release := make(chan struct{})
	for range pool.Cap() {
		if err := pool.Submit(func() { <-release }); err != nil {
			t.Fatal(err)
		}
	}
	defer close(release)
	big := make([]byte, 4<<20)
	x, _ := NewTensor(Uint8, []int64{int64(len(big))}, big)
	if _, err := p.BatchEncodeInto([]any{x}, HeapAllocator); err != nil {
		t.Fatal(err)
	}
	s := p.Stats()
	if s.PoolTasks == 0 && (s.PoolRuns != 0 || s.PooledObjects != 0) {
		t.Fatalf("no task reached the pool, yet stats say %+v", s)
	}
}

// BatchDecodeStackInto writes into dst when it is large enough (and only
// its first bytes), into fresh memory when it is not, and leaves dst as it
// was when the cells do not stack.
func TestBatchDecodeStackInto(t *testing.T) {
	var bufs [][]byte
	for i := range 3 {
		x, err := FromSlice([]int32{int32(i), int32(i + 10)}, 2)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Encode(x)
		if err != nil {
			t.Fatal(err)
		}
		bufs = append(bufs, b)
	}
	want := []int32{0, 10, 1, 11, 2, 12}
	dst := make([]byte, 40) // 24 needed
	for i := range dst {
		dst[i] = 0xee
	}
	st, ok := BatchDecodeStackInto(bufs, dst)
	if !ok {
		t.Fatal("cells of one shape did not stack")
	}
	if v, _ := View[int32](st); fmt.Sprint(v) != fmt.Sprint(want) || &st.Data[0] != &dst[0] || cap(st.Data) != 24 || dst[24] != 0xee {
		t.Errorf("into a large enough dst: %v (in dst: %v, cap %d, byte after: %#x)", v, &st.Data[0] == &dst[0], cap(st.Data), dst[24])
	}
	small := make([]byte, 23)
	st, ok = BatchDecodeStackInto(bufs, small)
	if v, _ := View[int32](st); !ok || fmt.Sprint(v) != fmt.Sprint(want) || within(st.Data, small) {
		t.Errorf("into a dst too small: %v, ok %v, in dst %v", v, ok, within(st.Data, small))
	}
	odd := make([]byte, 41)
	st, ok = BatchDecodeStackInto(bufs, odd[1:])
	if v, _ := View[int32](st); !ok || fmt.Sprint(v) != fmt.Sprint(want) || within(st.Data, odd) {
		t.Errorf("into a dst not aligned for int32: %v, ok %v, in dst %v", v, ok, within(st.Data, odd))
	}
	other, _ := Encode("not a tensor")
	before := append([]byte(nil), dst...)
	if _, ok := BatchDecodeStackInto([][]byte{bufs[0], other}, dst); ok || string(dst) != string(before) {
		t.Errorf("cells that do not stack: ok %v, dst changed %v", ok, string(dst) != string(before))
	}
}

func TestAlignedFor(t *testing.T) {
	buf := make([]int64, 4) // 8-byte aligned
	b := unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), 32)
	for _, tc := range []struct {
		off, item int
		want      bool
	}{{0, 8, true}, {0, 16, true}, {8, 16, true}, {4, 8, false}, {4, 4, true}, {2, 4, false}, {2, 2, true}, {1, 2, false}, {1, 1, true}, {3, 0, true}} {
		if got := AlignedFor(b[tc.off:], tc.item); got != tc.want {
			t.Errorf("AlignedFor(offset %d, item %d) = %v, want %v", tc.off, tc.item, got, tc.want)
		}
	}
}
