package rules

import (
	"errors"
	"slices"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
)

// putNewUpdates is one update per key at base on, setting fields at
// generation 0.
func putNewUpdates(base uint64, keys, fields []string) []metadata.RowUpdate {
	ups := make([]metadata.RowUpdate, len(keys))
	for i, k := range keys {
		f := map[string]metadata.FieldInfo{}
		for _, name := range fields {
			f[name] = metadata.FieldInfo{DType: "int8"}
		}
		ups[i] = metadata.RowUpdate{Key: k, Index: base + uint64(i), Fields: f}
	}
	return ups
}

func mustSnap(t *testing.T, p *Partition) []byte {
	t.Helper()
	b, err := p.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A PutNew commits its rows at the block's indexes at generation 0 in
// one step; each refusal changes nothing and leaves the indexes usable.
func TestPutNew(t *testing.T) {
	p := New()
	fields := []string{"a", "b"}
	if err := p.Block(1, fields, 100, 7, 4); err != nil {
		t.Fatal(err)
	}
	res, err := p.PutNew(2, 100, 7, []string{"x", "y"}, fields, nil, putNewUpdates(100, []string{"x", "y"}, fields))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Superseded)+len(res.Stale) != 0 {
		t.Fatalf("new rows superseded %v, stale %v", res.Superseded, res.Stale)
	}
	rows := p.Lookup([]string{"x", "y"})
	for i, r := range rows {
		if r == nil || r.Index != 100+uint64(i) || r.Fields["a"].Gen != 0 || r.Fields["b"].Gen != 0 {
			t.Fatalf("row %d: %+v", i, r)
		}
	}
	if n, left := p.Blocks(); n != 1 || left != 2 {
		t.Fatalf("blocks %d, left %d; want 1, 2", n, left)
	}

	refused := func(name string, want error, base uint64, keys, fs []string, ups []metadata.RowUpdate, token ...uint64) {
		t.Helper()
		before := mustSnap(t, p)
		tok := uint64(7)
		if len(token) > 0 {
			tok = token[0]
		}
		if _, err := p.PutNew(p.Now(), base, tok, keys, fs, nil, ups); !errors.Is(err, want) {
			t.Fatalf("%s: %v, want %v", name, err, want)
		}
		if !slices.Equal(before, mustSnap(t, p)) {
			t.Fatalf("%s: the refusal changed the partition", name)
		}
	}
	refused("a key with a row", backends.ErrConflict, 102, []string{"z", "x"}, fields, putNewUpdates(102, []string{"z", "x"}, fields))
	refused("a taken index", backends.ErrConflict, 101, []string{"z"}, fields, putNewUpdates(101, []string{"z"}, fields))
	refused("past the block", backends.ErrConflict, 103, []string{"z", "w"}, fields, putNewUpdates(103, []string{"z", "w"}, fields))
	refused("no block", backends.ErrReservationLost, 7, []string{"z"}, fields, putNewUpdates(7, []string{"z"}, fields))
	refused("a field not the block's", backends.ErrConflict, 102, []string{"z"}, []string{"c"}, putNewUpdates(102, []string{"z"}, []string{"c"}))
	refused("a key twice", backends.ErrInvalid, 102, []string{"z", "z"}, fields, putNewUpdates(102, []string{"z", "z"}, fields))
	bad := putNewUpdates(102, []string{"z"}, fields)
	bad[0].Fields = map[string]metadata.FieldInfo{"a": {Gen: 1}}
	refused("a generation not 0", backends.ErrInvalid, 102, []string{"z"}, fields, bad)
	refused("an index not the key's", backends.ErrInvalid, 102, []string{"z"}, fields, putNewUpdates(103, []string{"z"}, fields))
	refused("another block's token", backends.ErrReservationLost, 102, []string{"z"}, fields, putNewUpdates(102, []string{"z"}, fields), 8)
	refused("an update leaving out a field", backends.ErrInvalid, 102, []string{"z"}, fields, putNewUpdates(102, []string{"z"}, fields[:1]))
	refused("no field", backends.ErrInvalid, 102, []string{"z"}, nil, putNewUpdates(102, []string{"z"}, nil))
	before := mustSnap(t, p)
	if err := p.Block(p.Now(), fields, 101, 7, 4); !errors.Is(err, ErrCorrupt) || !slices.Equal(before, mustSnap(t, p)) {
		t.Fatalf("a block overlapping a live one: %v, want ErrCorrupt and nothing changed", err)
	}

	// A capacity with no room: a FullError, and the indexes stay the
	// caller's for when there is room.
	p.SetCapacity(4, metadata.Capacity{Rows: 3})
	_, err = p.PutNew(5, 102, 7, []string{"z", "w"}, fields, nil, putNewUpdates(102, []string{"z", "w"}, fields))
	var full *metadata.FullError
	if !errors.As(err, &full) || full.Asked.Rows != 2 {
		t.Fatalf("PutNew beyond the capacity: %v", err)
	}
	p.SetCapacity(6, metadata.Capacity{})
	if _, err := p.PutNew(7, 102, 7, []string{"z", "w"}, fields, nil, putNewUpdates(102, []string{"z", "w"}, fields)); err != nil {
		t.Fatal(err)
	}
	if n, _ := p.Blocks(); n != 0 {
		t.Fatalf("a used-up block is still live (%d)", n)
	}
	if p.Committed() != 4 || len(p.Garbage()) != 0 {
		t.Fatalf("%d rows, garbage %v", p.Committed(), p.Garbage())
	}
}

