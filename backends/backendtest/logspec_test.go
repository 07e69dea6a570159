package backendtest_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest/toylog"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/internal/replica"
)

// losingLog is a Log whose next Append, when lose is set, is lost on its
// way to the server: nothing appended, the outcome unknown to the
// caller, which settles it with a fence (LOG.md, F).
type losingLog struct {
	backends.Log
	lose atomic.Bool
	mu   sync.Mutex
	lost []uint64 // the IDs of the records lost
}

func (l *losingLog) Append(ctx context.Context, partition string, from backends.Pos, recs []backends.Record) (backends.Tail, error) {
	if l.lose.CompareAndSwap(true, false) {
		l.mu.Lock()
		for _, r := range recs {
			l.lost = append(l.lost, r.ID)
		}
		l.mu.Unlock()
		return backends.Tail{}, backends.ErrOutcomeUnknown
	}
	return l.Log.Append(ctx, partition, from, recs)
}

// specClock is a server clock the test moves.
type specClock struct{ now atomic.Int64 }

func (c *specClock) time() time.Time     { return time.UnixMicro(c.now.Load()) }
func (c *specClock) add(d time.Duration) { c.now.Add(d.Microseconds()) }
func newSpecClock(at int64) *specClock   { c := &specClock{}; c.now.Store(at); return c }
func specFields(m ...string) []string    { return m }
func specTag(kv ...any) map[string]any   { return specMap(kv) }
func specMap(kv []any) map[string]any {
	m := map[string]any{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

// specWorkload is what a workload did, call by call, to be found in the
// log by the spec decoder.
type specWorkload struct {
	t    *testing.T
	ctx  context.Context
	m    *replica.Meta
	part string
	// want is, per record appended by the calls, in log order, what the
	// decoder must find; check is run on the decoded record.
	want []specWant
	// tokens are the blocks' tokens, by first index.
	tokens map[uint64]uint64
}

type specWant struct {
	what  string
	kind  byte
	check func(*specRecord) error
	// base, when hasBase, is the entry's Base: the first index the
	// engine reserved for it; id, when not 0, its ID.
	base    uint64
	hasBase bool
	id      uint64
}

func (w *specWorkload) expect(what string, kind byte, check func(*specRecord) error) {
	w.want = append(w.want, specWant{what: what, kind: kind, check: check})
}

// expectBase is expect for a record whose entry's Base must be base.
func (w *specWorkload) expectBase(what string, kind byte, base uint64, check func(*specRecord) error) {
	w.want = append(w.want, specWant{what: what, kind: kind, check: check, base: base, hasBase: true})
}

func (w *specWorkload) must(err error) {
	w.t.Helper()
	if err != nil {
		w.t.Fatal(err)
	}
}

// put prepares and commits rows of keys with one table and tags, each
// with cells of sizes (field-major), and returns their indexes.
func (w *specWorkload) put(keys []string, table map[string]metadata.FieldInfo, tags []map[string]any, sizes []int64) []uint64 {
	w.t.Helper()
	fs := slices.Sorted(maps.Keys(table))
	res, err := w.m.Prepare(w.ctx, w.part, keys, fs, sizes)
	w.must(err)
	idx := make([]uint64, len(keys))
	ups := make([]metadata.RowUpdate, len(keys))
	for k, r := range res {
		idx[k] = r.Index
		tb := map[string]metadata.FieldInfo{}
		for f, fi := range table {
			fi.Gen = r.Gens[f]
			tb[f] = fi
		}
		ups[k] = metadata.RowUpdate{Key: keys[k], Index: r.Index, Fields: tb, Tag: tags[k]}
	}
	w.expect("prepare of "+keys[0], 'P', func(rec *specRecord) error {
		if !slices.Equal(rec.Keys, keys) || !slices.Equal(rec.Fields, fs) {
			return errorf("keys %q fields %q, want %q %q", rec.Keys, rec.Fields, keys, fs)
		}
		if sizes != nil {
			for j := range fs {
				if !slices.Equal(rec.Sizes[j], sizes[j*len(keys):(j+1)*len(keys)]) {
					return errorf("sizes %v, want %v", rec.Sizes, sizes)
				}
			}
		}
		return nil
	})
	_, err = w.m.Commit(w.ctx, w.part, ups)
	w.must(err)
	w.expect("commit of "+keys[0], 'C', func(rec *specRecord) error {
		return sameUpdates(rec.Updates, ups)
	})
	return idx
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// sameUpdates reports how a C's (or a U's) decoded updates differ from
// the updates written.
func sameUpdates(got []specUpdate, want []metadata.RowUpdate) error {
	if len(got) != len(want) {
		return errorf("%d updates, want %d", len(got), len(want))
	}
	for k, u := range got {
		w := want[k]
		if u.Key != w.Key || u.Index != w.Index || !sameTable(u.Table, w.Fields) || !sameTag(u.Tag, w.Tag) {
			return errorf("update %+v, want %+v", u, w)
		}
	}
	return nil
}

func sameTable(got map[string]specField, want map[string]metadata.FieldInfo) bool {
	if len(got) != len(want) || got == nil != (want == nil) {
		return false
	}
	for f, fi := range want {
		g, ok := got[f]
		if !ok || g.DType != fi.DType || g.Gen != fi.Gen || g.BackendTag != fi.BackendTag ||
			(g.Shape == nil) != (fi.Shape == nil) || !slices.Equal(g.Shape, fi.Shape) {
			return false
		}
	}
	return true
}

// sameTag compares a decoded tag with the one written: the decoder's
// specUint is a written uint64.
func sameTag(got, want map[string]any) bool {
	return reflect.DeepEqual(asWritten(got), want)
}

func asWritten(v any) any {
	switch x := v.(type) {
	case specUint:
		return uint64(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = asWritten(e)
		}
		return out
	case map[string]any:
		if x == nil {
			return map[string]any(nil)
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = asWritten(e)
		}
		return out
	}
	return v
}

// block reserves a block of n indexes for new rows of fields and expects
// its N, at the entry whose Base is the block's first index and whose ID
// is its token. It returns the block's first index, and notes its token.
func (w *specWorkload) block(fields []string, n int) uint64 {
	w.t.Helper()
	blk, err := metadata.Block(w.ctx, w.m, w.part, fields, n)
	w.must(err)
	w.expectBase(fmt.Sprintf("block at %d", blk.Base), 'N', blk.Base, func(rec *specRecord) error {
		if rec.N != uint64(n) || !slices.Equal(rec.Fields, fields) {
			return errorf("block of %d fields %q, want %d %q", rec.N, rec.Fields, n, fields)
		}
		return nil
	})
	w.want[len(w.want)-1].id = blk.Token
	if w.tokens == nil {
		w.tokens = map[uint64]uint64{}
	}
	w.tokens[blk.Base] = blk.Token
	return blk.Base
}

// tokenAt is the token of the block the workload reserved that holds
// index i.
func (w *specWorkload) tokenAt(i uint64) uint64 {
	var at, tok uint64
	for b, t := range w.tokens {
		if b <= i && b >= at {
			at, tok = b, t
		}
	}
	return tok
}

// putNew puts new rows of keys at base on (a block's indexes) through
// one PutNew, with one table (each field at generation 0) and tags, each
// with cells of sizes (field-major; nil: none), and expects its U. It
// returns PutNew's error.
func (w *specWorkload) putNew(base uint64, keys []string, table map[string]metadata.FieldInfo, tags []map[string]any, sizes []int64) error {
	w.t.Helper()
	fs := slices.Sorted(maps.Keys(table))
	ups := make([]metadata.RowUpdate, len(keys))
	for k, key := range keys {
		tb := map[string]metadata.FieldInfo{}
		for f, fi := range table {
			fi.Gen = 0
			tb[f] = fi
		}
		ups[k] = metadata.RowUpdate{Key: key, Index: base + uint64(k), Fields: tb, Tag: tags[k]}
	}
	token := w.tokenAt(base)
	_, err := metadata.PutNew(w.ctx, w.m, w.part, token, base, keys, fs, sizes, ups)
	w.expect("put new of "+keys[0], 'U', func(rec *specRecord) error {
		if rec.Base != base || rec.BlockToken != token || !slices.Equal(rec.Fields, fs) || !slices.Equal(rec.Keys, keys) {
			return errorf("base %d token %d fields %q keys %q, want %d %d %q %q", rec.Base, rec.BlockToken, rec.Fields, rec.Keys, base, token, fs, keys)
		}
		if (rec.Sizes == nil) != (sizes == nil) {
			return errorf("sizes %v, want %v", rec.Sizes, sizes)
		}
		for j := range rec.Sizes {
			if !slices.Equal(rec.Sizes[j], sizes[j*len(keys):(j+1)*len(keys)]) {
				return errorf("sizes %v, want %v", rec.Sizes, sizes)
			}
		}
		return sameUpdates(rec.Updates, ups)
	})
	return err
}

// claim claims req on the workload's partition and expects its Q.
func (w *specWorkload) claim(req metadata.ClaimRequest, pick metadata.Pick, check func(c metadata.Claimed, q *specClaim) error) metadata.Claimed {
	w.t.Helper()
	c, err := w.m.Claim(w.ctx, w.part, req, pick)
	w.must(err)
	w.expect("claim of "+req.Task, 'Q', func(rec *specRecord) error {
		q := rec.Claim
		token := c.Lease
		if token == "" {
			token = c.Mark.Token
		}
		if token == "" {
			// It leased nothing and does not stand: its token is
			// the record's alone.
			token = q.Token
		}
		sel := req.Select
		var batch []int64
		if req.Batch != nil {
			batch = []int64{int64(req.Batch.Ranks), int64(req.Batch.Rank)}
		}
		switch {
		case q.Task != req.Task || q.Token != token || specHolder(q.Token) != req.Holder:
			return errorf("task %q token %q, want %q %q (holder %q)", q.Task, q.Token, req.Task, token, req.Holder)
		case q.Lease != req.Lease.Microseconds() || q.Rows != int64(req.Rows) || q.Min != int64(req.Min) || q.MaxDeliv != int64(req.MaxDeliveries):
			return errorf("lease %d rows %d min %d max %d", q.Lease, q.Rows, q.Min, q.MaxDeliv)
		case !slices.Equal(q.Batch, batch) || !slices.Equal(q.Fields, sel.Fields):
			return errorf("batch %v fields %q", q.Batch, q.Fields)
		case q.GroupTag != sel.Group.Tag || q.GroupSep != sel.Group.Sep || q.GroupSize != int64(sel.Group.Size):
			return errorf("group %q %q %d", q.GroupTag, q.GroupSep, q.GroupSize)
		case q.StaleTag != sel.Stale.Tag || q.StaleDrop != sel.Stale.Drop || q.Floor != req.Floor || q.Custom != req.Custom:
			return errorf("stale %q %v floor %v custom %v", q.StaleTag, q.StaleDrop, q.Floor, q.Custom)
		case q.Hold != req.Hold.Microseconds() || q.Replaces != req.Replaces:
			return errorf("hold %d replaces %q", q.Hold, q.Replaces)
		case q.HasDeadline != (sel.Group.Deadline > 0) || q.Deadline != sel.Group.Deadline.Microseconds() || q.Partial != sel.Group.Partial:
			return errorf("deadline %v %d partial %v", q.HasDeadline, q.Deadline, q.Partial)
		}
		if check != nil {
			return check(c, q)
		}
		return nil
	})
	return c
}

// settle settles req and expects its K.
func (w *specWorkload) settle(req metadata.SettleRequest) {
	w.t.Helper()
	_, err := w.m.Settle(w.ctx, w.part, req)
	w.must(err)
	w.expect("settle of "+req.Task, 'K', func(rec *specRecord) error {
		if rec.Task != req.Task || rec.Op != uint64(req.Op) || rec.Token != req.Lease || !slices.Equal(rec.Indexes, req.Indexes) || rec.Delay != req.Delay.Microseconds() || rec.Reason != req.Reason {
			return errorf("settle %q op %d token %q rows %v delay %d reason %q, want %+v", rec.Task, rec.Op, rec.Token, rec.Indexes, rec.Delay, rec.Reason, req)
		}
		return nil
	})
}

// TestLogSpecDecoder runs every kind of record through a real engine's
// log (the toy shared engine, through internal/replica as tq's clients
// run it), then decodes every entry and a snapshot of the state with the
// decoder written from backends/LOG.md (logspec_reader_test.go), and
// checks what it decodes against what the calls did and what the engine
// reports.
func TestLogSpecDecoder(t *testing.T) {
	ctx := t.Context()
	clock := newSpecClock(1_700_000_000_000_000)
	srv := toylog.NewServer(clock.time)
	eng := srv.Engine()
	t.Cleanup(func() { _ = eng.Close() })
	lg := &losingLog{Log: eng.Log}
	m := replica.New(lg, eng.Data)
	t.Cleanup(func() { _ = m.Close() })
	w := &specWorkload{t: t, ctx: ctx, m: m, part: "p"}

	// N: a block of two indexes no put takes; the A below ends it.
	idle := w.block([]string{"x", "y"}, 2)

	// L: a capacity, clearing rows after task c consumed them.
	capy := metadata.Capacity{Rows: 1000, Bytes: 1 << 30, ClearAcked: []string{"c"}}
	_, err := m.SetCapacity(ctx, "p", capy)
	w.must(err)
	w.expect("capacity", 'L', func(rec *specRecord) error {
		if rec.CapRows != capy.Rows || rec.CapBytes != capy.Bytes || !slices.Equal(rec.CapTasks, capy.ClearAcked) {
			return errorf("capacity %d %d %q", rec.CapRows, rec.CapBytes, rec.CapTasks)
		}
		return nil
	})

	// P and C: three rows, a tensor field and a general one, tags of
	// every kind section 4 names.
	table := map[string]metadata.FieldInfo{"x": {DType: "float32", Shape: []int64{2}}, "y": {}}
	rich := specTag("grp", "g1", "v", int64(1), "u", uint64(7), "neg", int64(-200), "fl", math.Copysign(0, -1), "b", true,
		"l", []any{int64(1), "s", nil}, "m", map[string]any{"z": nil, "a": uint64(1 << 40)}, "by", []byte("hi"))
	rows := w.put([]string{"g1/a", "g1/b", "g2/a"}, table,
		[]map[string]any{rich, specTag("grp", "g1", "v", int64(9)), specTag("grp", "g2", "v", int64(2))},
		[]int64{8, 8, 8, 5, 6, 7})
	i1, i2, i3 := rows[0], rows[1], rows[2]

	// A: a reservation older than the age is aborted, and the idle block
	// ended, the cells of its indexes garbage; W: the cells swept.
	abr, err := m.Prepare(ctx, "p", []string{"ab/1"}, []string{"x"}, nil)
	w.must(err)
	w.expect("prepare of ab/1", 'P', nil)
	clock.add(2 * time.Hour)
	_, err = m.Prepare(ctx, "p", []string{"held/1"}, []string{"x"}, []int64{3})
	w.must(err)
	w.expect("prepare of held/1", 'P', nil)
	garbage, err := m.Garbage(ctx, "p", time.Hour)
	w.must(err)
	w.expect("abort", 'A', func(rec *specRecord) error {
		if rec.Age != time.Hour.Microseconds() {
			return errorf("age %d", rec.Age)
		}
		return nil
	})
	if want := []metadata.Ref{{Index: abr[0].Index, Field: "x", Gen: abr[0].Gens["x"]},
		{Index: idle, Field: "x"}, {Index: idle, Field: "y"}, {Index: idle + 1, Field: "x"}, {Index: idle + 1, Field: "y"}}; !slices.Equal(garbage, want) {
		t.Fatalf("garbage %v, want ab/1's cell, then the idle block's by index and field: %v", garbage, want)
	}
	w.must(m.Swept(ctx, "p", garbage))
	w.expect("swept", 'W', func(rec *specRecord) error {
		if len(rec.Refs) != len(garbage) {
			return errorf("refs %+v, want %+v", rec.Refs, garbage)
		}
		for k, g := range garbage {
			if rec.Refs[k] != (specRef{Index: g.Index, Field: g.Field, Gen: g.Gen}) {
				return errorf("refs %+v, want %+v", rec.Refs, garbage)
			}
		}
		return nil
	})

	// B: a put's reservation abandoned, with a backend tag.
	res, err := m.Prepare(ctx, "p", []string{"bb/1"}, []string{"x"}, nil)
	w.must(err)
	w.expect("prepare of bb/1", 'P', nil)
	abandoned := metadata.Ref{Index: res[0].Index, Field: "x", Gen: res[0].Gens["x"], Tag: "bt"}
	w.must(m.Abandon(ctx, "p", []metadata.Ref{abandoned}))
	w.expect("abandon", 'B', func(rec *specRecord) error {
		if len(rec.Refs) != 1 || rec.Refs[0] != (specRef{Index: abandoned.Index, Field: "x", Gen: abandoned.Gen, Tag: "bt"}) {
			return errorf("refs %+v", rec.Refs)
		}
		return nil
	})

	// Q and K: a plain task leases two rows; extend, ack, nack (dead at
	// its max), retry, drop.
	var tok string
	c := w.claim(metadata.ClaimRequest{Task: "t", Lease: 30 * time.Second, Rows: 2, Min: 1, MaxDeliveries: 1,
		Select: metadata.Select{Fields: specFields("x")}, Holder: "w1"}, nil, nil)
	tok = c.Lease
	w.settle(metadata.SettleRequest{Task: "t", Op: metadata.Extend, Lease: tok, Indexes: []uint64{i1, i2}, Delay: 40 * time.Second})
	w.settle(metadata.SettleRequest{Task: "t", Op: metadata.Ack, Lease: tok, Indexes: []uint64{i1}})
	w.settle(metadata.SettleRequest{Task: "t", Op: metadata.Nack, Lease: tok, Indexes: []uint64{i2}, Reason: "bad row"})
	w.settle(metadata.SettleRequest{Task: "t", Op: metadata.Retry, Indexes: []uint64{i2}})
	w.settle(metadata.SettleRequest{Task: "t", Op: metadata.Drop, Indexes: []uint64{i2}})
	// A row dead of a nack with a reason keeps it in the snapshot.
	why := w.claim(metadata.ClaimRequest{Task: "why", Lease: 30 * time.Second, Rows: 1, Min: 1, MaxDeliveries: 1,
		Select: metadata.Select{Fields: specFields("x")}, Holder: "w1"}, nil, nil)
	if len(why.Rows) != 1 {
		t.Fatalf("claim of task why leased %d rows", len(why.Rows))
	}
	w.settle(metadata.SettleRequest{Task: "why", Op: metadata.Nack, Lease: why.Lease, Indexes: []uint64{why.Rows[0].Index}, Reason: "boom: é"})

	// A task with a stale tag parks rows below its floor.
	w.claim(metadata.ClaimRequest{Task: "st", Lease: 30 * time.Second, Rows: 1, Min: 1,
		Select: metadata.Select{Fields: specFields("x"), Stale: metadata.Stale{Tag: "v"}}, Floor: 5, Holder: "w2"}, nil, nil)

	// A group task with a deadline and partial release, two ranks: an
	// open batch of a complete group and an overdue partial one.
	gc := w.claim(metadata.ClaimRequest{Task: "g", Lease: 30 * time.Second, Rows: 4, Min: 1, Batch: &metadata.Batch{Ranks: 2, Rank: 0},
		Select: metadata.Select{Fields: specFields("x"), Group: metadata.Group{Tag: "grp", Size: 2, Deadline: time.Second, Partial: true}}, Holder: "w3"}, nil, nil)
	if len(gc.Rows) != 3 || !slices.Equal(gc.Partial, []bool{false, true}) {
		t.Fatalf("group claim leased %d rows, partial %v", len(gc.Rows), gc.Partial)
	}

	// The same with room for the complete group only: the overdue one
	// was offered, not taken, and the batch's flags are all false.
	gc2 := w.claim(metadata.ClaimRequest{Task: "g2", Lease: 30 * time.Second, Rows: 2, Min: 1, Batch: &metadata.Batch{Ranks: 2, Rank: 0},
		Select: metadata.Select{Fields: specFields("x"), Group: metadata.Group{Tag: "grp", Size: 2, Deadline: time.Second, Partial: true}}, Holder: "w3"}, nil, nil)
	if len(gc2.Rows) != 2 || !slices.Equal(gc2.Partial, []bool{false}) {
		t.Fatalf("group claim leased %d rows, partial %v", len(gc2.Rows), gc2.Partial)
	}

	// A custom claim: one unit and a row dropped.
	w.claim(metadata.ClaimRequest{Task: "cu", Lease: 30 * time.Second, Rows: 2, Min: 1, Custom: true,
		Select: metadata.Select{Fields: specFields("y")}, Holder: "w4"},
		func(rows []*metadata.Row, _ []metadata.Delivery) (metadata.Picked, error) {
			return metadata.Picked{Units: [][]int{{0}}, Drop: []int{1}}, nil
		}, func(c metadata.Claimed, q *specClaim) error {
			if !reflect.DeepEqual(q.Units, [][]uint64{{i1}}) || !slices.Equal(q.Drop, []uint64{i2}) {
				return errorf("units %v drop %v", q.Units, q.Drop)
			}
			return nil
		})

	// R: of some rows, and of every row.
	w.must(m.Reset(ctx, "p", "cu", []uint64{i1}))
	w.expect("reset of cu", 'R', func(rec *specRecord) error {
		if rec.Task != "cu" || rec.All || !slices.Equal(rec.Indexes, []uint64{i1}) {
			return errorf("reset %q all %v %v", rec.Task, rec.All, rec.Indexes)
		}
		return nil
	})
	w.claim(metadata.ClaimRequest{Task: "r", Lease: time.Second, Rows: 1, Min: 1, Select: metadata.Select{Fields: specFields("x")}}, nil, nil)
	w.must(m.Reset(ctx, "p", "r", nil))
	w.expect("reset of r", 'R', func(rec *specRecord) error {
		if rec.Task != "r" || !rec.All || rec.Indexes != nil {
			return errorf("reset %q all %v %v", rec.Task, rec.All, rec.Indexes)
		}
		return nil
	})

	// Standing claims: one served by the commit of a row it waits for,
	// one cancelled (K unwait), one replaced by a claim that stays.
	zc := w.claim(metadata.ClaimRequest{Task: "z", Lease: 30 * time.Second, Rows: 1, Min: 1, Hold: time.Hour,
		Select: metadata.Select{Fields: specFields("z")}, Holder: "w5"}, nil, nil)
	iz := w.put([]string{"z/1"}, map[string]metadata.FieldInfo{"z": {}}, []map[string]any{nil}, nil)[0]
	// Two ranks' claims with a hold: a claim with a batch never stands,
	// so the commit of a row they wait for serves neither, and the row
	// stays ready.
	w.claim(metadata.ClaimRequest{Task: "bz", Lease: 30 * time.Second, Rows: 1, Min: 1, Hold: time.Hour, Batch: &metadata.Batch{Ranks: 2, Rank: 0},
		Select: metadata.Select{Fields: specFields("bzf")}, Holder: "r0"}, nil, nil)
	w.claim(metadata.ClaimRequest{Task: "bz", Lease: 30 * time.Second, Rows: 1, Min: 1, Hold: time.Hour, Batch: &metadata.Batch{Ranks: 2, Rank: 1},
		Select: metadata.Select{Fields: specFields("bzf")}, Holder: "r1"}, nil, nil)
	ibz := w.put([]string{"bz/1"}, map[string]metadata.FieldInfo{"bzf": {}}, []map[string]any{nil}, nil)[0]
	uc := w.claim(metadata.ClaimRequest{Task: "un", Lease: 30 * time.Second, Rows: 1, Min: 1, Hold: time.Hour,
		Select: metadata.Select{Fields: specFields("q")}, Holder: "w6"}, nil, nil)
	w.settle(metadata.SettleRequest{Task: "un", Op: metadata.Unwait, Lease: uc.Mark.Token})
	// An undo (K op 8) of a claim token no claim used yet: the token is
	// undone, in the snapshot's last part.
	undone := metadata.NewLease("w8")
	w.settle(metadata.SettleRequest{Task: "un", Op: metadata.Undo, Lease: undone})
	wc1 := w.claim(metadata.ClaimRequest{Task: "wait", Lease: 30 * time.Second, Rows: 1, Min: 1, Hold: time.Hour,
		Select: metadata.Select{Fields: specFields("q")}, Holder: "w7"}, nil, nil)
	wc2 := w.claim(metadata.ClaimRequest{Task: "wait", Lease: 30 * time.Second, Rows: 1, Min: 1, Hold: 2 * time.Hour,
		Select: metadata.Select{Fields: specFields("q")}, Holder: "w7", Replaces: wc1.Mark.Token}, nil, nil)

	// E: a field cleared; D: a row deleted; an orphan: a prepared row
	// deleted; far: a field reserved 65 times.
	cells, err := m.DeleteFields(ctx, "p", []string{"g2/a"}, []string{"y"})
	w.must(err)
	w.expect("delete fields", 'E', func(rec *specRecord) error {
		if !slices.Equal(rec.Fields, []string{"y"}) || !slices.Equal(rec.Keys, []string{"g2/a"}) {
			return errorf("fields %q keys %q", rec.Fields, rec.Keys)
		}
		return nil
	})
	if len(cells) != 1 || cells[0].Index != i3 {
		t.Fatalf("cleared cells %v", cells)
	}
	id := w.put([]string{"d/1"}, table, []map[string]any{nil}, nil)[0]
	_, err = m.Delete(ctx, "p", []string{"d/1"})
	w.must(err)
	w.expect("delete", 'D', func(rec *specRecord) error {
		if !slices.Equal(rec.Keys, []string{"d/1"}) {
			return errorf("keys %q", rec.Keys)
		}
		return nil
	})
	ores, err := m.Prepare(ctx, "p", []string{"o/1"}, []string{"x"}, nil)
	w.must(err)
	w.expect("prepare of o/1", 'P', nil)
	_, err = m.Delete(ctx, "p", []string{"o/1"})
	w.must(err)
	w.expect("delete of o/1", 'D', nil)
	var ifar uint64
	for k := range 65 {
		r, err := m.Prepare(ctx, "p", []string{"far/1"}, []string{"x"}, nil)
		w.must(err)
		ifar = r[0].Index
		wantN := uint64(0)
		if k == 0 {
			wantN = 1
		}
		w.expect("prepare of far/1", 'P', func(rec *specRecord) error {
			if rec.N != wantN {
				return errorf("n %d, want %d", rec.N, wantN)
			}
			return nil
		})
	}

	// N, U, Y. A capacity that bounds bytes refuses a block (its N
	// applies nothing); bounding rows only, it lets blocks be.
	if _, err := metadata.Block(ctx, m, "p", []string{"x", "y"}, 4); !errors.Is(err, backends.ErrConflict) {
		t.Fatalf("a block under a bytes bound: %v, want a conflict", err)
	}
	w.expect("refused block", 'N', func(rec *specRecord) error {
		if rec.N != 4 || !slices.Equal(rec.Fields, []string{"x", "y"}) {
			return errorf("block of %d fields %q", rec.N, rec.Fields)
		}
		return nil
	})
	rowsOnly := capy
	rowsOnly.Bytes = 0
	_, err = m.SetCapacity(ctx, "p", rowsOnly)
	w.must(err)
	w.expect("capacity of rows", 'L', func(rec *specRecord) error {
		if rec.CapRows != capy.Rows || rec.CapBytes != 0 {
			return errorf("capacity %d %d", rec.CapRows, rec.CapBytes)
		}
		return nil
	})
	// A live block of five: two rows with sizes (x's the same for both,
	// written once; y's one per key), then one without sizes, of x alone;
	// then a put at a taken index, refused.
	live := w.block([]string{"x", "y"}, 5)
	clock.add(time.Second)
	ukeys := []string{"u/1", "u/2", "u/3"}
	w.must(w.putNew(live, ukeys[:2], table, []map[string]any{specTag("v", int64(4)), nil}, []int64{8, 8, 4, 6}))
	clock.add(time.Second)
	liveAt := clock.now.Load()
	w.must(w.putNew(live+2, ukeys[2:], map[string]metadata.FieldInfo{"x": table["x"]}, []map[string]any{specTag("v", uint64(5))}, nil))
	clock.add(time.Second)
	if err := w.putNew(live+2, []string{"u/4"}, map[string]metadata.FieldInfo{"x": table["x"]}, []map[string]any{nil}, nil); !errors.Is(err, backends.ErrConflict) {
		t.Fatalf("a put new at a taken index: %v, want a conflict", err)
	}
	// Y: a block released, two of its indexes written.
	rel := w.block([]string{"y"}, 3)
	w.must(metadata.ReleaseBlock(ctx, m, "p", metadata.IndexBlock{Base: rel, Token: w.tokens[rel]}, []uint64{rel, rel + 2}))
	w.expect("release", 'Y', func(rec *specRecord) error {
		if rec.Base != rel || rec.BlockToken != w.tokens[rel] || !slices.Equal(rec.Indexes, []uint64{rel, rel + 2}) {
			return errorf("release of %d token %d written %v, want %d %d %v", rec.Base, rec.BlockToken, rec.Indexes, rel, w.tokens[rel], []uint64{rel, rel + 2})
		}
		return nil
	})
	// The capacity bounds bytes again: the live block stays.
	_, err = m.SetCapacity(ctx, "p", capy)
	w.must(err)
	w.expect("capacity again", 'L', nil)

	// F: a write lost on its way, voided by the fence its writer appends.
	lg.lose.Store(true)
	if _, err := m.SetCapacity(ctx, "p", capy); err == nil || errors.Is(err, backends.ErrOutcomeUnknown) {
		t.Fatalf("a lost write: %v, want an error saying it did not apply", err)
	}
	w.expect("fence", 'F', func(rec *specRecord) error {
		if !slices.Equal(rec.IDs, lg.lost) {
			return errorf("ids %v, want %v", rec.IDs, lg.lost)
		}
		return nil
	})

	// The log, read raw, holds the records the calls made, in order, and
	// every kind of LOG.md section 2 but X (below).
	reader := srv.Engine() // another process's client: it reads the log raw
	t.Cleanup(func() { _ = reader.Close() })
	tail, err := reader.Log.Read(ctx, "p", backends.Pos{}, 0)
	w.must(err)
	if len(tail.Entries) != len(w.want) {
		t.Fatalf("the log holds %d entries, the calls made %d records", len(tail.Entries), len(w.want))
	}
	kinds := map[byte]int{}
	for k, e := range tail.Entries {
		rec, err := decodeSpecRecord(e.Data)
		if err != nil {
			t.Fatalf("entry %d (%s): %v", e.N, w.want[k].what, err)
		}
		if rec.Kind != w.want[k].kind {
			t.Fatalf("entry %d is a %q, the calls made a %q (%s)", e.N, rec.Kind, w.want[k].kind, w.want[k].what)
		}
		kinds[rec.Kind]++
		if rec.Kind == 'P' && rec.N > 0 && e.Base == 0 {
			t.Errorf("entry %d: a prepare of %d new rows without a base", e.N, rec.N)
		}
		if w.want[k].hasBase && e.Base != w.want[k].base {
			t.Errorf("entry %d (%s): base %d, want %d", e.N, w.want[k].what, e.Base, w.want[k].base)
		}
		if w.want[k].id != 0 && e.ID != w.want[k].id {
			t.Errorf("entry %d (%s): ID %d, want %d (the block's token)", e.N, w.want[k].what, e.ID, w.want[k].id)
		}
		if ck := w.want[k].check; ck != nil {
			if err := ck(rec); err != nil {
				t.Errorf("entry %d (%s): %v", e.N, w.want[k].what, err)
			}
		}
	}

	// X, on a partition of its own.
	w2 := &specWorkload{t: t, ctx: ctx, m: m, part: "p2"}
	w2.put([]string{"k"}, table, []map[string]any{nil}, nil)
	_, err = m.DeletePartition(ctx, "p2")
	w.must(err)
	w2.expect("delete partition", 'X', nil)
	tail2, err := reader.Log.Read(ctx, "p2", backends.Pos{}, 0)
	w.must(err)
	for k, e := range tail2.Entries {
		rec, err := decodeSpecRecord(e.Data)
		if err != nil || rec.Kind != w2.want[k].kind {
			t.Fatalf("p2 entry %d: %v %v, want a %q", e.N, rec, err, w2.want[k].kind)
		}
		kinds[rec.Kind]++
	}
	for _, kind := range "PCDXAWBFQKRLENUY" {
		if kinds[byte(kind)] == 0 {
			t.Errorf("no %q record decoded", kind)
		}
	}
	ops := map[uint64]bool{}
	for _, e := range tail.Entries {
		if rec, _ := decodeSpecRecord(e.Data); rec.Kind == 'K' {
			ops[rec.Op] = true
		}
	}
	if len(ops) != 7 || !ops[8] {
		t.Errorf("settle ops decoded %v, want all 7 (end batch, written only at a reopen, apart)", ops)
	}

	checkSpecSnapshot(t, srv, specFacts{
		capacity: capy, i1: i1, i2: i2, i3: i3, iz: iz, ifar: ifar, idel: id, tok: tok,
		orphan: metadata.Ref{Index: ores[0].Index, Field: "x", Gen: ores[0].Gens["x"]}, abandoned: abandoned,
		cleared: cells[0], groupClaim: gc, served: zc.Mark.Token, standing: wc2.Mark.Token, lost: lg.lost,
		ibz: ibz, undone: undone,
		live: live, liveToken: w.tokens[live], liveAt: liveAt, ukeys: ukeys, rel: rel,
	})
}

// specFacts are what the workload knows the snapshot must hold.
type specFacts struct {
	capacity                   metadata.Capacity
	i1, i2, i3, iz, ifar, idel uint64
	tok                        string
	orphan, abandoned, cleared metadata.Ref
	groupClaim                 metadata.Claimed
	served, standing, undone   string
	ibz                        uint64
	lost                       []uint64
	// The live block (its first index, the time of its latest put new),
	// the keys put into it, and a block released.
	live, rel uint64
	liveAt    int64
	liveToken uint64
	ukeys     []string
}

// checkSpecSnapshot has a client that compacts at every write append a
// record, so that the log holds a snapshot of the workload's state, and
// checks what the spec decoder finds in it against the facts and what
// the client reports.
func checkSpecSnapshot(t *testing.T, srv *toylog.Server, f specFacts) {
	t.Helper()
	ctx := t.Context()
	eng := srv.Engine()
	defer eng.Close()
	m := replica.New(eng.Log, eng.Data, replica.CompactAfter(1))
	if _, err := m.SetCapacity(ctx, "p", f.capacity); err != nil {
		t.Fatal(err)
	}
	view, err := m.View(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil { // waits for the compaction
		t.Fatal(err)
	}
	tail, err := eng.Log.Read(ctx, "p", backends.Pos{N: 1 << 40, ID: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !tail.Restart || tail.Snapshot == nil {
		t.Fatalf("no snapshot: %+v", tail)
	}
	s, err := decodeSpecSnapshot(tail.Snapshot)
	if err != nil {
		t.Fatal(err)
	}
	if view.Mark.Seq != s.Seq {
		t.Errorf("seq %d, the client's mark %d", s.Seq, view.Mark.Seq)
	}

	// Rows: the committed ones are the client's; the held ones are the
	// prepared rows still waiting for a commit.
	var committed []*metadata.Row
	var held []string
	var bytes int64
	for _, r := range s.Rows {
		for _, g := range r.Gens {
			bytes += g.Size
		}
		if r.View == nil {
			continue
		}
		if !r.View.HasSince || r.View.Since <= 0 {
			t.Errorf("row %q: since %v %d", r.Key, r.View.HasSince, r.View.Since)
		}
		fs := map[string]metadata.FieldInfo{}
		for name, fi := range r.View.Table {
			fs[name] = metadata.FieldInfo{DType: fi.DType, Shape: fi.Shape, Gen: fi.Gen, BackendTag: fi.BackendTag}
		}
		committed = append(committed, &metadata.Row{Key: r.Key, Index: r.Index, Fields: fs, Tag: asWritten(r.View.Tag).(map[string]any)})
	}
	slices.SortFunc(committed, func(a, b *metadata.Row) int { return int(a.Index) - int(b.Index) })
	if len(committed) != len(view.Rows) {
		t.Fatalf("%d committed rows, the client lists %d", len(committed), len(view.Rows))
	}
	for k, r := range committed {
		v := view.Rows[k]
		fs := maps.Clone(v.Fields)
		for name, fi := range fs {
			if fi.Shape != nil && len(fi.Shape) == 0 {
				fi.Shape = []int64{}
				fs[name] = fi
			}
		}
		if r.Key != v.Key || r.Index != v.Index || !reflect.DeepEqual(r.Fields, fs) || !reflect.DeepEqual(r.Tag, v.Tag) {
			t.Errorf("row %+v, the client's %+v", r, v)
		}
	}
	// far/1 reserved x 65 times: generations 1 to 64 pending in its
	// window (bit i for generation next-1-i), 0 pushed out to far;
	// held/1 reserved x once, with a size.
	for _, r := range s.Rows {
		var want specGen
		switch r.Key {
		case "far/1":
			want = specGen{Field: "x", Next: 65, Pend: ^uint64(0)}
		case "held/1":
			want = specGen{Field: "x", Next: 1, Pend: 1, Size: 3, NSize: 3}
		default:
			continue
		}
		if len(r.Gens) != 1 || r.View != nil {
			t.Errorf("row %q: %+v", r.Key, r)
			continue
		}
		g := r.Gens[0]
		if g.At <= 0 || g.Old <= 0 || g.Old > g.At {
			t.Errorf("row %q: at %d old %d", r.Key, g.At, g.Old)
		}
		g.At, g.Old = 0, 0
		if g != want {
			t.Errorf("row %q: gens %+v, want %+v", r.Key, g, want)
		}
	}
	// The rows put new: at the live block's indexes, each field at
	// generation 0 committed, with its size.
	for k, key := range f.ukeys {
		want := []specGen{{Field: "x", Next: 1, Size: 8}, {Field: "y", Next: 1, Size: []int64{4, 6}[min(k, 1)]}}
		if k == 2 {
			want = []specGen{{Field: "x", Next: 1}}
		}
		i := slices.IndexFunc(s.Rows, func(r specSnapRow) bool { return r.Key == key })
		if i < 0 {
			t.Errorf("row %q not in the snapshot", key)
			continue
		}
		r := s.Rows[i]
		since := f.liveAt // u/3's put; u/1's and u/2's a second before
		if k < 2 {
			since -= time.Second.Microseconds()
		}
		if r.Index != f.live+uint64(k) || r.View == nil || r.View.Since != since || !slices.Equal(r.Gens, want) {
			t.Errorf("row %q: index %d, view %+v, gens %+v; want index %d, gens %+v", key, r.Index, r.View, r.Gens, f.live+uint64(k), want)
		}
	}
	if slices.ContainsFunc(s.Rows, func(r specSnapRow) bool { return r.Key == "u/4" }) {
		t.Errorf("row u/4, whose put new was refused, is in the snapshot")
	}
	for _, h := range s.Held {
		held = append(held, h.Key)
	}
	if !slices.Equal(held, []string{"far/1", "held/1"}) {
		t.Errorf("held rows %q", held)
	}
	if got := int64(len(committed) + len(held)); got != view.Used.Rows || bytes != view.Used.Bytes {
		t.Errorf("holds %d rows %d bytes, the client counts %+v", got, bytes, view.Used)
	}
	if !s.HasCapacity || s.CapRows != f.capacity.Rows || s.CapBytes != f.capacity.Bytes || !slices.Equal(s.CapTasks, f.capacity.ClearAcked) {
		t.Errorf("capacity %v %d %d %q", s.HasCapacity, s.CapRows, s.CapBytes, s.CapTasks)
	}

	// Far, garbage and orphans.
	if !slices.ContainsFunc(s.Far, func(r specRef) bool { return r.Index == f.ifar && r.Field == "x" && r.Gen == 0 && r.Time > 0 }) {
		t.Errorf("far %+v, want far/1's generation 0", s.Far)
	}
	if !slices.ContainsFunc(s.Orphans, func(r specRef) bool {
		return r.Index == f.orphan.Index && r.Field == "x" && r.Gen == f.orphan.Gen && r.Time > 0
	}) {
		t.Errorf("orphans %+v, want %+v", s.Orphans, f.orphan)
	}
	for _, want := range []specRef{
		{Index: f.abandoned.Index, Field: "x", Gen: f.abandoned.Gen, Tag: "bt"},
		{Index: f.cleared.Index, Field: "y", Gen: f.cleared.Gen},
		{Index: f.idel, Field: "x"}, {Index: f.idel, Field: "y"},
	} {
		if !slices.Contains(s.Garbage, want) {
			t.Errorf("garbage %+v lacks %+v", s.Garbage, want)
		}
	}
	// The released block: the cells of its written indexes are garbage,
	// one after the other, and no other of its.
	if i := slices.Index(s.Garbage, specRef{Index: f.rel, Field: "y"}); i < 0 || i+1 >= len(s.Garbage) || s.Garbage[i+1] != (specRef{Index: f.rel + 2, Field: "y"}) ||
		slices.ContainsFunc(s.Garbage, func(r specRef) bool { return r.Index == f.rel+1 }) {
		t.Errorf("garbage %+v, want the cells of indexes %d and %d, in order, and none of %d", s.Garbage, f.rel, f.rel+2, f.rel+1)
	}

	// Blocks: the live one alone (the idle one aborted, the released one
	// ended, the refused one never made), its first three indexes taken.
	if want := []specBlock{{Base: f.live, Token: f.liveToken, N: 5, At: f.liveAt, Fields: []string{"x", "y"}, Words: []uint64{0b111}}}; !reflect.DeepEqual(s.Blocks, want) {
		t.Errorf("blocks %+v, want %+v", s.Blocks, want)
	} else if !s.Blocks[0].taken(2) || s.Blocks[0].taken(3) {
		t.Errorf("block %+v: index 2 not taken or 3 taken", s.Blocks[0])
	}

	// Tasks: their entries are the client's deliveries.
	tasks := map[string]*specTask{}
	for k := range s.Tasks {
		tasks[s.Tasks[k].Name] = &s.Tasks[k]
	}
	for name, ds := range view.Tasks {
		st := tasks[name]
		if st == nil {
			t.Errorf("task %q not in the snapshot", name)
			continue
		}
		if len(st.Entries) != len(ds) {
			t.Errorf("task %q: %d entries, the client %d", name, len(st.Entries), len(ds))
			continue
		}
		for k, e := range st.Entries {
			d := ds[k]
			if e.Index != d.Index || e.State != uint64(d.State) || e.Deliveries != int64(d.Deliveries) || e.Token != d.Lease ||
				specHolder(e.Token) != d.Holder || e.Max != int64(d.Max) || (e.Until > 0) != !d.Until.IsZero() ||
				e.Reason != d.Reason || (e.At > 0) != !d.At.IsZero() || (e.Granted > 0) != !d.Granted.IsZero() {
				t.Errorf("task %q: entry %+v, the client's %+v", name, e, d)
			}
		}
	}
	if tt := tasks["t"]; tt == nil || len(tt.Entries) != 2 ||
		tt.Entries[0] != (specEntry{Index: f.i1, State: uint64(metadata.Acked), Deliveries: 1, Token: f.tok, Max: 1}) ||
		tt.Entries[1] != (specEntry{Index: f.i2, State: uint64(metadata.Dropped), Deliveries: 0}) {
		t.Errorf("task t: %+v, want row %d acked by %q and row %d dropped with no token, time or max", tt, f.i1, f.tok, f.i2)
	}
	if wt := tasks["why"]; wt == nil || len(wt.Entries) != 1 || wt.Entries[0].State != uint64(metadata.Dead) || wt.Entries[0].Reason != "boom: é" || wt.Entries[0].At <= 0 {
		t.Errorf("task why: %+v, want its row dead with reason %q and when", wt, "boom: é")
	}
	if st := tasks["st"]; st == nil || !st.Indexed || st.StaleTag != "v" || !maps.Equal(st.Parked, map[uint64]float64{f.i1: 1, f.i3: 2}) {
		t.Errorf("task st: %+v, want rows %d and %d parked", st, f.i1, f.i3)
	}
	gc := f.groupClaim
	if g := tasks["g"]; g == nil || len(g.Batches) != 1 {
		t.Errorf("task g: %+v, want one open batch", g)
	} else {
		b := g.Batches[0]
		var keys []string
		var idx []uint64
		for _, r := range b.Rows {
			keys, idx = append(keys, r.Key), append(idx, r.Index)
		}
		var wantKeys []string
		var wantIdx []uint64
		for _, r := range gc.Rows {
			wantKeys, wantIdx = append(wantKeys, r.Key), append(wantIdx, r.Index)
		}
		var units [][]int
		for _, u := range b.Units {
			var v []int
			for _, p := range u {
				v = append(v, int(p))
			}
			units = append(units, v)
		}
		var end int64
		for _, e := range g.Entries {
			if e.Token == b.Token {
				end = max(end, e.Until)
			}
		}
		if ends := s.Ends["g"]; len(ends) != 1 || end == 0 || ends[0] != end {
			t.Errorf("open batch's end %v, want one: %d, the end of its rows' lease", ends, end)
		}
		if tk := s.Takers["g"]; !reflect.DeepEqual(tk, [][]string{{gc.Lease, ""}}) {
			t.Errorf("open batch's takers %q, want rank 0's share taken by the claim that opened it, %q", tk, gc.Lease)
		}
		if b.Token != gc.Lease || !slices.Equal(keys, wantKeys) || !slices.Equal(idx, wantIdx) || !reflect.DeepEqual(units, gc.Units) || !slices.Equal(b.Taken, []bool{true, false}) {
			t.Errorf("open batch %+v, want the claim's %q %q %v", b, gc.Lease, wantKeys, gc.Units)
		}
		if g.GroupTag != "grp" || g.GroupSize != 2 {
			t.Errorf("task g's selection %q %d", g.GroupTag, g.GroupSize)
		}
	}
	if at, ok := s.Undone[f.undone]; !ok || at <= 0 || len(s.Undone) != 1 {
		t.Errorf("undone tokens %v, want %q with its time", s.Undone, f.undone)
	}
	if !reflect.DeepEqual(s.Partials, map[string][][]bool{"g": {gc.Partial}, "g2": {{false}}}) {
		t.Errorf("partial flags %v, want g's batch %v", s.Partials, gc.Partial)
	}
	if !slices.Equal(s.Deadlines, []specDeadline{{Name: "g", Deadline: time.Second.Microseconds(), Partial: true}, {Name: "g2", Deadline: time.Second.Microseconds(), Partial: true}}) {
		t.Errorf("deadlines %+v", s.Deadlines)
	}
	if w := tasks["wait"]; w == nil || len(w.Standing) != 1 || w.Standing[0].Claim.Token != f.standing ||
		w.Standing[0].Claim.Hold != 0 || w.Standing[0].Claim.Replaces != "" || w.Standing[0].Until <= s.Now {
		t.Errorf("task wait: %+v, want the claim %q standing", w, f.standing)
	}
	if z := tasks["z"]; z == nil || !reflect.DeepEqual(z.Served, []specServed{{Token: f.served, Until: z.Served[0].Until, Rows: []uint64{f.iz}}}) {
		t.Errorf("task z: %+v, want a served claim under %q of row %d", z, f.served, f.iz)
	}
	if bz := tasks["bz"]; bz == nil || len(bz.Standing) != 0 || len(bz.Served) != 0 || len(bz.Entries) != 0 {
		t.Errorf("task bz: %+v, want no standing or served claim, and row %d never delivered", bz, f.ibz)
	}
	for _, id := range f.lost {
		if _, ok := s.Voids[id]; !ok {
			t.Errorf("voids %v lack %d", s.Voids, id)
		}
	}

	// Counts.
	var total uint64
	for _, n := range view.Consumed {
		total += n
	}
	if s.Inserted != view.Inserted || s.Consumed != total {
		t.Errorf("inserted %d consumed %d, the client %d %d", s.Inserted, s.Consumed, view.Inserted, total)
	}
	for name, n := range view.Consumed {
		if s.Counts[name] != n {
			t.Errorf("task %q consumed %d, the client %d", name, s.Counts[name], n)
		}
	}
}

// TestLogSpecGroupIDs holds LOG.md's group ids to what the engine
// reports for waiting groups (metadata.GroupWait.ID): a letter for the
// kind of the tag value, then the value; or k and the key's part before
// its last separator. Groups born together are listed by id, in byte
// order, as overdue ones are taken.
func TestLogSpecGroupIDs(t *testing.T) {
	ctx := t.Context()
	srv := toylog.NewServer(newSpecClock(1_700_000_000_000_000).time)
	eng := srv.Engine()
	t.Cleanup(func() { _ = eng.Close() })
	m := replica.New(eng.Log, eng.Data)
	t.Cleanup(func() { _ = m.Close() })
	w := &specWorkload{t: t, ctx: ctx, m: m, part: "p"}
	values := []any{"a", int64(-3), int64(1), uint64(1), uint64(5), 1.0, 0.5, 100000.0, 1e6, 1234567.0, 0.0, math.Copysign(0, -1), 1.5e-7, 0.0001,
		math.Inf(1), true, false, []any{int64(1), "x"}, map[string]any{"k": uint64(1)}, []byte("b")}
	var keys []string
	var tags []map[string]any
	for k, v := range values {
		keys = append(keys, fmt.Sprintf("a/%d/%d", k%2, k))
		tags = append(tags, map[string]any{"gv": v})
	}
	w.put(keys, map[string]metadata.FieldInfo{"f": {}}, tags, nil)
	for _, g := range []metadata.Group{{Tag: "gv", Size: 100}, {Sep: "/", Size: 100}} {
		task := "tag"
		if g.Sep != "" {
			task = "sep"
		}
		if _, err := m.Claim(ctx, "p", metadata.ClaimRequest{Task: task, Lease: time.Second, Rows: 100, Min: 100,
			Select: metadata.Select{Fields: []string{"f"}, Group: g}}, nil); err != nil {
			t.Fatal(err)
		}
		view, err := m.View(ctx, "p", task)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for k, v := range values {
			var tag map[string]any
			if x, ok := v.(uint64); ok {
				tag = map[string]any{"gv": specUint(x)}
			} else {
				tag = tags[k]
			}
			id, ok := specGroupID(g.Tag, g.Sep, keys[k], tag)
			if !ok {
				t.Fatalf("value %v: no group id", v)
			}
			if !slices.Contains(want, id) {
				want = append(want, id)
			}
		}
		slices.Sort(want)
		var got []string
		for _, gw := range view.Groups[task] {
			got = append(got, gw.ID)
		}
		if !slices.Equal(got, want) {
			t.Errorf("task %s: group ids\n%q\nLOG.md spells them\n%q", task, got, want)
		}
	}
}
