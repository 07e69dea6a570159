package redis_test

// LAYOUT.md held to the code: a tq workload against a real server, then
// the independent reader of layout_spec_reader_test.go reads the server's
// keys by the document and must find what tq finds; and every key on the
// server, every field of the log's entries and snapshots, every constant
// of the key names and every script and command the engine runs must be
// named in the document.

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/codec"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/internal/replica"
	"github.com/tqgo/tqgo/tq"
)

// cmdRecorder is a hook that records the commands the engine sends.
type cmdRecorder struct {
	mu    sync.Mutex
	names map[string]bool
	shas  map[string]bool
}

func (r *cmdRecorder) add(cmd goredis.Cmder) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.names == nil {
		r.names, r.shas = map[string]bool{}, map[string]bool{}
	}
	name := strings.ToUpper(cmd.Name())
	r.names[name] = true
	if args := cmd.Args(); name == "EVALSHA" && len(args) > 1 {
		r.shas[fmt.Sprint(args[1])] = true
	}
}

func (r *cmdRecorder) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (r *cmdRecorder) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		r.add(cmd)
		return next(ctx, cmd)
	}
}

func (r *cmdRecorder) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		for _, c := range cmds {
			r.add(c)
		}
		return next(ctx, cmds)
	}
}

const (
	specPart = "spec/a:1"
	blkPart  = "spec/blk" // the puts of a client with index blocks
)

// TestSpecReaderMatchesTq: the reader, reading the server by LAYOUT.md
// and replaying by LOG.md, finds the rows, cells, shapes, tags and
// per-task counts tq reports, on the log as the opener's engine leaves it
// and on a log compacted after every write (a snapshot and its tail),
// puts by index blocks (N, U, Y records, and a snapshot holding a live
// block) included.
func TestSpecReaderMatchesTq(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rc := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rc.Close() })
	for _, tc := range []struct {
		name    string
		prefix  string
		compact bool
	}{
		{"opener", "specA", false},
		{"snapshots", "specB", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c *tq.Client
			rec := &cmdRecorder{}
			if !tc.compact {
				var err error
				if c, err = tq.Open(t.Context(), srv.URL()+"?prefix="+tc.prefix); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
			} else {
				s, err := redis.OpenURL(t.Context(), srv.URL()+"?prefix="+tc.prefix, redis.WithHooks(rec))
				if err != nil {
					t.Fatal(err)
				}
				meta := replica.NewStore(s.Log(), s, replica.CompactAfter(1))
				if c, err = tq.New(backends.Engine{Data: s, Meta: meta}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					c.Close()
					meta.Close()
					s.Log().Close()
					s.Close()
				})
			}
			cb, calls := openBlocksClient(t, srv.URL(), tc.prefix, tc.compact, rec)
			specBlocks(t, c, cb, calls, rc, tc.prefix, tc.compact)
			stop := specWorkload(t, c, rc, tc.prefix)
			defer stop()
			checkSpecReader(t, c, rc, tc.prefix)
			checkSpecKeys(t, rc, tc.prefix)
			if tc.compact {
				checkSpecCommands(t, rec)
				st := readSpec(t, rc, tc.prefix, specPart)
				if st.applied >= 40 {
					t.Errorf("the compacted log replayed %d entries: no snapshot was read", st.applied)
				}
			}
		})
	}
}

func readSpec(t *testing.T, rc *goredis.Client, prefix, part string) *srState {
	t.Helper()
	l, err := readSRLog(t.Context(), rc, prefix, part)
	if err != nil {
		t.Fatal(err)
	}
	st, err := replaySR(l)
	if err != nil {
		t.Fatalf("replaying %s: %v", part, err)
	}
	return st
}

// waitStanding waits until the log holds a standing claim of task.
func waitStanding(t *testing.T, rc *goredis.Client, prefix, task string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if tk := readSpec(t, rc, prefix, specPart).tasks[task]; tk != nil && len(tk.standing) > 0 {
			return
		}
	}
	t.Fatalf("no standing claim of %q in the log", task)
}

