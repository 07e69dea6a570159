package backendtest

import (
	"bytes"
	"context"

	"github.com/tqgo/tqgo/backends"
)

// stager returns the store's Stager, or skips the subtest.
func (d *dt) stager() backends.Stager {
	d.t.Helper()
	st, ok := d.s.(backends.Stager)
	if !ok {
		d.t.Skip("the store is not a backends.Stager")
	}
	return st
}

// stage stages a cell per key for vals and fills the buffers with them.
func (d *dt) stage(st backends.Stager, keys []string, vals [][]byte) []backends.Cell {
	d.t.Helper()
	cs := make([]backends.Cell, len(keys))
	for i, k := range keys {
		cs[i] = backends.Cell{Key: k, Tag: "not-the-engine's"}
	}
	if err := st.Stage(d.ctx, cs, sizes(vals)); err != nil {
		d.t.Fatalf("Stage of %d cells: %v", len(keys), err)
	}
	for i, c := range cs {
		switch {
		case len(c.Body) != len(vals[i]):
			d.t.Fatalf("Stage: cell %d's Body is %d bytes, want %d", i, len(c.Body), len(vals[i]))
		case len(c.Head) != 0:
			d.t.Fatalf("Stage: cell %d has a Head of %d bytes, want none", i, len(c.Head))
		case c.Staged == nil:
			d.t.Fatalf("Stage: cell %d has no Staged handle", i)
		}
		copy(c.Body, vals[i])
	}
	return cs
}

var stageSizes = []int{0, 1, 100, 4095, 4096, 4097, 70 << 10, 300 << 10}

func testStageWrite(d *dt) {
	st := d.stager()
	keys := d.keys("k", len(stageSizes))
	vals := values(keys, func(i int) int { return stageSizes[i] })
	cs := d.stage(st, keys, vals)
	d.expect("Read before Write of staged cells", keys, d.get(keys), missing(len(keys)))
	d.write(cs)
	for _, c := range cs {
		if c.Tag == "not-the-engine's" {
			d.t.Fatalf("Write left the caller's Tag in staged cell %q", c.Key)
		}
	}
	d.expectBoth("Read after Write of staged cells", keys, vals)
	d.del(keys)
	d.expect("Read after Delete of published cells", keys, d.get(keys), missing(len(keys)))
}

func testStageReplace(d *dt) {
	st := d.stager()
	keys := d.keys("k", 3)
	old := values(keys, func(int) int { return 64 })
	d.put(keys, old)
	newer := [][]byte{value("n"+keys[0], 10), value("n"+keys[1], 5000), value("n"+keys[2], 64)}
	cs := d.stage(st, keys, newer)
	d.expect("Read of old values while staged", keys, d.get(keys), old)
	d.write(cs)
	d.expectBoth("Read after Write of staged cells over old values", keys, newer)
}

// testStageDisjoint fills the buffers of two Stage calls, of the same call
// and of different ones, with distinct bytes up to their capacity's end
// where writing is legal (their length): any buffer sharing memory with
// another shows up as a wrong value.
func testStageDisjoint(d *dt) {
	st := d.stager()
	ka, kb := d.keys("a", 20), d.keys("b", 20)
	sz := func(i int) int { return []int{1, 7, 64, 4000, 5000}[i%5] }
	va, vb := values(ka, sz), values(kb, sz)
	ca := d.stage(st, ka, va)
	cb := d.stage(st, kb, vb)
	// Refill a's buffers last, so a buffer shared with b shows a's bytes in b.
	for i, c := range ca {
		copy(c.Body, va[i])
	}
	for i, c := range cb {
		if !bytes.Equal(c.Body, vb[i]) {
			d.t.Fatalf("staged buffer %d of the second call changed when the first call's buffers were filled", i)
		}
	}
	d.write(cb)
	d.write(ca)
	d.expect("Read of the first call's cells", ka, d.get(ka), va)
	d.expect("Read of the second call's cells", kb, d.get(kb), vb)
}

// One Write may hold staged cells and cells of caller memory.
func testStageMixed(d *dt) {
	st := d.stager()
	keys := d.keys("k", 6)
	vals := values(keys, func(i int) int { return 50 + 1000*i })
	staged := d.stage(st, keys[:3], vals[:3])
	mixed := append(staged, cells(keys[3:], vals[3:])...)
	d.write(mixed)
	d.expectBoth("Read after a Write of staged and caller cells", keys, vals)
}

// Unstage after a Write that failed, or with no Write at all, publishes
// nothing and leaves the old values.
func testUnstage(d *dt) {
	st := d.stager()
	keys := d.keys("k", 4)
	old := [][]byte{[]byte("old")}
	d.put(keys[:1], old)
	vals := values(keys, func(i int) int { return 100 * i })
	cs := d.stage(st, keys, vals)
	st.Unstage(cs)
	d.expect("Read after Unstage with no Write", keys, d.get(keys), [][]byte{old[0], nil, nil, nil})

	cs = d.stage(st, keys, vals)
	ctx, cancel := context.WithCancel(d.ctx)
	cancel()
	if err := d.s.Write(ctx, cs); err == nil {
		d.t.Fatal("Write of staged cells with a cancelled context: no error")
	}
	st.Unstage(cs)
	d.expect("Read after Unstage of a failed Write", keys, d.get(keys), [][]byte{old[0], nil, nil, nil})
	// Cells never staged are ignored.
	st.Unstage(cells(keys, vals))
	d.expect("Read after Unstage of cells never staged", keys, d.get(keys), [][]byte{old[0], nil, nil, nil})
}

// Unstage after a successful Write is a no-op: the values stay.
func testUnstageAfterWrite(d *dt) {
	st := d.stager()
	keys := d.keys("k", 4)
	vals := values(keys, func(i int) int { return []int{0, 10, 5000, 70 << 10}[i] })
	cs := d.stage(st, keys, vals)
	d.write(cs)
	st.Unstage(cs)
	d.expectBoth("Read after Unstage of published cells", keys, vals)
}

func testStageInvalid(d *dt) {
	st := d.stager()
	keys := d.keys("k", 2)
	cs := []backends.Cell{{Key: keys[0]}, {Key: keys[1]}}
	d.wantErr("Stage of 2 cells and 1 size", st.Stage(d.ctx, cs, []int{1}), backends.ErrInvalid)
	d.wantErr("Stage of a negative size", st.Stage(d.ctx, cs, []int{1, -1}), backends.ErrInvalid)
	ctx, cancel := context.WithCancel(d.ctx)
	cancel()
	d.wantErr("Stage with a cancelled context", st.Stage(ctx, cs, []int{1, 2}), context.Canceled)
	d.expect("Read after failed Stages", keys, d.get(keys), missing(2))
}

func testStageClosed(d *dt) {
	st := d.stager()
	keys := d.keys("k", 2)
	cs := d.stage(st, keys[:1], [][]byte{[]byte("v")})
	if err := d.s.Close(); err != nil {
		d.t.Fatalf("Close: %v", err)
	}
	d.wantErr("Write of a cell staged before Close", d.s.Write(d.ctx, cs), backends.ErrClosed)
	st.Unstage(cs) // must not panic
	d.wantErr("Stage after Close", st.Stage(d.ctx, []backends.Cell{{Key: keys[1]}}, []int{1}), backends.ErrClosed)
}
