package tq_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/tq"
)

// TestConcurrentWriters: 8 writers and 2 readers on one client. Writers
// 0-3 own disjoint rows of partition "shared" and a partition each; writers
// 4-7 write their own field of the same 32 rows, and all of them overwrite
// the same "hot" cells. Readers check every value they see. At the end each
// row has every field with its writer's last value, "hot" holds one
// writer's last value, indexes are unique and the backend holds exactly one
// generation of every cell.
func TestConcurrentWriters(t *testing.T) {
	const rounds, nShared, nOwn = 25, 32, 16
	ctx := context.Background()
	s := newSpy(nil)
	c := newClient(t, s.backend(true), nil, tq.WithKeysLimit(16))

	shared := keysN("s", nShared)
	hotKeys := shared[:4]
	mustPut(t, c, "shared", shared, tq.Batch{"base": tq.Stacked(seq[int64](0, nShared), nShared)}, nil)
	mustPut(t, c, "shared", hotKeys, tq.Batch{"hot": tq.Stacked(make([]int64, 4), 4)}, nil)
	fill := func(v int64, n int) []int64 {
		out := make([]int64, n)
		for i := range out {
			out[i] = v
		}
		return out
	}
	val := func(g, r int) int64 { return int64(g*1000 + r) }

	var writers, readers sync.WaitGroup
	done := make(chan struct{})
	for g := range 8 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			own := keysN(fmt.Sprintf("w%d-", g), nOwn)
			for r := range rounds {
				v := val(g, r)
				var err error
				if g < 4 {
					b := tq.Batch{"a": tq.Stacked(fill(v, nOwn), nOwn), "b": tq.ValuesOf(fill(v, nOwn))}
					err = c.BatchPut(ctx, "shared", own, b, nil)
					if err == nil {
						err = c.BatchPut(ctx, fmt.Sprintf("part%d", g), own, b, nil)
					}
				} else {
					f := fmt.Sprintf("f%d", g)
					err = c.BatchPut(ctx, "shared", shared, tq.Batch{f: tq.Stacked(fill(v, nShared), nShared)}, nil)
					if err == nil {
						tags := slices.Repeat([]tq.Tag{{"writer": int64(g)}}, len(hotKeys))
						err = c.BatchPut(ctx, "shared", hotKeys, tq.Batch{"hot": tq.Stacked(fill(v, 4), 4)}, tags)
					}
				}
				if err != nil {
					t.Errorf("writer %d round %d: %v", g, r, err)
					return
				}
			}
		}()
	}
	for range 2 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				b, err := c.BatchGet(ctx, "shared", shared, "base")
				if err != nil {
					t.Errorf("read base: %v", err)
					return
				}
				if got := flat[int64](t, b["base"]); !slices.Equal(got, seq[int64](0, nShared)) {
					t.Errorf("base = %v", got)
					return
				}
				b, err = c.BatchGet(ctx, "shared", hotKeys, "hot")
				if err != nil {
					t.Errorf("read hot: %v", err)
					return
				}
				for _, v := range flat[int64](t, b["hot"]) {
					if g, r := v/1000, v%1000; v != 0 && (g < 4 || g > 7 || r >= rounds) {
						t.Errorf("hot holds %d, which nobody wrote", v)
						return
					}
				}
				m, err := c.List(ctx, "shared")
				if err != nil {
					t.Errorf("list: %v", err)
					return
				}
				sub := &tq.BatchMeta{Partition: m.Partition}
				for _, r := range m.Rows {
					if _, ok := r.Fields["base"]; ok {
						sub.Rows = append(sub.Rows, r)
					}
				}
				if len(sub.Rows) != nShared {
					t.Errorf("list: %d rows with base, want %d", len(sub.Rows), nShared)
					return
				}
				if _, err := c.BatchGetByMeta(ctx, sub, "base"); err != nil {
					t.Errorf("read by meta: %v", err)
					return
				}
			}
		}()
	}
	writers.Wait()
	close(done)
	readers.Wait()
	if t.Failed() {
		return
	}

	// Every row has every field, with its writer's last value.
	last := func(g int) int64 { return val(g, rounds-1) }
	got := mustGet(t, c, "shared", shared, "base", "f4", "f5", "f6", "f7")
	if v := flat[int64](t, got["base"]); !slices.Equal(v, seq[int64](0, nShared)) {
		t.Fatalf("base = %v", v)
	}
	for g := 4; g < 8; g++ {
		if v := flat[int64](t, got[fmt.Sprintf("f%d", g)]); !slices.Equal(v, fill(last(g), nShared)) {
			t.Fatalf("f%d = %v, want all %d", g, v, last(g))
		}
	}
	for g := range 4 {
		own := keysN(fmt.Sprintf("w%d-", g), nOwn)
		for _, p := range []string{"shared", fmt.Sprintf("part%d", g)} {
			b := mustGet(t, c, p, own)
			if v := flat[int64](t, b["a"]); !slices.Equal(v, fill(last(g), nOwn)) {
				t.Fatalf("%s a of writer %d = %v", p, g, v)
			}
			for _, v := range b["b"].Values() {
				if v != last(g) {
					t.Fatalf("%s b of writer %d = %v", p, g, b["b"].Values())
				}
			}
		}
	}
	// The hot cells: one writer's last value, the same writer for all four
	// rows (they were reserved together), and that writer's tag.
	hot := flat[int64](t, mustGet(t, c, "shared", hotKeys, "hot")["hot"])
	w := hot[0] / 1000
	if w < 4 || w > 7 || !slices.Equal(hot, fill(last(int(w)), 4)) {
		t.Fatalf("hot = %v, want all four the last value of one writer", hot)
	}
	lk, err := c.Lookup(ctx, "shared", hotKeys)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range lk.Rows {
		if r.Tag["writer"] == nil {
			t.Fatalf("hot row %s has no writer tag: %v", r.Key, r.Tag)
		}
	}

	// Indexes unique across partitions; one stored generation per cell.
	ps, err := c.Partitions(ctx)
	if err != nil || !slices.Equal(ps, []string{"part0", "part1", "part2", "part3", "shared"}) {
		t.Fatalf("partitions %v %v", ps, err)
	}
	seen := map[uint64]string{}
	cells := 0
	for _, p := range ps {
		m, err := c.List(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range m.Rows {
			if other, dup := seen[r.Index]; dup {
				t.Fatalf("index %d held by %s and %s/%s", r.Index, other, p, r.Key)
			}
			seen[r.Index] = p + "/" + r.Key
			cells += len(r.Fields)
		}
	}
	if want := nShared*5 + 4 + 4*nOwn*2*2; cells != want {
		t.Fatalf("%d cells in the metadata, want %d", cells, want)
	}
	live := s.live(t)
	if len(live) != cells {
		t.Fatalf("backend holds %d keys for %d cells: orphaned generations", len(live), cells)
	}
	perCell := map[string]int{}
	for _, k := range live {
		base, _, _ := cutGen(k)
		perCell[base]++
	}
	for cell, n := range perCell {
		if n != 1 {
			t.Fatalf("cell %s has %d stored generations", cell, n)
		}
	}
}