func specMust(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func claimN(t *testing.T, task *tq.Task, n int) *tq.Lease {
	t.Helper()
	l, err := task.Claim(t.Context(), n)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// putNews is a Meta that records its PutNew calls: which puts went by a
// U, and which a U refused, whatever the log keeps of them (a snapshot
// takes the place of the records before it).
type putNews struct {
	*replica.Meta
	mu    sync.Mutex
	calls []putNewCall
}

type putNewCall struct {
	base uint64
	keys []string
	err  error
}

func (m *putNews) PutNew(ctx context.Context, partition string, token, base uint64, keys, fields []string, sizes []int64, updates []metadata.RowUpdate) (metadata.CommitResult, error) {
	res, err := m.Meta.PutNew(ctx, partition, token, base, keys, fields, sizes, updates)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, putNewCall{base, slices.Clone(keys), err})
	return res, err
}

// made reports whether a PutNew made key's row, and at what index.
func (m *putNews) made(key string) (uint64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range m.calls {
		if i := slices.Index(c.keys, key); i >= 0 && c.err == nil {
			return c.base + uint64(i), true
		}
	}
	return 0, false
}

// refused are the PutNew calls that failed.
func (m *putNews) refused() []putNewCall {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []putNewCall
	for _, c := range m.calls {
		if c.err != nil {
			out = append(out, c)
		}
	}
	return out
}

// openBlocksClient opens a client with tq.WithIndexBlocks over a Meta of
// its own (compacting after every write with compact; its store's
// commands recorded by rec). The Meta is replica.New's, which is not
// colocated: over a standalone server, tq.Open's is (replica.NewStore of
// a CellLog), and a client whose Meta is colocated never puts by blocks
// (it writes cells and commit in one request instead). Its records are
// what a tq server over this engine appends for its clients' blocks.
func openBlocksClient(t *testing.T, url, prefix string, compact bool, rec *cmdRecorder) (*tq.Client, *putNews) {
	t.Helper()
	var (
		so []redis.Option
		ro []replica.Option
	)
	if compact {
		so = append(so, redis.WithHooks(rec))
		ro = append(ro, replica.CompactAfter(1))
	}
	s, err := redis.OpenURL(t.Context(), url+"?prefix="+prefix, so...)
	specMust(t, err)
	meta := &putNews{Meta: replica.New(s.Log(), s, ro...)}
	cb, err := tq.New(backends.Engine{Data: s, Meta: meta}, tq.WithIndexBlocks())
	if err != nil {
		meta.Close()
		s.Log().Close()
		s.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cb.Close()
		meta.Close()
		s.Log().Close()
		s.Close()
	})
	return cb, meta
}

// specWaitFor polls cond (which may read the server) until it holds, for
// at most 10 seconds.
func specWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s", what)
		}
	}
}

