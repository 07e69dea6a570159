package tq_test

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/codec"
	"github.com/tqgo/tqgo/tq"
)

// On an engine that reads into caller memory, BatchGet stacks tensor
// columns straight from it; these tests put cells there that tq did not
// write the usual way, and check the read still returns what they hold.

// alternativeEncoding packs a float32 tensor of shape [d] (d < 128) as
// another writer may: the dimension as a uint8 (0xcc d), which readers
// must accept, one byte longer than Encode's fixint, same total length.
func alternativeEncoding(vals []float32) []byte {
	head := []byte{0x92, 0x01, 0x91, 0x92, 0xa7, 'f', 'l', 'o', 'a', 't', '3', '2', 0x91, 0xcc, byte(len(vals)), 0xd6, 0x11, 0, 0, 0, 0}
	const table = 4 + 8*2
	off := (table + len(head) + 15) &^ 15
	buf := make([]byte, off+4*len(vals))
	binary.LittleEndian.PutUint32(buf, 2)
	binary.LittleEndian.PutUint32(buf[4:], table)
	binary.LittleEndian.PutUint32(buf[8:], uint32(len(head)))
	binary.LittleEndian.PutUint32(buf[12:], uint32(off))
	binary.LittleEndian.PutUint32(buf[16:], uint32(4*len(vals)))
	copy(buf[table:], head)
	for i, v := range vals {
		binary.LittleEndian.PutUint32(buf[off+4*i:], uint32(int32(v*1000)))
	}
	return buf
}

func TestStackedReadOtherEncodings(t *testing.T) {
	ctx := t.Context()
	st := memory.New()
	c := newClient(t, st, nil)
	keys := []string{"a", "b", "c"}
	rows := [][]float32{{1, 2, 3}, {4, 5, 6}, {7, 8, 9}}
	if err := c.BatchPut(ctx, "p", keys, tq.Batch{"x": tq.JaggedOf(rows)}, nil); err != nil {
		t.Fatal(err)
	}
	m, err := c.Lookup(ctx, "p", keys)
	if err != nil {
		t.Fatal(err)
	}
	cellKey := func(i int) []string { return []string{backends.StorageKey(m.Rows[i].Index, "x", 0)} }

	// Row b rewritten with a valid encoding whose bytes before the data
	// differ from Encode's: the read decodes it and still stacks.
	alt := alternativeEncoding([]float32{0.004, 0.005, 0.006})
	if _, err := codec.Decode(alt); err != nil {
		t.Fatalf("the alternative encoding does not decode: %v", err)
	}
	if err := putRaw(ctx, st, cellKey(1), [][]byte{alt}); err != nil {
		t.Fatal(err)
	}
	x := stackedOf(t, mustGet(t, c, "p", keys, "x")["x"])
	vals, err := codec.View[float32](x)
	if err != nil {
		t.Fatal(err)
	}
	bBits := binary.LittleEndian.Uint32(alt[len(alt)-12:])
	if !slices.Equal(x.Shape, []int64{3, 3}) || vals[0] != 1 || vals[8] != 9 || binary.LittleEndian.Uint32(x.Data[12:]) != bBits {
		t.Fatalf("stacked %v %v, want rows a, b (as rewritten), c", x.Shape, vals)
	}

	// Row c holding another value than the metadata says: corrupt, the
	// cell named.
	other, err := codec.Encode([]any{int64(7)})
	if err != nil {
		t.Fatal(err)
	}
	if err := putRaw(ctx, st, cellKey(2), [][]byte{other}); err != nil {
		t.Fatal(err)
	}
	_, err = c.BatchGet(ctx, "p", keys, "x")
	var ke *tq.KeyError
	if !errors.As(err, &ke) || ke.Key != "c" || ke.Field != "x" || !errors.Is(err, codec.ErrCorrupt) {
		t.Fatalf("BatchGet of a list where a tensor should be: %v, want a KeyError for c/x matching codec.ErrCorrupt", err)
	}

	// Row a holding garbage of the expected length: a corrupt-cell error
	// naming the key and field.
	junk := make([]byte, len(alt))
	for i := range junk {
		junk[i] = 0xee
	}
	if err := putRaw(ctx, st, cellKey(0), [][]byte{junk}); err != nil {
		t.Fatal(err)
	}
	_, err = c.BatchGet(ctx, "p", keys, "x")
	if !errors.As(err, &ke) || ke.Key != "a" || ke.Field != "x" || !errors.Is(err, codec.ErrCorrupt) {
		t.Fatalf("BatchGet of a garbage cell: %v, want a KeyError for a/x matching codec.ErrCorrupt", err)
	}
}

// slowRead reads after a pause.
type slowRead struct{ *memory.Store }

func (s slowRead) Read(ctx context.Context, cells []backends.ReadCell) error {
	select {
	case <-time.After(20 * time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Store.Read(ctx, cells)
}

// TestMixedReadErrors: when the fields that stack and the others are read
// at once, the others' ErrNotReady or missing cell is what BatchGet
// reports (and retries on), not a cancellation or the stacked read.
func TestMixedReadErrors(t *testing.T) {
	ctx := t.Context()
	st := memory.New()
	c := newClient(t, slowRead{st}, nil)
	keys := []string{"a", "b"}
	if err := c.BatchPut(ctx, "p", keys, tq.Batch{"x": tq.JaggedOf([][]float32{{1, 2}, {3, 4}})}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.BatchPut(ctx, "p", keys[:1], tq.Batch{"y": tq.ValuesOf([]string{"only a"})}, nil); err != nil {
		t.Fatal(err)
	}
	_, err := c.BatchGet(ctx, "p", keys, "x", "y")
	if !isKeyErr(err, tq.ErrNotReady, "b", "y") {
		t.Fatalf("BatchGet of a field row b lacks: %v, want ErrNotReady for b/y", err)
	}

	if err := c.BatchPut(ctx, "p", keys[1:], tq.Batch{"y": tq.ValuesOf([]string{"b too"})}, nil); err != nil {
		t.Fatal(err)
	}
	m, err := c.Lookup(ctx, "p", keys)
	if err != nil {
		t.Fatal(err)
	}
	if err := delRaw(ctx, st, []string{backends.StorageKey(m.Rows[1].Index, "y", 0)}); err != nil {
		t.Fatal(err)
	}
	_, err = c.BatchGet(ctx, "p", keys, "x", "y")
	if !errors.Is(err, tq.ErrNotFound) {
		t.Fatalf("BatchGet of a cell the engine lost: %v, want ErrNotFound", err)
	}
}