// cutGen splits "<index>@<field>#<gen>" into the cell and the generation.
func cutGen(skey string) (cell, gen string, ok bool) {
	if i := slices.Index([]byte(skey), '#'); i >= 0 {
		return skey[:i], skey[i+1:], true
	}
	return skey, "", false
}

// TestConcurrentOverwriteSameCell: goroutines overwrite one (key, field)
// as fast as they can; afterwards exactly one value is visible and the
// backend holds exactly one generation of the cell.
func TestConcurrentOverwriteSameCell(t *testing.T) {
	for _, alloc := range []bool{false, true} {
		t.Run(fmt.Sprintf("alloc=%v", alloc), func(t *testing.T) {
			ctx := context.Background()
			s := newSpy(nil)
			c := newClient(t, s.backend(alloc), nil)
			const writers, rounds = 6, 30
			var wg sync.WaitGroup
			for g := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for r := range rounds {
						v := fmt.Sprintf("g%d-r%d", g, r)
						if err := c.Put(ctx, "p", "k", map[string]any{"f": v}, nil); err != nil {
							t.Errorf("put %s: %v", v, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			got := mustGet(t, c, "p", []string{"k"}, "f")["f"].Values()
			var g, r int
			if n, err := fmt.Sscanf(got[0].(string), "g%d-r%d", &g, &r); n != 2 || err != nil || r != rounds-1 {
				t.Fatalf("value %v, want some writer's last value", got)
			}
			live := s.live(t)
			if len(live) != 1 || indexOf(live[0]) != "0" {
				t.Fatalf("backend keys %v, want one generation of 0@f", live)
			}
			if _, gen, _ := cutGen(live[0]); gen != fmt.Sprint(writers*rounds-1) {
				// Generations are reserved in Prepare order; the last one wins.
				t.Fatalf("stored generation %q, want the last reserved, %d", gen, writers*rounds-1)
			}
		})
	}
}

// TestConcurrentPutAndClear: puts of a row race clears of it. Each put
// either succeeds or fails because the row was cleared under it; at the
// end the backend holds exactly the cells the metadata names.
func TestConcurrentPutAndClear(t *testing.T) {
	ctx := context.Background()
	s := newSpy(nil)
	c := newClient(t, s.backend(true), nil)
	keys := keysN("k", 8)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range 40 {
				var err error
				switch {
				case g == 0 && r%2 == 0:
					err = c.Clear(ctx, "p", keys[:4])
				case g == 0:
					err = c.ClearPartition(ctx, "p")
				default:
					err = c.BatchPut(ctx, "p", keys, tq.Batch{fmt.Sprintf("f%d", g): tq.Stacked(seq[int64](int64(r), 8), 8)}, nil)
					if errors.Is(err, backends.ErrConflict) {
						err = nil // the row was cleared during the put
					}
				}
				if err != nil {
					t.Errorf("goroutine %d round %d: %v", g, r, err)
					return
				}
				if _, err := c.BatchGet(ctx, "p", keys[4:]); err != nil && !errors.Is(err, tq.ErrNotFound) && !errors.Is(err, tq.ErrNotReady) {
					t.Errorf("read: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	m, err := c.List(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	cells := 0
	for _, r := range m.Rows {
		cells += len(r.Fields)
	}
	if live := s.live(t); len(live) != cells {
		t.Fatalf("backend holds %d keys for %d cells: %v", len(live), cells, live)
	}
}

// TestReadRetriesWhileOverwritten: a cell replaced between a read's lookup
// and its fetch is looked up again, for as long as writers keep replacing
// it; the read returns the newest value, never ErrNotFound for a key that
// exists. Here each of the first 5 fetches is preceded by an overwrite.
func TestReadRetriesWhileOverwritten(t *testing.T) {
	ctx := context.Background()
	var c *tq.Client
	var overwrites int
	s := newSpy(func(_ context.Context, op string, n int, keys []string) (int, error) {
		if op == "get" && n <= 5 {
			overwrites++
			if err := c.Put(ctx, "p", "k", map[string]any{"f": int64(overwrites)}, nil); err != nil {
				return 0, err
			}
		}
		return len(keys), nil
	})
	c = newClient(t, s, nil)
	mustPut(t, c, "p", []string{"k"}, tq.Batch{"f": tq.ValuesOf([]int64{0})}, nil)
	for name, read := range map[string]func() (tq.Batch, error){
		"BatchGet": func() (tq.Batch, error) { return c.BatchGet(ctx, "p", []string{"k"}, "f") },
		"BatchGetByMeta": func() (tq.Batch, error) {
			m, err := c.Lookup(ctx, "p", []string{"k"})
			if err != nil {
				return nil, err
			}
			return c.BatchGetByMeta(ctx, m, "f")
		},
	} {
		s.resetCalls()
		overwrites = 0
		b, err := read()
		if err != nil {
			t.Fatalf("%s while overwritten 5 times: %v", name, err)
		}
		if got := b["f"].Values(); len(got) != 1 || got[0] != int64(5) {
			t.Fatalf("%s = %v, want the newest value 5", name, got)
		}
	}
}

// TestReadOfLostCell: a cell the metadata names but the engine lost gives
// ErrNotFound naming the key and field, at once, not a retry loop.
func TestReadOfLostCell(t *testing.T) {
	ctx := context.Background()
	s := newSpy(nil)
	c := newClient(t, s, nil)
	mustPut(t, c, "p", []string{"a", "b"}, tq.Batch{"f": tq.ValuesOf([]int64{1, 2})}, nil)
	if err := delRaw(ctx, s.inner, []string{"1@f"}); err != nil {
		t.Fatal(err)
	}
	s.resetCalls()
	_, err := c.BatchGet(ctx, "p", []string{"a", "b"})
	if !isKeyErr(err, tq.ErrNotFound, "b", "f") {
		t.Fatalf("lost cell: %v", err)
	}
	if n := s.count("get"); n > 2 {
		t.Fatalf("%d fetches for a lost cell", n)
	}
	m, _ := c.List(ctx, "p")
	if _, err := c.BatchGetByMeta(ctx, m); !isKeyErr(err, tq.ErrNotFound, "b", "f") {
		t.Fatalf("lost cell by meta: %v", err)
	}
}

// TestCloseDuringPuts: puts racing Close either succeed or fail with
// ErrClosed; none reports a closed client as an invalid argument.
func TestCloseDuringPuts(t *testing.T) {
	for range 20 {
		ctx := context.Background()
		c, err := tq.New(local(memory.New()))
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		started := make(chan struct{}, 4)
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := 0; ; r++ {
					err := c.BatchPut(ctx, "p", []string{fmt.Sprint(g, "-", r)}, tq.Batch{"x": tq.ValuesOf([]int{r})}, nil)
					if r == 0 {
						started <- struct{}{}
					}
					if err == nil {
						continue
					}
					if !errors.Is(err, tq.ErrClosed) {
						t.Errorf("put racing Close: %v, want ErrClosed", err)
					}
					return
				}
			}()
		}
		for range 4 {
			<-started
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if t.Failed() {
			return
		}
	}
}

// TestClearFinishesAfterCancel: once Clear has removed rows from the
// metadata, their bytes are deleted even if the caller's context ends
// meanwhile; nothing could find them later.
func TestClearFinishesAfterCancel(t *testing.T) {
	var cancel atomic.Pointer[context.CancelFunc]
	s := newSpy(func(_ context.Context, op string, _ int, keys []string) (int, error) {
		if op == "delete" {
			(*cancel.Load())()
		}
		return len(keys), nil
	})
	c := newClient(t, s, nil, tq.WithKeysLimit(2), tq.WithIODepth(1))
	cancellable := func() context.Context {
		ctx, cf := context.WithCancel(context.Background())
		cancel.Store(&cf)
		t.Cleanup(cf)
		return ctx
	}
	keys := keysN("k", 4)
	mustPut(t, c, "p", keys, tq.Batch{"x": tq.ValuesOf([]int{1, 2, 3, 4})}, nil)
	_ = c.Clear(cancellable(), "p", keys[:2])
	if _, err := c.Lookup(context.Background(), "p", keys[:1]); !errors.Is(err, tq.ErrNotFound) {
		t.Fatalf("row after Clear: %v", err)
	}
	if got := s.live(t); len(got) != 2 {
		t.Fatalf("backend keys %v after clearing 2 of 4 rows: the cleared rows' bytes are orphaned", got)
	}
	_ = c.ClearPartition(cancellable(), "p")
	if got := s.live(t); len(got) != 0 {
		t.Fatalf("backend keys %v after ClearPartition: orphaned", got)
	}
	if n := s.count("delete"); n != 2 {
		t.Fatalf("%d delete calls, want 2 (one chunk of 2 cells each)", n)
	}
}