// specBlocks puts into blkPart through cb, a client with index blocks
// whose PutNew calls calls records, and checks the reader's blocks on
// the way: puts of new keys of a set of fields go by a U once the block
// the set's first put asked for came (N); in compact mode, a snapshot
// holding a live block is read; U records are refused (and their puts
// go by P and C, or fail as full) for a key that has a row, a block an
// abort ended (A), a capacity bounding bytes, and one bounding rows; the
// client's Close releases a block (Y). c is an ordinary client of the
// same server. In compact mode the log keeps only what followed the
// latest snapshot: what the reader saw applied or refused is checked
// against what the client did in full only on the whole log.
func specBlocks(t *testing.T, c, cb *tq.Client, calls *putNews, rc *goredis.Client, prefix string, compact bool) {
	ctx := t.Context()
	read := func() *srState { return readSpec(t, rc, prefix, blkPart) }
	n := 0
	putA := func() string { // a new key of fields [uid w]
		key := fmt.Sprintf("a%d", n)
		n++
		specMust(t, cb.Put(ctx, blkPart, key, map[string]any{"uid": key, "w": codec.Scalar(float32(n))}, tq.Tag{"n": int64(n)}))
		return key
	}
	// putByU puts new keys with put until one goes by a U (a put before
	// the client has its block goes by P and C).
	putByU := func(put func() string) []string {
		t.Helper()
		var keys []string
		specWaitFor(t, "a put by a U", func() bool {
			keys = append(keys, put())
			_, ok := calls.made(keys[len(keys)-1])
			return ok
		})
		return keys
	}
	// checkU: the reader has the rows the client's U records made, at
	// their indexes, and (on the whole log) made them by U records.
	checkU := func(st *srState, keys ...string) {
		t.Helper()
		for _, k := range keys {
			at, ok := calls.made(k)
			if r := st.rows[k]; !ok || r == nil || !r.committed || r.index != at || !compact && !slices.Contains(st.madeByU, k) {
				t.Errorf("%q put by a U at %d (%v): the reader's row %+v, its U rows %q", k, at, ok, r, st.madeByU)
			}
		}
	}
	// checkBlocks: a live block for fields (a client's block of a
	// partition is for every set of fields it put new keys of there),
	// and no row at an index of a live block that no U took.
	checkBlocks := func(st *srState, fields ...string) {
		t.Helper()
		if !slices.ContainsFunc(st.blocks, func(b *srBlock) bool {
			return !slices.ContainsFunc(fields, func(f string) bool { return !slices.Contains(b.fields, f) })
		}) {
			t.Errorf("the reader has no live block for %q", fields)
		}
		for _, b := range st.blocks {
			for off, taken := range b.taken {
				if r := st.byIndex[b.base+uint64(off)]; taken != (r != nil) { // (no row of blkPart is deleted)
					t.Errorf("block at %d: index %d taken %v, its row %+v", b.base, b.base+uint64(off), taken, r)
				}
			}
		}
	}

	// Fields [uid w]: the first put goes by P and C and asks for a block.
	specMust(t, cb.BatchPut(ctx, blkPart, []string{"first0", "first1"}, tq.Batch{
		"uid": tq.ValuesOf([]string{"first0", "first1, longer"}),
		"w":   tq.Stacked([]float32{0.5, 1.5}, 2),
	}, []tq.Tag{{"n": int64(-1)}, nil}))
	specWaitFor(t, "a live block in the log", func() bool { return len(read().blocks) > 0 })
	byU := putByU(putA)
	// Two new keys in one U (sizes of one key differing: one per key).
	batch := []string{"pair0", "pair1"}
	specMust(t, cb.BatchPut(ctx, blkPart, batch, tq.Batch{
		"uid": tq.ValuesOf([]string{"p0", "pair 1"}),
		"w":   tq.Stacked([]float32{2, 3}, 2),
	}, []tq.Tag{{"n": uint64(7), "s": "x"}, {"f": 0.25, "l": []any{int64(1), "two"}}}))
	byU = append(byU, putA())
	st := read()
	checkU(st, append(slices.Clone(batch), byU[len(byU)-1])...)
	if len(st.refusedU) != 0 {
		t.Errorf("U records refused: %q", st.refusedU)
	}
	checkBlocks(st, "uid", "w")
	checkSpecRows(t, cb, rc, prefix, blkPart)

	if compact {
		// A snapshot taken while a block is live, then read: the log is
		// compacted after writes, in the background; put until the
		// snapshot holds one.
		specWaitFor(t, "a snapshot holding a live block", func() bool {
			if len(read().snapBlocks) > 0 {
				return true
			}
			byU = append(byU, putA())
			return false
		})
		st := read()
		for _, b := range st.snapBlocks {
			if !slices.Equal(b.fields, []string{"uid", "w"}) || b.left() == 0 || b.at == 0 {
				t.Errorf("the snapshot's block at %d: fields %q, %d left, at %d", b.base, b.fields, b.left(), b.at)
			}
		}
		checkBlocks(st, "uid", "w")
		checkSpecRows(t, cb, rc, prefix, blkPart) // from that snapshot and its tail
	}

	// refusedNow: the latest PutNew, of keys, was refused, cleanly (not
	// as a block the store lost), and the reader says why (on the whole
	// log; in compact mode, those its tail holds).
	var refusals []string
	refusedNow := func(why string, keys ...string) putNewCall {
		t.Helper()
		refused := calls.refused()
		refusals = append(refusals, why)
		last := refused[len(refused)-1]
		if len(refused) != len(refusals) || !slices.Equal(last.keys, keys) || errors.Is(last.err, backends.ErrReservationLost) {
			t.Fatalf("PutNew refused %+v, want %d, the last of %q, not as lost", refused, len(refusals), keys)
		}
		if st := read(); !compact && !slices.Equal(st.refusedU, refusals) || compact && !slices.Equal(st.refusedU, refusals[len(refusals)-len(st.refusedU):]) {
			t.Errorf("refused U records: %q, want %q", st.refusedU, refusals)
		}
		return last
	}
	// putOther puts new keys with put until one goes by a U, and returns
	// it.
	putOther := func(put func(key string) error) string {
		keys := putByU(func() string {
			key := fmt.Sprintf("k%d", n)
			n++
			specMust(t, put(key))
			return key
		})
		return keys[len(keys)-1]
	}

	// A put of a key that has a row: its U is refused, and the client
	// puts it by P and C (a put that found no block goes so at once: try
	// another key).
	before := read()
	var victim string
	olds := append([]string{"first0", "first1"}, byU...)
	specWaitFor(t, "a U refused", func() bool {
		if len(olds) == 0 {
			t.Fatalf("no put of a key with a row went by a U")
		}
		victim, olds = olds[0], olds[1:]
		specMust(t, cb.Put(ctx, blkPart, victim, map[string]any{"uid": victim + " again", "w": codec.Scalar(float32(-1))}, tq.Tag{"again": true}))
		return len(calls.refused()) > 0
	})
	refused := refusedNow("a key has a row", victim)
	if r, was := read().rows[victim], before.rows[victim]; r == nil || was == nil || r.index != was.index || r.fields["uid"].gen != 1 || r.tag["again"] != true {
		t.Errorf("%q after its refused U: %+v, before %+v: not put by P and C", victim, r, was)
	}
	// The refusal retires the block: released (Y).
	specWaitFor(t, "the refused block released", func() bool { return read().blockAt(refused.base) == nil })

	// Fields [w]: a block, used once, then idle: an abort ends it (A: the
	// Reclaim's, before it sweeps), and a U of it is refused; the client
	// puts by P and C.
	putW := func(key string) error {
		return cb.Put(ctx, blkPart, key, map[string]any{"w": codec.Scalar(float32(n))}, nil)
	}
	specMust(t, putW("w0"))
	key := putOther(putW)
	st = read()
	checkU(st, key)
	checkBlocks(st, "w")
	_, err := calls.Garbage(ctx, blkPart, 0)
	specMust(t, err)
	if st := read(); len(st.blocks) != 0 {
		t.Errorf("live blocks after an abort of every idle one: %d", len(st.blocks))
	}
	specMust(t, putW("w-late"))
	refusedNow("not a live block's untaken indexes and fields", "w-late")
	if r := read().rows["w-late"]; r == nil || !r.committed {
		t.Errorf("w-late, its U refused, not put by P and C: %+v", r)
	}
	_, err = c.Reclaim(ctx, blkPart, 0)
	specMust(t, err)

	// Fields [b]: a block, then a capacity that bounds bytes: a U is
	// refused, and the client puts by P and C.
	putB := func(key string) error { return cb.Put(ctx, blkPart, key, map[string]any{"b": key}, nil) }
	specMust(t, putB("b0"))
	key = putOther(putB)
	st = read()
	checkU(st, key)
	checkBlocks(st, "b")
	specMust(t, c.SetCapacity(ctx, blkPart, tq.Capacity{Bytes: 1 << 30}))
	specMust(t, putB("b-bytes"))
	refusedNow("the capacity bounds bytes", "b-bytes")
	if r := read().rows["b-bytes"]; r == nil || !r.committed {
		t.Errorf("b-bytes, its U refused, not put by P and C: %+v", r)
	}
	specMust(t, c.SetCapacity(ctx, blkPart, tq.Capacity{}))

	// Fields [uid]: a block, a U refused for want of room (the put
	// fails), then the block released by the client's Close (Y).
	putU := func(key string) error {
		return cb.Put(ctx, blkPart, key, map[string]any{"uid": key}, tq.Tag{"n": int64(n)})
	}
	specMust(t, putU("u0"))
	key = putOther(putU)
	st = read()
	checkU(st, key)
	checkBlocks(st, "uid")
	status, err := cb.Status(ctx, blkPart)
	specMust(t, err)
	specMust(t, c.SetCapacity(ctx, blkPart, tq.Capacity{Rows: status.Used.Rows + 1}))
	if err := cb.BatchPut(tq.WhenFull(ctx, tq.Fail), blkPart, []string{"full0", "full1"}, tq.Batch{"uid": tq.ValuesOf([]string{"f0", "f1"})}, nil); !errors.Is(err, tq.ErrFull) {
		t.Fatalf("a put by a U past the capacity: %v", err)
	}
	refusedNow("full", "full0", "full1")
	specMust(t, c.SetCapacity(ctx, blkPart, tq.Capacity{}))
	st = read()
	checkBlocks(st, "uid")
	specMust(t, cb.Close())
	if st := read(); len(st.blocks) != 0 {
		t.Errorf("after the client's Close: %d live blocks", len(st.blocks))
	}
	checkSpecRows(t, c, rc, prefix, blkPart)
}

