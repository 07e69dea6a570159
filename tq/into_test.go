package tq_test

import (
	"slices"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/codec"
	"github.com/tqgo/tqgo/tq"
)

// dataStart is where a stacked column's bytes begin.
func dataStart(t *testing.T, col tq.Column) *byte {
	t.Helper()
	x := stackedOf(t, col)
	if len(x.Data) == 0 {
		t.Fatal("stacked column without data")
	}
	return unsafe.SliceData(x.Data)
}

// stepBatch is a step's batch of n rows: two tensor fields and a string.
func stepBatch(step, n int) tq.Batch {
	x := make([]float32, 3*n)
	y := make([]int64, n)
	s := make([]string, n)
	for i := range n {
		for j := range 3 {
			x[3*i+j] = float32(step*1000 + 10*i + j)
		}
		y[i] = int64(step*100 + i)
		s[i] = string(rune('a'+step)) + string(rune('a'+i%26))
	}
	return tq.Batch{"x": tq.Stacked(x, n, 3), "y": tq.Stacked(y, n), "s": tq.ValuesOf(s)}
}

// readStepsInto puts steps 0..steps-1 of n rows into partitions prefix+step
// and reads each into the batch read before it, checking the values; each
// read goes to seen, if set.
func readStepsInto(t *testing.T, c *tq.Client, prefix string, n, steps int, seen func(step int, got tq.Batch)) {
	t.Helper()
	keys := keysN("k", n)
	var prev tq.Batch
	for step := range steps {
		part := prefix + string(rune('0'+step))
		mustPut(t, c, part, keys, stepBatch(step, n), nil)
		got, err := c.BatchGetInto(t.Context(), part, keys, prev)
		if err != nil {
			t.Fatal(err)
		}
		checkStep(t, got, step, n)
		if seen != nil {
			seen(step, got)
		}
		prev = got
	}
}

func checkStep(t *testing.T, b tq.Batch, step, n int) {
	t.Helper()
	want := stepBatch(step, n)
	if !slices.Equal(flat[float32](t, b["x"]), flat[float32](t, want["x"])) || !slices.Equal(flat[int64](t, b["y"]), flat[int64](t, want["y"])) ||
		!slices.Equal(b["s"].Values(), want["s"].Values()) {
		t.Fatalf("step %d read back other values", step)
	}
}

// Each step's read lands in the memory of the step before's stacked
// columns, on an engine that reads into the destinations and on one that
// answers every other cell whole; fields that are not stacked are read as
// usual.
func TestBatchGetIntoReusesColumns(t *testing.T) {
	for _, eng := range []struct {
		name string
		data backends.Store
	}{{"memory", memory.New()}, {"answers whole", wholeReader{memory.New(), new(atomic.Int32), func(_, i int) bool { return i%2 == 1 }}}} {
		t.Run(eng.name, func(t *testing.T) {
			c := newClient(t, eng.data, nil)
			var xAt, yAt *byte
			readStepsInto(t, c, "step", 40, 4, func(step int, got tq.Batch) {
				if step == 0 {
					xAt, yAt = dataStart(t, got["x"]), dataStart(t, got["y"])
				} else if dataStart(t, got["x"]) != xAt || dataStart(t, got["y"]) != yAt {
					t.Errorf("step %d: stacked columns in fresh memory, not in the step before's", step)
				}
			})
		})
	}
}

// into's memory is taken only where it is large enough, only up to each
// column's length, and never for two columns that share bytes.
func TestBatchGetIntoTakesOnlyWhatIsSafe(t *testing.T) {
	ctx := t.Context()
	c := newClient(t, memory.New(), nil)
	const n = 8
	keys := keysN("k", n)
	mustPut(t, c, "p", keys, stepBatch(1, n), nil)

	t.Run("too small", func(t *testing.T) {
		small := tq.Stacked(make([]float32, 3*n-1), 3*n-1)
		got, err := c.BatchGetInto(ctx, "p", keys, tq.Batch{"x": small})
		if err != nil {
			t.Fatal(err)
		}
		checkStep(t, got, 1, n)
		if dataStart(t, got["x"]) == dataStart(t, small) {
			t.Error("a column too small for the read was written into")
		}
	})
	t.Run("not past its length", func(t *testing.T) {
		big := make([]int64, 2*n)
		for i := range big {
			big[i] = -1
		}
		// Long enough: its first n rows are taken, not the one after.
		got, err := c.BatchGetInto(ctx, "p", keys, tq.Batch{"y": tq.Stacked(big[:n+1], n+1)})
		if err != nil {
			t.Fatal(err)
		}
		checkStep(t, got, 1, n)
		if dataStart(t, got["y"]) != (*byte)(unsafe.Pointer(&big[0])) {
			t.Error("a column large enough was not reused")
		}
		if big[n] != -1 {
			t.Fatalf("big[%d] = %d: the read wrote past the rows it needed", n, big[n])
		}
		// One row short, though its capacity would hold the read: not taken.
		raw := make([]byte, 16*n)
		for i := range raw {
			raw[i] = 0xee
		}
		short := tq.StackedTensor(codec.Tensor{DType: codec.Int64, Shape: []int64{n - 1}, Data: raw[:8*(n-1)]})
		if _, err := c.BatchGetInto(ctx, "p", keys, tq.Batch{"y": short}); err != nil {
			t.Fatal(err)
		}
		for i, v := range raw {
			if v != 0xee {
				t.Fatalf("raw[%d] = %#x: a column was written past its length, into its capacity", i, v)
			}
		}
	})
	t.Run("overlapping columns", func(t *testing.T) {
		buf := make([]int64, 4*n)
		into := tq.Batch{
			"x": tq.Stacked(buf[:2*n], 2*n),
			"y": tq.Stacked(buf[n:2*n], n), // inside x's memory
		}
		got, err := c.BatchGetInto(ctx, "p", keys, into)
		if err != nil {
			t.Fatal(err)
		}
		checkStep(t, got, 1, n)
		x, _ := got["x"].Tensor()
		y, _ := got["y"].Tensor()
		lo, hi := uintptr(unsafe.Pointer(&x.Data[0])), uintptr(unsafe.Pointer(&x.Data[0]))+uintptr(len(x.Data))
		if p := uintptr(unsafe.Pointer(&y.Data[0])); p+uintptr(len(y.Data)) > lo && p < hi {
			t.Error("two columns of the result share memory")
		}
	})
	t.Run("misaligned", func(t *testing.T) {
		// A uint8 column at an odd address is large enough for x's
		// float32 rows, but a float32 view of it would have to copy.
		raw := make([]byte, 4*3*n+1)
		odd := tq.Stacked(raw[1:], len(raw)-1)
		got, err := c.BatchGetInto(ctx, "p", keys, tq.Batch{"x": odd}, "x")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(flat[float32](t, got["x"]), flat[float32](t, stepBatch(1, n)["x"])) {
			t.Fatal("read back other values")
		}
		x, _ := got["x"].Tensor()
		if dataStart(t, got["x"]) == &raw[1] || !codec.AlignedFor(x.Data, 4) {
			t.Error("a column not aligned for float32 was written into")
		}
	})
	t.Run("nil into", func(t *testing.T) {
		got, err := c.BatchGetInto(ctx, "p", keys, nil, "x")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || !slices.Equal(flat[float32](t, got["x"]), flat[float32](t, stepBatch(1, n)["x"])) {
			t.Errorf("BatchGetInto(nil) = %v", got)
		}
	})
}