// A capacity that bounds bytes refuses blocks and PutNew: their cells
// are written before it could count them.
func TestBlockBytesCapacity(t *testing.T) {
	p := New()
	if err := p.Block(1, []string{"a"}, 0, 7, 2); err != nil {
		t.Fatal(err)
	}
	p.SetCapacity(2, metadata.Capacity{Bytes: 1 << 20})
	if err := p.Block(3, []string{"a"}, 2, 7, 2); !errors.Is(err, backends.ErrConflict) {
		t.Fatalf("Block under a bytes bound: %v", err)
	}
	if _, err := p.PutNew(4, 0, 7, []string{"k"}, []string{"a"}, []int64{10}, putNewUpdates(0, []string{"k"}, []string{"a"})); !errors.Is(err, backends.ErrConflict) {
		t.Fatalf("PutNew under a bytes bound: %v", err)
	}
	if n, _ := p.Blocks(); n != 1 {
		t.Fatalf("%d blocks, want the first alone", n)
	}
}

// An abandoned block's untaken indexes are garbage once Abort passes
// it; a release makes garbage of the written ones alone; either way a
// PutNew at them is refused after.
func TestBlockEnds(t *testing.T) {
	p := New()
	fields := []string{"a", "b"}
	if err := p.Block(1_000, fields, 10, 7, 3); err != nil {
		t.Fatal(err)
	}
	if err := p.Block(5_000, []string{"a"}, 20, 7, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := p.PutNew(6_000, 10, 7, []string{"x"}, fields, nil, putNewUpdates(10, []string{"x"}, fields)); err != nil {
		t.Fatal(err)
	}
	if p.Empty() {
		t.Fatal("a partition with live blocks is empty")
	}
	p.Abort(7_000, 5_500) // the first was used at 6,000: live; the second is not
	want := []metadata.Ref{{Index: 20, Field: "a"}, {Index: 21, Field: "a"}, {Index: 22, Field: "a"}}
	if !slices.Equal(p.Garbage(), want) {
		t.Fatalf("garbage %v, want %v", p.Garbage(), want)
	}
	_, err := p.PutNew(7_100, 20, 7, []string{"y"}, []string{"a"}, nil, putNewUpdates(20, []string{"y"}, []string{"a"}))
	if !errors.Is(err, backends.ErrConflict) || errors.Is(err, backends.ErrReservationLost) {
		t.Fatalf("PutNew in an aborted block: %v, want ErrConflict alone (its cells are garbage)", err)
	}
	p.Swept(7_200, want)
	before := mustSnap(t, p)
	p.ReleaseBlock(p.Now(), 10, 8, []uint64{10, 12}) // another block's token: nothing
	if !slices.Equal(before, mustSnap(t, p)) {
		t.Fatal("a release naming another block's token changed the partition")
	}
	p.ReleaseBlock(7_300, 10, 7, []uint64{10, 12})
	want = []metadata.Ref{{Index: 12, Field: "a"}, {Index: 12, Field: "b"}} // 10 was taken, 11 not written
	if !slices.Equal(p.Garbage(), want) {
		t.Fatalf("garbage %v, want %v", p.Garbage(), want)
	}
	if n, _ := p.Blocks(); n != 0 {
		t.Fatalf("%d blocks after the release", n)
	}
	if _, err := p.PutNew(7_400, 11, 7, []string{"y"}, fields, nil, putNewUpdates(11, []string{"y"}, fields)); !errors.Is(err, backends.ErrReservationLost) {
		t.Fatalf("PutNew in a released block, at an index it did not name written: %v, want ErrReservationLost", err)
	}
	before = mustSnap(t, p)
	p.ReleaseBlock(p.Now(), 10, 7, nil) // again: nothing
	if !slices.Equal(before, mustSnap(t, p)) {
		t.Fatal("a second release changed the partition")
	}
}

func TestBlockInvalid(t *testing.T) {
	p := New()
	for _, c := range []struct {
		fields []string
		n      int
	}{{[]string{"a"}, 0}, {[]string{"a"}, MaxBlock + 1}, {nil, 1}, {[]string{"b", "a"}, 1}, {[]string{"a", "a"}, 1}} {
		if err := p.Block(1, c.fields, 0, 7, c.n); !errors.Is(err, backends.ErrInvalid) {
			t.Fatalf("Block(%q, %d): %v", c.fields, c.n, err)
		}
	}
	if n, _ := p.Blocks(); n != 0 {
		t.Fatalf("%d blocks after refusals", n)
	}
}

// A partition holds maxBlocks live blocks at most: the next is refused,
// and one ending makes room.
func TestBlockLimit(t *testing.T) {
	p := New()
	for i := range maxBlocks {
		if err := p.Block(1, []string{"a"}, uint64(2*i), 7, 1); err != nil {
			t.Fatalf("block %d: %v", i, err)
		}
	}
	if err := p.Block(1, []string{"a"}, 2*maxBlocks, 7, 1); !errors.Is(err, backends.ErrConflict) {
		t.Fatalf("block %d: %v, want ErrConflict", maxBlocks+1, err)
	}
	p.ReleaseBlock(2, 0, 7, nil)
	if err := p.Block(3, []string{"a"}, 2*maxBlocks+2, 7, 1); err != nil {
		t.Fatalf("a block after a release made room: %v", err)
	}
}