// specWorkload writes and consumes specPart and empties spec/gone; it
// returns the cancel of a Wait left standing.
func specWorkload(t *testing.T, c *tq.Client, rc *goredis.Client, prefix string) (stop func()) {
	ctx := t.Context()
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5"}
	xs := make([]float32, 18)
	for i := range xs {
		xs[i] = float32(i)
	}
	steps := []int64{10, 11, 12, 13, 14, 15}
	tags := []tq.Tag{
		{"g": "p0", "v": int64(1)},
		{"g": "p0", "v": int64(7)},
		{"g": "p1", "v": int64(7), "n": uint8(3)},
		{"g": "p1", "v": int64(2), "path": []any{"a", int64(-3)}},
		{"g": "p1", "raw": []byte{1, 2}, "m": map[string]any{"x": 0.5, "deep": []any{[]any{true}}}},
		nil,
	}
	specMust(t, c.BatchPut(ctx, specPart, keys, tq.Batch{
		"x":    tq.Stacked(xs, 6, 3),
		"step": tq.Stacked(steps, 6), // a 0-d tensor per row
		"uid":  tq.ValuesOf([]string{"u0", "u1", "u2", "u3", "u4", "u5"}),
	}, tags))
	specMust(t, c.Put(ctx, specPart, "solo", map[string]any{"s0": codec.Scalar(float32(1.5)), "uid": "solo"}, tq.Tag{"g": "p2"}))

	train, err := c.Task(specPart, "train", []string{"x", "uid"}, tq.LeaseFor(time.Hour), tq.MaxDeliveries(3))
	specMust(t, err)
	l := claimN(t, train, 2) // k0 k1
	specMust(t, l.Ack(ctx))
	l = claimN(t, train, 2) // k2 k3
	specMust(t, l.Nack(ctx, 0, "k2"))
	specMust(t, l.NackErr(ctx, time.Hour, errors.New("bad row"), "k3")) // a reason: the reader skips it
	l = claimN(t, train, 2)                                             // k2 again, k4
	specMust(t, l.Extend(ctx, 2*time.Hour, "k4"))
	specMust(t, c.ResetConsumption(ctx, specPart, "train", "k0"))

	short, err := c.Task(specPart, "short", []string{"uid"}, tq.LeaseFor(300*time.Millisecond), tq.MaxDeliveries(1))
	specMust(t, err)
	claimN(t, short, 3) // k0 k1 k2, left to expire: dead at their max
	time.Sleep(400 * time.Millisecond)
	specMust(t, short.Retry(ctx, "k0"))
	specMust(t, short.Drop(ctx, "k1"))

	grp, err := c.Task(specPart, "grp", []string{"uid"}, tq.WithGroups(tq.GroupTag("g"), 2))
	specMust(t, err)
	claimN(t, grp, 2) // group p0: k0 k1
	claimN(t, grp, 4) // p1: k2 k3 (k4 waits for a partner; p2 is incomplete)

	fresh, err := c.Task(specPart, "fresh", []string{"uid"}, tq.Staleness("v", 0, true))
	specMust(t, err)
	fresh.SetVersion(5)
	claimN(t, fresh, 1) // drops k0 (v 1) and k3 (v 2), leases k1
	parked, err := c.Task(specPart, "parked", []string{"uid"}, tq.Staleness("v", 0, false))
	specMust(t, err)
	parked.SetVersion(5)
	claimN(t, parked, 1) // parks k0 and k3, leases k1
	// A commit of a parked row takes it out of the parked rows.
	specMust(t, c.BatchPut(ctx, specPart, []string{"k0"}, tq.Batch{"uid": tq.ValuesOf([]string{"u0b"})}, []tq.Tag{{"v": int64(9)}}))

	r0, err := c.Task(specPart, "dp", []string{"uid"}, tq.Ranks(2, 0, ""))
	specMust(t, err)
	r1, err := c.Task(specPart, "dp", []string{"uid"}, tq.Ranks(2, 1, ""))
	specMust(t, err)
	claimN(t, r0, 2)
	claimN(t, r1, 2)

	// A Wait whose claim stands until a commit makes a row ready: the
	// record that commits fulfils it.
	waiter, err := c.Task(specPart, "waiter", []string{"late"})
	specMust(t, err)
	got := make(chan error, 1)
	go func() {
		l, err := waiter.Wait(ctx, 1)
		if err == nil && !slices.Equal(l.Keys(), []string{"k2"}) {
			err = fmt.Errorf("the Wait leased %v", l.Keys())
		}
		got <- err
	}()
	waitStanding(t, rc, prefix, "waiter")
	specMust(t, c.BatchPut(ctx, specPart, []string{"k2"}, tq.Batch{"late": tq.ValuesOf([]string{"l2"})}, nil))
	specMust(t, <-got)

	// A Wait that gives up: its claim is cancelled (unwait).
	gaveup, err := c.Task(specPart, "gaveup", []string{"never"})
	specMust(t, err)
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = gaveup.Wait(wctx, 1)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a Wait for nothing: %v", err)
	}

	specMust(t, c.Clear(ctx, specPart, []string{"k5"}))
	_, err = c.Reclaim(ctx, specPart, 0)
	specMust(t, err)

	// A partition cleared whole: its log is emptied, once its state has
	// stayed empty a moment (the writer's emptyAfter).
	specMust(t, c.Put(ctx, "spec/gone", "k", map[string]any{"uid": "u"}, nil))
	specMust(t, c.ClearPartition(ctx, "spec/gone"))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		z, err := rc.HGet(ctx, srBase(prefix, "spec/gone")+":snap", "z").Result()
		if z == "1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("spec/gone's log not emptied: z=%q (%v)", z, err)
		}
	}

	// A field cleared from rows: their other fields and tags stay.
	specMust(t, c.ClearFields(ctx, specPart, []string{"k3", "k4"}, "step"))

	// A capacity: a put past it refused, a row cleared once the task
	// named to clear after acknowledges it.
	st, err := c.Status(ctx, specPart)
	specMust(t, err)
	specMust(t, c.SetCapacity(ctx, specPart, tq.Capacity{Rows: st.Used.Rows + 1, Bytes: st.Used.Bytes + 4096, ClearAcked: []string{"cleaner"}}))
	full := c.BatchPut(tq.WhenFull(ctx, tq.Fail), specPart, []string{"c0", "c1"}, tq.Batch{"uid": tq.ValuesOf([]string{"c0", "c1"})}, nil)
	if !errors.Is(full, tq.ErrFull) {
		t.Fatalf("a put past the capacity: %v", full)
	}
	specMust(t, c.Put(ctx, specPart, "c0", map[string]any{"uid": "c0"}, nil))
	cleaner, err := c.Task(specPart, "cleaner", []string{"uid"})
	specMust(t, err)
	specMust(t, claimN(t, cleaner, 1).Ack(ctx))

	// A Wait left standing while the server is read.
	standing, err := c.Task(specPart, "standing", []string{"never"})
	specMust(t, err)
	sctx, scancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = standing.Wait(sctx, 1)
	}()
	waitStanding(t, rc, prefix, "standing")
	return func() { scancel(); <-done }
}

