package tq_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/tq"
)

// countingBlocker is the memory MetaStore, counting the calls of a put.
type countingBlocker struct {
	*memory.MetaStore
	mu    sync.Mutex
	calls map[string]int
	// lose, when set, makes the next PutNew fail with ErrOutcomeUnknown,
	// having applied (a lost reply) or not (a lost request).
	lose, applied bool
}

func (m *countingBlocker) count(op string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls[op]++
}

func (m *countingBlocker) snapshot() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int{}
	for k, v := range m.calls {
		out[k] = v
	}
	return out
}

func (m *countingBlocker) Prepare(ctx context.Context, partition string, keys, fields []string, sizes []int64) ([]metadata.Reservation, error) {
	m.count("Prepare")
	return m.MetaStore.Prepare(ctx, partition, keys, fields, sizes)
}

func (m *countingBlocker) Commit(ctx context.Context, partition string, updates []metadata.RowUpdate) (metadata.CommitResult, error) {
	m.count("Commit")
	return m.MetaStore.Commit(ctx, partition, updates)
}

func (m *countingBlocker) Block(ctx context.Context, partition string, fields []string, n int) (metadata.IndexBlock, error) {
	m.count("Block")
	return m.MetaStore.Block(ctx, partition, fields, n)
}

func (m *countingBlocker) PutNew(ctx context.Context, partition string, token, base uint64, keys, fields []string, sizes []int64, updates []metadata.RowUpdate) (metadata.CommitResult, error) {
	m.count("PutNew")
	m.mu.Lock()
	lose, applied := m.lose, m.applied
	m.lose = false
	m.mu.Unlock()
	if !lose {
		return m.MetaStore.PutNew(ctx, partition, token, base, keys, fields, sizes, updates)
	}
	if applied {
		if _, err := m.MetaStore.PutNew(ctx, partition, token, base, keys, fields, sizes, updates); err != nil {
			return metadata.CommitResult{}, err
		}
	}
	return metadata.CommitResult{}, fmt.Errorf("a lost reply: %w", backends.ErrOutcomeUnknown)
}

func (m *countingBlocker) ReleaseBlock(ctx context.Context, partition string, b metadata.IndexBlock, written []uint64) error {
	m.count("ReleaseBlock")
	return m.MetaStore.ReleaseBlock(ctx, partition, b, written)
}

// unstaged is a data store without its Stager: the memory store as
// Redis's is.
type unstaged struct{ backends.Store }

// blockClient is a client that puts by blocks (tq.WithIndexBlocks) over
// blockEngine's stores.
func blockClient(t *testing.T) (*tq.Client, *memory.Store, *countingBlocker) {
	st, meta := blockEngine(t)
	return newClient(t, unstaged{st}, meta, tq.WithIndexBlocks()), st, meta
}

// putRows puts new rows k<from>..k<from+n-1> of blockBatch to partition p.
func putRows(ctx context.Context, c *tq.Client, from, n int) error {
	return c.BatchPut(ctx, "p", keysN("k", from+n)[from:], blockBatch(from, n), nil)
}

// blockEngine is a memory data store and a counting metadata store,
// closed when t ends: a client over them (unstaged{st}) puts by blocks.
func blockEngine(t *testing.T) (*memory.Store, *countingBlocker) {
	st := memory.New()
	meta := &countingBlocker{MetaStore: memory.NewMetaStore(), calls: map[string]int{}}
	t.Cleanup(func() { _ = meta.Close(); _ = st.Close() })
	return st, meta
}

func blockBatch(from, n int) tq.Batch {
	x := make([]float32, n)
	v := make([]string, n)
	for i := range n {
		x[i] = float32(from + i)
		v[i] = keysN("v", from+n)[from+i]
	}
	return tq.Batch{"x": tq.Stacked(x, n, 1), "v": tq.ValuesOf(v)}
}

// waitCalls waits (bounded) until op was called n times.
func waitCalls(t *testing.T, m *countingBlocker, op string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for m.snapshot()[op] < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s called %d times in 10 s, want %d", op, m.snapshot()[op], n)
		}
		time.Sleep(time.Millisecond)
	}
}

