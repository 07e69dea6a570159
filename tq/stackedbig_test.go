package tq_test

import (
	"context"
	"encoding/binary"
	"math"
	"runtime"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/codec"
	"github.com/tqgo/tqgo/tq"
)

// A stacked column of 512 KiB is allocated without zeroing (internal/uninit):
// every byte of it must come from its cells, whether read straight into it
// or decoded from another encoding and copied. Freed memory full of a
// pattern is left for the allocator to hand back, so that a row not
// written would show it.
//
// The second engine also clears Head and Body of a cell it answers in
// Value (a value of another length): the decoded cell must still land in
// its row of the column.
func TestLargeStackedReadWritesEveryRow(t *testing.T) {
	t.Run("reads into the rows", func(t *testing.T) {
		st := memory.New()
		testLargeStackedRead(t, st, st)
	})
	t.Run("drops the rows of other lengths", func(t *testing.T) {
		st := memory.New()
		testLargeStackedRead(t, st, dropsOtherRows{st})
	})
}

// dropsOtherRows is the memory store that sets Head and Body of a cell it
// answers in Value to nil.
type dropsOtherRows struct{ *memory.Store }

func (m dropsOtherRows) Read(ctx context.Context, cells []backends.ReadCell) error {
	if err := m.Store.Read(ctx, cells); err != nil {
		return err
	}
	for i := range cells {
		if cells[i].Value != nil {
			cells[i].Head, cells[i].Body = nil, nil
		}
	}
	return nil
}

func testLargeStackedRead(t *testing.T, st *memory.Store, engine backends.Store) {
	ctx := t.Context()
	c := newClient(t, engine, nil)
	const n, d = 4096, 32 // 512 KiB of float32
	keys := make([]string, n)
	rows := make([][]float32, n)
	for i := range rows {
		keys[i] = "k" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676))
		rows[i] = make([]float32, d)
		for j := range rows[i] {
			rows[i][j] = float32(i*d + j)
		}
	}
	if err := c.BatchPut(ctx, "p", keys, tq.Batch{"x": tq.JaggedOf(rows)}, nil); err != nil {
		t.Fatal(err)
	}
	// Every 7th row rewritten in another valid encoding (half of them of
	// another length): its values are int32(v*1000) bit patterns, as
	// alternativeEncoding writes them.
	m, err := c.Lookup(ctx, "p", keys)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]uint32, 0, n*d)
	for i := range rows {
		if i%7 != 3 {
			for _, v := range rows[i] {
				want = append(want, math.Float32bits(v))
			}
			continue
		}
		alt := alternativeEncoding(rows[i])
		if i%2 == 0 {
			alt = longerEncoding(alt) // read into Other, not into the row
		}
		key := backends.StorageKey(m.Rows[i].Index, "x", 0)
		if err := putRaw(ctx, st, []string{key}, [][]byte{alt}); err != nil {
			t.Fatal(err)
		}
		for j := range d {
			want = append(want, binary.LittleEndian.Uint32(alt[len(alt)-4*d+4*j:]))
		}
	}
	for round := range 3 {
		for range 8 {
			junk := make([]byte, n*d*4)
			for i := range junk {
				junk[i] = 0xAB
			}
			runtime.KeepAlive(junk)
		}
		runtime.GC()
		x := stackedOf(t, mustGet(t, c, "p", keys, "x")["x"])
		vals, err := codec.View[uint32](codec.Tensor{DType: codec.Uint32, Shape: []int64{n * d}, Data: x.Data})
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			if v != want[i] {
				t.Fatalf("read %d: row %d element %d = %#x, want %#x", round, i/d, i%d, v, want[i])
			}
		}
	}
}

// longerEncoding moves the data of an alternativeEncoding buffer 16 bytes
// further: still valid, and of another length than Encode's.
func longerEncoding(alt []byte) []byte {
	off := binary.LittleEndian.Uint32(alt[12:])
	out := make([]byte, len(alt)+16)
	copy(out, alt[:off])
	copy(out[off+16:], alt[off:])
	binary.LittleEndian.PutUint32(out[12:], off+16)
	if _, err := codec.Decode(out); err != nil {
		panic("longerEncoding: " + err.Error())
	}
	return out
}