// checkSpecRows compares the reader's rows of part (keys, indexes, tags,
// fields, cells) and their usage with tq's, and returns the reader's
// state.
func checkSpecRows(t *testing.T, c *tq.Client, rc *goredis.Client, prefix, part string) *srState {
	t.Helper()
	ctx := t.Context()
	st := readSpec(t, rc, prefix, part)
	meta, err := c.List(ctx, part)
	specMust(t, err)
	var mine []*srRow
	for _, r := range st.byIndex {
		mine = append(mine, r)
	}
	slices.SortFunc(mine, func(a, b *srRow) int { return srCompare(a.index, b.index) })
	if len(mine) != len(meta.Rows) {
		t.Fatalf("%s: the reader lists %d rows, tq %d", part, len(mine), len(meta.Rows))
	}
	for i, ri := range meta.Rows {
		r := mine[i]
		if r.key != ri.Key || r.index != ri.Index {
			t.Errorf("row %d: reader %q@%d, tq %q@%d", i, r.key, r.index, ri.Key, ri.Index)
		}
		if !reflect.DeepEqual(r.tag, map[string]any(ri.Tag)) && !(len(r.tag) == 0 && len(ri.Tag) == 0) {
			t.Errorf("row %q: reader's tag %#v, tq's %#v", r.key, r.tag, ri.Tag)
		}
		if len(r.fields) != len(ri.Fields) {
			t.Errorf("row %q: reader's fields %v, tq's %v", r.key, r.fields, ri.Fields)
		}
		for f, fi := range ri.Fields {
			mf, ok := r.fields[f]
			var shape []int
			if mf.shape != nil {
				shape = []int{}
				for _, d := range mf.shape {
					shape = append(shape, int(d))
				}
			}
			if !ok || mf.dtype != fi.DType || !reflect.DeepEqual(shape, fi.Shape) {
				t.Errorf("row %q field %q: reader %q %#v, tq %q %#v", r.key, f, mf.dtype, shape, fi.DType, fi.Shape)
			}
			n, err := rc.Exists(ctx, prefix+":d:"+srStorageKey(r.index, f, mf.gen)).Result()
			if err != nil || n != 1 {
				t.Errorf("row %q field %q: no cell %s (%v)", r.key, f, srStorageKey(r.index, f, mf.gen), err)
			}
		}
	}
	// The shapes LAYOUT.md states: a 0-d tensor's is empty, a general
	// value's nil.
	for _, r := range mine {
		if f, ok := r.fields["step"]; ok && (f.shape == nil || len(f.shape) != 0 || f.dtype != "int64") {
			t.Errorf("row %q: a 0-d tensor's shape reads %#v (%q)", r.key, f.shape, f.dtype)
		}
		if f, ok := r.fields["s0"]; ok && (f.shape == nil || len(f.shape) != 0) {
			t.Errorf("row %q: a 0-d tensor's shape reads %#v", r.key, f.shape)
		}
		if f, ok := r.fields["w"]; ok && (f.shape == nil || len(f.shape) != 0 || f.dtype != "float32") {
			t.Errorf("row %q: a 0-d tensor's shape reads %#v (%q)", r.key, f.shape, f.dtype)
		}
		if f := r.fields["uid"]; f.shape != nil || f.dtype != "" {
			t.Errorf("row %q: a general value's shape reads %#v (%q)", r.key, f.shape, f.dtype)
		}
	}

	status, err := c.Status(ctx, part)
	specMust(t, err)
	if status.Rows != len(mine) {
		t.Errorf("Status: %d rows, the reader %d", status.Rows, len(mine))
	}
	if rows, bytes := st.usage(); status.Used != (tq.Usage{Rows: rows, Bytes: bytes}) ||
		status.Capacity.Rows != st.capRows || status.Capacity.Bytes != st.capBytes || !slices.Equal(status.Capacity.ClearAcked, st.clearAfter) {
		t.Errorf("capacity: Status %+v used %+v, the reader %d rows %d bytes after %q, used %d rows %d bytes",
			status.Capacity, status.Used, st.capRows, st.capBytes, st.clearAfter, rows, bytes)
	}
	fields := map[string]int{}
	for _, r := range mine {
		for f := range r.fields {
			fields[f]++
		}
	}
	if !reflect.DeepEqual(fields, status.Fields) {
		t.Errorf("fields: reader %v, Status %v", fields, status.Fields)
	}
	return st
}