// With WithIndexBlocks, a put of new keys after the first of its fields
// is one metadata call (PutNew) after its cells; a put of keys that have
// rows is refused by PutNew, deletes what it wrote, and goes by Prepare
// and Commit; Close releases the block left, and nothing leaks.
func TestIndexBlocks(t *testing.T) {
	ctx := context.Background()
	st, meta := blockEngine(t)
	c, err := tq.New(backends.Engine{Data: unstaged{st}, Meta: meta}, tq.WithIndexBlocks())
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	put := func(from int) {
		t.Helper()
		if err := putRows(ctx, c, from, n); err != nil {
			t.Fatal(err)
		}
	}
	put(0)
	if got := meta.snapshot(); got["Prepare"] != 1 || got["Commit"] != 1 || got["PutNew"] != 0 {
		t.Fatalf("the first put: %v, want Prepare and Commit", got)
	}
	waitCalls(t, meta, "Block", 1)
	for i := 1; i <= 3; i++ {
		put(i * n)
	}
	got := meta.snapshot()
	if got["Prepare"] != 1 || got["Commit"] != 1 || got["PutNew"] != 3 {
		t.Fatalf("three puts of new keys with a block: %v, want 3 PutNew and no other Prepare or Commit", got)
	}
	rows, err := c.List(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if want := keysN("k", 4*n); !slices.Equal(rows.Keys(), want) {
		t.Fatalf("List: %v, want %v (this client's put order)", rows.Keys(), want)
	}
	cells := st.Len()
	if cells != 2*4*n {
		t.Fatalf("%d cells stored, want %d", cells, 2*4*n)
	}

	// Keys that have rows: PutNew refuses, the put goes by Prepare.
	waitCalls(t, meta, "Block", 2)
	if err := c.BatchPut(ctx, "p", keysN("k", n), blockBatch(100, n), nil); err != nil {
		t.Fatal(err)
	}
	got = meta.snapshot()
	if got["PutNew"] != 4 || got["Prepare"] != 2 || got["Commit"] != 2 {
		t.Fatalf("a put of keys with rows: %v, want one PutNew refused, then Prepare and Commit", got)
	}
	b, err := c.BatchGet(ctx, "p", keysN("k", n), "x")
	if err != nil {
		t.Fatal(err)
	}
	want := blockBatch(100, n)["x"]
	for i := range n {
		if !reflect.DeepEqual(b["x"].Row(i), want.Row(i)) {
			t.Fatalf("row %d after the update: x = %v, want %v", i, b["x"].Row(i), want.Row(i))
		}
	}
	if st.Len() != cells {
		t.Fatalf("%d cells stored after the update, want %d: the refused put's cells or the replaced ones left", st.Len(), cells)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if meta.snapshot()["ReleaseBlock"] == 0 {
		t.Fatal("Close released no block")
	}
	// Nothing is left to reclaim, and the partition holds no block.
	c2 := newClient(t, unstaged{st}, meta)
	rep, err := c2.Reclaim(ctx, "p", 0)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Deleted != 0 || st.Len() != cells {
		t.Fatalf("Reclaim after Close: %+v, %d cells; want nothing to delete", rep, st.Len())
	}
}

// A PutNew whose outcome is unknown keeps its cells, and its indexes are
// never used again; Close releases the block naming them, so that when
// it had not applied, Reclaim finds its cells and deletes them, and when
// it had, its rows stay whole.
func TestIndexBlocksOutcomeUnknown(t *testing.T) {
	for _, applied := range []bool{false, true} {
		t.Run(fmt.Sprint("applied=", applied), func(t *testing.T) {
			ctx := context.Background()
			st, meta := blockEngine(t)
			c, err := tq.New(backends.Engine{Data: unstaged{st}, Meta: meta}, tq.WithIndexBlocks(), tq.WithRetry(tq.NoRetry))
			if err != nil {
				t.Fatal(err)
			}
			const n = 2
			put := func(from int) error {
				return putRows(ctx, c, from, n)
			}
			if err := put(0); err != nil {
				t.Fatal(err)
			}
			waitCalls(t, meta, "Block", 1)
			meta.mu.Lock()
			meta.lose, meta.applied = true, applied
			meta.mu.Unlock()
			if err := put(n); !errors.Is(err, tq.ErrOutcomeUnknown) {
				t.Fatalf("a put whose PutNew was lost: %v, want ErrOutcomeUnknown", err)
			}
			if st.Len() != 2*2*n {
				t.Fatalf("%d cells after the lost PutNew, want %d: its cells must stay", st.Len(), 2*2*n)
			}
			if err := put(2 * n); err != nil {
				t.Fatal(err)
			}
			rows, err := c.List(ctx, "p")
			if err != nil {
				t.Fatal(err)
			}
			var lost []uint64
			for _, r := range rows.Rows {
				if r.Key == "k2" || r.Key == "k3" {
					lost = append(lost, r.Index)
				}
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			c2 := newClient(t, unstaged{st}, meta)
			rep, err := c2.Reclaim(ctx, "p", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			rows, err = c2.List(ctx, "p")
			if err != nil {
				t.Fatal(err)
			}
			if applied {
				if len(rows.Rows) != 3*n || rep.Deleted != 0 || st.Len() != 2*3*n {
					t.Fatalf("applied: %d rows, %+v reclaimed, %d cells; want %d rows whole, nothing reclaimed", len(rows.Rows), rep, st.Len(), 3*n)
				}
				return
			}
			if len(lost) != 0 || len(rows.Rows) != 2*n || rep.Deleted != 2*n || st.Len() != 2*2*n {
				t.Fatalf("not applied: rows %v (lost at %v), %+v reclaimed, %d cells; want %d rows, its %d cells reclaimed", rows.Keys(), lost, rep, st.Len(), 2*n, 2*n)
			}
		})
	}
}

// A client holds blocks for a bounded number of sets of fields: putting
// to many partitions, it releases the blocks of the set it used least
// recently, and at Close the rest; no block is left in any partition.
func TestIndexBlocksManySets(t *testing.T) {
	ctx := context.Background()
	st, meta := blockEngine(t)
	c, err := tq.New(backends.Engine{Data: unstaged{st}, Meta: meta}, tq.WithIndexBlocks())
	if err != nil {
		t.Fatal(err)
	}
	const parts = 20
	for i := range parts {
		p := fmt.Sprint("p", i)
		if err := c.BatchPut(ctx, p, keysN("k", 2), blockBatch(0, 2), nil); err != nil {
			t.Fatal(err)
		}
		waitCalls(t, meta, "Block", i+1)
	}
	if got := meta.snapshot()["ReleaseBlock"]; got < parts-16 {
		t.Fatalf("%d releases with blocks for %d partitions, want at least %d (16 sets held)", got, parts, parts-16)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if got := meta.snapshot()["ReleaseBlock"]; got != parts {
		t.Fatalf("%d releases after Close, want one per partition (%d)", got, parts)
	}
	for i := range parts {
		// Garbage with no age aborts every live block: none is left.
		refs, err := meta.Garbage(ctx, fmt.Sprint("p", i), 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(refs) != 0 {
			t.Fatalf("partition p%d: %d cells of a block left live", i, len(refs))
		}
	}
}

// Puts of new keys back to back go by blocks after the first, whether
// or not the next block has come when the current one runs out: a put
// waits for the block on its way rather than take indexes above it.
func TestIndexBlocksBackToBack(t *testing.T) {
	ctx := context.Background()
	c, _, meta := blockClient(t)
	const n, puts = 3, 60
	for i := range puts {
		if err := c.BatchPut(ctx, "p", keysN("k", (i+1)*n)[i*n:], blockBatch(i*n, n), nil); err != nil {
			t.Fatal(err)
		}
	}
	got := meta.snapshot()
	if got["Prepare"] != 1 || got["Commit"] != 1 || got["PutNew"] != puts-1 {
		t.Fatalf("%d puts back to back: %v, want the first by Prepare and Commit, every other by PutNew", puts, got)
	}
	rows, err := c.List(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if want := keysN("k", puts*n); !slices.Equal(rows.Keys(), want) {
		t.Fatalf("List: %v, want put order", rows.Keys())
	}
}

// A set of fields whose PutNew was refused (a key had a row) stays off
// blocks for a minute, doubling at each refusal; once a PutNew of it
// applies, its next refusal starts again from a minute.
func TestRefusedSetBackoffResets(t *testing.T) {
	ctx := context.Background()
	c, _, meta := blockClient(t)
	const n = 2
	fields := []string{"v", "x"} // blockBatch's
	put := func(from int) {
		t.Helper()
		if err := putRows(ctx, c, from, n); err != nil {
			t.Fatal(err)
		}
	}
	refuse := func() {
		t.Helper()
		before := meta.snapshot()["PutNew"]
		put(0) // keys with rows: a PutNew refused, then Prepare and Commit
		if meta.snapshot()["PutNew"] != before+1 {
			t.Fatalf("a put of keys with rows made no PutNew: %v", meta.snapshot())
		}
	}
	put(0)
	waitCalls(t, meta, "Block", 1)
	refuse()
	if got := tq.SetBackoff(c, "p", fields); got != time.Minute {
		t.Fatalf("backoff after a refusal: %v, want 1m", got)
	}
	tq.EndSetBackoffs(c)
	refuse()
	if got := tq.SetBackoff(c, "p", fields); got != 2*time.Minute {
		t.Fatalf("backoff after a second refusal: %v, want 2m", got)
	}
	tq.EndSetBackoffs(c)
	before := meta.snapshot()["PutNew"]
	put(100) // new keys: a fresh block, a PutNew that applies
	if meta.snapshot()["PutNew"] != before+1 {
		t.Fatalf("a put of new keys once the backoff ended: %v, want a PutNew", meta.snapshot())
	}
	if got := tq.SetBackoff(c, "p", fields); got != 0 {
		t.Fatalf("backoff after a PutNew applied: %v, want none", got)
	}
	refuse()
	if got := tq.SetBackoff(c, "p", fields); got != time.Minute {
		t.Fatalf("backoff after a refusal following an applied PutNew: %v, want 1m", got)
	}
}
