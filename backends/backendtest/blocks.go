package backendtest

import (
	"errors"
	"slices"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
)

// newRows is one update per key at base on, each of fields at
// generation 0: a PutNew's.
func newRows(base uint64, keys, fields []string) []metadata.RowUpdate {
	ups := make([]metadata.RowUpdate, len(keys))
	for i, k := range keys {
		f := make(map[string]metadata.FieldInfo, len(fields))
		for _, name := range fields {
			f[name] = metadata.FieldInfo{DType: "int64", Shape: []int64{2}}
		}
		ups[i] = metadata.RowUpdate{Key: k, Index: base + uint64(i), Fields: f, Tag: map[string]any{"i": int64(i)}}
	}
	return ups
}

// testBlocks holds a metadata.Blocker to its contract: a PutNew commits
// new rows at its block's indexes; every refusal applies nothing; a
// release makes garbage of the written indexes alone, an abort by
// Garbage of every untaken one; the capacity refuses as it does Prepare.
func testBlocks(x *mt) {
	b, ok := x.m.(metadata.Blocker)
	if !ok {
		x.t.Skipf("%T is not a metadata.Blocker", x.m)
	}
	p := x.part("blocks")
	fields := []string{"f", "g"}
	var token uint64 // the block's putNew names
	block := func(p string, fields []string, n int) uint64 {
		x.t.Helper()
		blk, err := b.Block(x.ctx, p, fields, n)
		if err != nil {
			x.t.Fatalf("Block(%q, %q, %d): %v", p, fields, n, err)
		}
		token = blk.Token
		return blk.Base
	}
	putNew := func(p string, base uint64, keys, fields []string) error {
		x.t.Helper()
		_, err := b.PutNew(x.ctx, p, token, base, keys, fields, nil, newRows(base, keys, fields))
		return err
	}
	base := block(p, fields, 4)
	if err := putNew(p, base, []string{"a", "b"}, fields); err != nil {
		x.t.Fatalf("PutNew: %v", err)
	}
	want := make([]*metadata.Row, 2)
	for i, u := range newRows(base, []string{"a", "b"}, fields) {
		want[i] = &metadata.Row{Key: u.Key, Index: u.Index, Fields: u.Fields, Tag: u.Tag}
	}
	x.wantRows("rows a PutNew committed", x.lookup(p, "a", "b"), want, true)
	if r := x.prepare(p, []string{"c"}, []string{"f"}); r[0].Index >= base && r[0].Index < base+4 {
		x.t.Fatalf("Prepare gave index %d, of the block %d..%d", r[0].Index, base, base+3)
	}

	check := func(what string, err, wantErr error) {
		x.t.Helper()
		if !errors.Is(err, wantErr) {
			x.t.Fatalf("%s: %v, want %v", what, err, wantErr)
		}
		x.wantRows(what+": the rows after", x.lookup(p, "a", "b", "d"), append(slices.Clone(want), nil), true)
	}
	check("PutNew of a key with a row", putNew(p, base+2, []string{"d", "a"}, fields), backends.ErrConflict)
	check("PutNew of a taken index", putNew(p, base+1, []string{"d"}, fields), backends.ErrConflict)
	check("PutNew of a field not the block's", putNew(p, base+2, []string{"d"}, []string{"h"}), backends.ErrConflict)
	check("PutNew past the block", putNew(p, base+3, []string{"d", "e"}, fields), backends.ErrConflict)
	_, err := b.PutNew(x.ctx, p, token, base+2, []string{"d", "d"}, fields, nil, newRows(base+2, []string{"d", "d"}, fields))
	check("PutNew of a key twice", err, backends.ErrInvalid)
	bad := newRows(base+2, []string{"d"}, fields)
	bad[0].Fields = map[string]metadata.FieldInfo{"f": {Gen: 1}}
	_, err = b.PutNew(x.ctx, p, token, base+2, []string{"d"}, fields, nil, bad)
	check("PutNew at generation 1", err, backends.ErrInvalid)
	_, err = b.PutNew(x.ctx, p, token+1, base+2, []string{"d"}, fields, nil, newRows(base+2, []string{"d"}, fields))
	check("PutNew naming another block's token", err, backends.ErrReservationLost)
	// A release naming another block's token changes nothing (had it
	// applied, base+3 would be garbage below and the block gone).
	if err := b.ReleaseBlock(x.ctx, p, metadata.IndexBlock{Base: base, Token: token + 1}, []uint64{base + 3}); err != nil {
		x.t.Fatalf("ReleaseBlock naming another block's token: %v", err)
	}

	// A release: the written untaken indexes' cells become garbage.
	if err := b.ReleaseBlock(x.ctx, p, metadata.IndexBlock{Base: base, Token: token}, []uint64{base + 1, base + 2}); err != nil {
		x.t.Fatalf("ReleaseBlock: %v", err)
	}
	garbage := func(p string, olderThan time.Duration) []metadata.Ref {
		x.t.Helper()
		refs, err := x.m.Garbage(x.ctx, p, olderThan)
		if err != nil {
			x.t.Fatalf("Garbage: %v", err)
		}
		return refs
	}
	x.wantRefs("garbage after a release naming a taken and an untaken index",
		garbage(p, time.Hour), []metadata.Ref{{Index: base + 2, Field: "f"}, {Index: base + 2, Field: "g"}})
	check("PutNew in a released block", putNew(p, base+3, []string{"d"}, fields), backends.ErrConflict)
	if err := b.ReleaseBlock(x.ctx, p, metadata.IndexBlock{Base: base, Token: token}, []uint64{base + 3}); err != nil {
		x.t.Fatalf("ReleaseBlock again: %v", err)
	}
	x.wantRefs("garbage after a second release", garbage(p, time.Hour),
		[]metadata.Ref{{Index: base + 2, Field: "f"}, {Index: base + 2, Field: "g"}})

	// An abort: Garbage aborts an idle block; its untaken indexes' cells
	// become garbage, and a PutNew in it is refused as a conflict, not as
	// a lost block (its cells are known garbage).
	q := x.part("abort")
	qb := block(q, []string{"f"}, 2)
	x.wantRefs("garbage of an aborted block", garbage(q, 0), []metadata.Ref{{Index: qb, Field: "f"}, {Index: qb + 1, Field: "f"}})
	if err := putNew(q, qb, []string{"k"}, []string{"f"}); !errors.Is(err, backends.ErrConflict) || errors.Is(err, backends.ErrReservationLost) {
		x.t.Fatalf("PutNew in an aborted block: %v, want ErrConflict but not ErrReservationLost", err)
	}

	// The capacity: rows it has no room for are a FullError, and the
	// block stays the caller's; a bound on bytes refuses blocks.
	c := x.part("capacity")
	cb := block(c, []string{"f"}, 4)
	if _, err := x.m.SetCapacity(x.ctx, c, metadata.Capacity{Rows: 1}); err != nil {
		x.t.Fatal(err)
	}
	var full *metadata.FullError
	if err := putNew(c, cb, []string{"k1", "k2"}, []string{"f"}); !errors.As(err, &full) || full.Asked.Rows != 2 {
		x.t.Fatalf("PutNew of 2 rows into a capacity of 1: %v, want a FullError asking 2 rows", err)
	}
	if _, err := x.m.SetCapacity(x.ctx, c, metadata.Capacity{}); err != nil {
		x.t.Fatal(err)
	}
	if err := putNew(c, cb, []string{"k1", "k2"}, []string{"f"}); err != nil {
		x.t.Fatalf("PutNew once there is room: %v", err)
	}
	if _, err := x.m.SetCapacity(x.ctx, c, metadata.Capacity{Bytes: 1 << 20}); err != nil {
		x.t.Fatal(err)
	}
	if _, err := b.Block(x.ctx, c, []string{"f"}, 2); !errors.Is(err, backends.ErrConflict) {
		x.t.Fatalf("Block under a bound on bytes: %v, want ErrConflict", err)
	}
	if err := putNew(c, cb+2, []string{"k3"}, []string{"f"}); !errors.Is(err, backends.ErrConflict) {
		x.t.Fatalf("PutNew under a bound on bytes: %v, want ErrConflict", err)
	}

	for _, bad := range []struct {
		fields []string
		n      int
	}{{[]string{"f"}, 0}, {[]string{"f"}, metadata.MaxBlock + 1}, {nil, 1}, {[]string{"g", "f"}, 1}} {
		if _, err := b.Block(x.ctx, p, bad.fields, bad.n); !errors.Is(err, backends.ErrInvalid) {
			x.t.Fatalf("Block(%q, %d): %v, want ErrInvalid", bad.fields, bad.n, err)
		}
	}
}