// checkSpecReader compares the reader's reconstruction with tq's.
func checkSpecReader(t *testing.T, c *tq.Client, rc *goredis.Client, prefix string) {
	ctx := t.Context()
	st := checkSpecRows(t, c, rc, prefix, specPart)
	checkSpecRows(t, c, rc, prefix, blkPart)
	status, err := c.Status(ctx, specPart)
	specMust(t, err)
	if len(st.clearAfter) == 0 || st.capRows == 0 {
		t.Errorf("the reader found no capacity in the log")
	}
	var withState []string
	for name := range st.tasks {
		cnt, ok := st.counts(name, st.now)
		if !ok {
			continue
		}
		withState = append(withState, name)
		ts := status.Tasks[name]
		want := srCounts{ts.Ready + ts.Waiting, ts.Leased, ts.Acked, ts.Dead, ts.Dropped}
		if cnt != want {
			t.Errorf("task %q: reader %+v, Status %+v", name, cnt, ts)
		}
	}
	slices.Sort(withState)
	var listed []string
	for name := range status.Tasks {
		listed = append(listed, name)
	}
	slices.Sort(listed)
	if !slices.Equal(withState, listed) {
		t.Errorf("tasks with consumption: reader %v, Status %v", withState, listed)
	}
	for _, name := range []string{"gaveup", "standing"} {
		if st.tasks[name] == nil {
			t.Errorf("task %q, registered by its claim, is not in the reader's state", name)
		}
	}
	if tk := st.tasks["standing"]; tk == nil || len(tk.standing) != 1 || tk.standing[0].a.hold != 0 {
		t.Errorf("the standing Wait's claim is not standing in the reader's state")
	}
	if tk := st.tasks["gaveup"]; tk == nil || len(tk.standing) != 0 {
		t.Errorf("the cancelled Wait's claim still stands in the reader's state")
	}
	if tk := st.tasks["waiter"]; tk == nil || len(tk.served) != 1 {
		t.Errorf("the fulfilled Wait's claim is not served in the reader's state")
	}
	short, err := c.Task(specPart, "short", []string{"uid"})
	specMust(t, err)
	dead, err := short.Dead(ctx)
	specMust(t, err)
	var myDead []string
	for i, e := range st.tasks["short"].entries {
		if srSeen(*e, st.now).state == srDead {
			myDead = append(myDead, st.byIndex[i].key)
		}
	}
	var tqDead []string
	for _, d := range dead {
		tqDead = append(tqDead, d.Key)
	}
	slices.Sort(myDead)
	slices.Sort(tqDead)
	if !slices.Equal(myDead, tqDead) || len(tqDead) != 1 {
		t.Errorf("dead rows of short: reader %v, tq %v", myDead, tqDead)
	}

	// Partitions: the registry's members with committed rows.
	members, err := rc.SMembers(ctx, prefix+":{"+prefix+"}:parts").Result()
	specMust(t, err)
	var withRows []string
	for _, p := range members {
		if len(readSpec(t, rc, prefix, p).byIndex) > 0 {
			withRows = append(withRows, p)
		}
	}
	slices.Sort(withRows)
	parts, err := c.Partitions(ctx)
	specMust(t, err)
	if !slices.Equal(withRows, parts) {
		t.Errorf("partitions: reader %v, tq %v", withRows, parts)
	}

	// An emptied log: trimmed to its last entry, z and e, an hour to live,
	// out of the registry.
	gone := srBase(prefix, "spec/gone")
	xs, err := rc.XRange(ctx, gone+":log", "-", "+").Result()
	specMust(t, err)
	snap, err := rc.HGetAll(ctx, gone+":snap").Result()
	specMust(t, err)
	if len(xs) != 1 || snap["z"] != "1" || snap["e"] != "1" || snap["n"] != strings.TrimSuffix(xs[0].ID, "-0") {
		t.Errorf("an emptied log: entries %v, snapshot %v", xs, snap)
	}
	for _, k := range []string{gone + ":log", gone + ":snap"} {
		if ttl, err := rc.PTTL(ctx, k).Result(); err != nil || ttl <= 0 || ttl > time.Hour {
			t.Errorf("%s: PTTL %v (%v)", k, ttl, err)
		}
	}
	if slices.Contains(members, "spec/gone") {
		t.Errorf("an emptied partition is in the registry: %v", members)
	}
	if g := readSpec(t, rc, prefix, "spec/gone"); len(g.rows) != 0 || len(g.tasks) != 0 {
		t.Errorf("an emptied log replays to %d rows", len(g.rows))
	}
}

// layoutDoc is LAYOUT.md, and its prose: the text outside the scripts'
// blocks.
func layoutDoc(t *testing.T) (doc, prose string) {
	t.Helper()
	raw, err := os.ReadFile("LAYOUT.md")
	specMust(t, err)
	doc = string(raw)
	prose = regexp.MustCompile("(?s)<!-- log-script:[a-z]+ -->\n```\n.*?```").ReplaceAllString(doc, "")
	return doc, prose
}

var (
	storageKeyRE = regexp.MustCompile(`^[0-9]+@[A-Za-z0-9_.:/-]+(#[1-9][0-9]*)?$`)
	markerRE     = regexp.MustCompile(`^[0-9a-z]+$`)
)

// checkSpecKeys: every key under the prefix is one LAYOUT.md section 2
// names, of its type, and every field of a log entry or snapshot is one
// sections 4 and 5 name.
func checkSpecKeys(t *testing.T, rc *goredis.Client, prefix string) {
	ctx := t.Context()
	doc, _ := layoutDoc(t)
	for _, want := range []string{"`<prefix>:d:<storage key>`", "`<prefix>:d:!put:<random>`", "`base:log`", "`base:snap`",
		"`gbase:next`", "`gbase:parts`", "`<prefix>:{<prefix>:<P'>}`", "`<prefix>:{<prefix>}`"} {
		if !strings.Contains(doc, want) {
			t.Errorf("LAYOUT.md does not name %s", want)
		}
	}
	partRE := regexp.MustCompile(`^` + regexp.QuoteMeta(prefix+":{"+prefix+":") + `(.*)\}:(log|snap|owner|compactor)$`)
	var all []string
	iter := rc.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		all = append(all, iter.Val())
	}
	specMust(t, iter.Err())
	kinds := map[string]int{}
	for _, k := range all {
		typ, err := rc.Type(ctx, k).Result()
		specMust(t, err)
		var kind, want string
		switch rest, isData := strings.CutPrefix(k, prefix+":d:"); {
		case isData && strings.HasPrefix(rest, "!put:"):
			kind, want = "marker", "string"
			if !markerRE.MatchString(strings.TrimPrefix(rest, "!put:")) {
				t.Errorf("marker key %q", k)
			}
		case isData:
			kind, want = "cell", "string"
			if !storageKeyRE.MatchString(rest) {
				t.Errorf("data key %q: not a storage key", k)
			}
		case k == prefix+":{"+prefix+"}:next":
			kind, want = "next", "string"
			if v, err := rc.Get(ctx, k).Result(); err != nil || !regexp.MustCompile(`^(0|[1-9][0-9]*)$`).MatchString(v) {
				t.Errorf("%s = %q (%v): not decimal", k, v, err)
			}
		case k == prefix+":{"+prefix+"}:parts":
			kind, want = "parts", "set"
		case partRE.MatchString(k):
			m := partRE.FindStringSubmatch(k)
			kind = m[2]
			want = map[string]string{"log": "stream", "snap": "hash", "owner": "string", "compactor": "string"}[kind]
			if kind == "log" {
				checkEntryFields(t, rc, k, doc)
			} else if kind == "snap" {
				fields, err := rc.HKeys(ctx, k).Result()
				specMust(t, err)
				for _, f := range fields {
					if !slices.Contains([]string{"n", "i", "d", "z", "e"}, f) || !strings.Contains(doc, "| `"+f+"` |") {
						t.Errorf("%s: field %q is not LAYOUT.md's", k, f)
					}
				}
			}
		default:
			t.Errorf("key %q is none LAYOUT.md names", k)
			continue
		}
		kinds[kind]++
		if typ != want {
			t.Errorf("%s is a %s, LAYOUT.md says %s", k, typ, want)
		}
	}
	for _, k := range []string{"cell", "next", "parts", "log", "snap"} {
		if kinds[k] == 0 {
			t.Errorf("the workload left no %s key: the check saw %v", k, kinds)
		}
	}
}

// checkEntryFields: a stream's entries hold i, t, [b,] d, in this order.
func checkEntryFields(t *testing.T, rc *goredis.Client, key, doc string) {
	raw, err := rc.Do(t.Context(), "XRANGE", key, "-", "+").Slice()
	specMust(t, err)
	for _, x := range raw {
		e := x.([]any)
		fv := e[1].([]any)
		var names []string
		for j := 0; j < len(fv); j += 2 {
			names = append(names, fv[j].(string))
		}
		if got := strings.Join(names, ","); got != "i,t,d" && got != "i,t,b,d" {
			t.Errorf("%s entry %v: fields %s, LAYOUT.md says i, t, [b,] d", key, e[0], got)
		}
		for _, n := range names {
			if !strings.Contains(doc, "| `"+n+"` |") {
				t.Errorf("LAYOUT.md has no row for the entry field %q", n)
			}
		}
	}
}

// checkSpecCommands: every script the engine ran is one of LAYOUT.md's,
// and every command it sent is named in LAYOUT.md's prose.
func checkSpecCommands(t *testing.T, rec *cmdRecorder) {
	_, prose := layoutDoc(t)
	known := map[string]string{}
	for name, src := range redis.LogScripts() {
		sum := sha1.Sum([]byte(src))
		known[hex.EncodeToString(sum[:])] = name
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.shas) == 0 {
		t.Error("the hook saw no EVALSHA")
	}
	for sha := range rec.shas {
		if _, ok := known[sha]; !ok {
			t.Errorf("the engine ran a script %s that LAYOUT.md does not hold", sha)
		}
	}
	connection := []string{"HELLO", "CLIENT", "PING", "AUTH", "SELECT", "READONLY"}
	for name := range rec.names {
		if slices.Contains(connection, name) {
			continue
		}
		if !strings.Contains(prose, "`"+name) {
			t.Errorf("the engine sent %s, which LAYOUT.md's prose does not name", name)
		}
	}
}

// TestSpecNamesDocumented: the key names the code builds (log.go,
// log_cells.go, store.go), the fields its scripts write and read, and the
// commands they run are in LAYOUT.md; the scripts' sources are its blocks.
func TestSpecNamesDocumented(t *testing.T) {
	doc, prose := layoutDoc(t)
	lit := regexp.MustCompile(`"((?::|!)[a-z{}!:]*)"`)
	for _, file := range []string{"log.go", "log_cells.go", "store.go"} {
		src, err := os.ReadFile(file)
		specMust(t, err)
		for _, m := range lit.FindAllStringSubmatch(string(src), -1) {
			if s := m[1]; len(s) > 1 && !strings.Contains(doc, s) {
				t.Errorf("%s builds keys with %q, which LAYOUT.md does not name", file, s)
			}
		}
	}
	field := regexp.MustCompile(`'([a-z])'`)
	call := regexp.MustCompile(`redis\.call\('([A-Z]+)'`)
	for name, src := range redis.LogScripts() {
		if !strings.Contains(doc, "<!-- "+name+" -->") {
			t.Errorf("LAYOUT.md has no block %s", name)
		}
		for _, m := range field.FindAllStringSubmatch(src, -1) {
			if !strings.Contains(doc, "| `"+m[1]+"` |") {
				t.Errorf("script %s uses the field %q, which LAYOUT.md's tables do not name", name, m[1])
			}
		}
		for _, m := range call.FindAllStringSubmatch(src, -1) {
			if !strings.Contains(prose, "`"+m[1]) {
				t.Errorf("script %s runs %s, which LAYOUT.md's prose does not name", name, m[1])
			}
		}
	}
}
