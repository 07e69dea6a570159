package tq_test

import (
	"context"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/tq"
)

// failoverMeta is a metadata store that fails over, losing what its
// replica never had: until fail, calls go to primary, and the puts of
// rows (Prepare, Commit) to replica too, but not the blocks (Block,
// PutNew, ReleaseBlock): the replica never had them, as after an
// asynchronous replication that lagged. After fail, every call goes to
// the replica.
type failoverMeta struct {
	*memory.MetaStore // primary
	replica           *memory.MetaStore
	mu                sync.Mutex
	failed            bool
	blocks            int // Blocks granted
}

func (m *failoverMeta) cur() *memory.MetaStore {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failed {
		return m.replica
	}
	return m.MetaStore
}

func (m *failoverMeta) fail() { m.mu.Lock(); m.failed = true; m.mu.Unlock() }

func (m *failoverMeta) Prepare(ctx context.Context, partition string, keys, fields []string, sizes []int64) ([]metadata.Reservation, error) {
	cur := m.cur()
	res, err := cur.Prepare(ctx, partition, keys, fields, sizes)
	if err == nil && cur != m.replica {
		if _, err := m.replica.Prepare(ctx, partition, keys, fields, sizes); err != nil {
			panic(err)
		}
	}
	return res, err
}

func (m *failoverMeta) Commit(ctx context.Context, partition string, updates []metadata.RowUpdate) (metadata.CommitResult, error) {
	cur := m.cur()
	res, err := cur.Commit(ctx, partition, updates)
	if err == nil && cur != m.replica {
		if _, err := m.replica.Commit(ctx, partition, updates); err != nil {
			panic(err)
		}
	}
	return res, err
}

func (m *failoverMeta) Lookup(ctx context.Context, partition string, keys []string) ([]*metadata.Row, error) {
	return m.cur().Lookup(ctx, partition, keys)
}

func (m *failoverMeta) Block(ctx context.Context, partition string, fields []string, n int) (metadata.IndexBlock, error) {
	base, err := m.cur().Block(ctx, partition, fields, n)
	if err == nil {
		m.mu.Lock()
		m.blocks++
		m.mu.Unlock()
	}
	return base, err
}

// waitBlocks waits (bounded) until n Blocks were granted.
func (m *failoverMeta) waitBlocks(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m.mu.Lock()
		got := m.blocks
		m.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d blocks granted in 10 s, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func (m *failoverMeta) PutNew(ctx context.Context, partition string, token, base uint64, keys, fields []string, sizes []int64, updates []metadata.RowUpdate) (metadata.CommitResult, error) {
	return m.cur().PutNew(ctx, partition, token, base, keys, fields, sizes, updates)
}

func (m *failoverMeta) ReleaseBlock(ctx context.Context, partition string, b metadata.IndexBlock, written []uint64) error {
	return m.cur().ReleaseBlock(ctx, partition, b, written)
}

// A block lost in a failover: its writer's next PutNew must not take the
// indexes of another client's block that the new primary handed out over
// them (the block's token tells them apart); else the other client, its
// own PutNew of them refused, deletes the cells of the rows the first
// committed there (and overwrote them before that).
func TestReviewLostBlockHijacksAnothersBlock(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	meta := &failoverMeta{MetaStore: memory.NewMetaStore(), replica: memory.NewMetaStore()}
	t.Cleanup(func() { _ = meta.MetaStore.Close(); _ = meta.replica.Close(); _ = st.Close() })
	c1 := newClient(t, unstaged{st}, meta, tq.WithIndexBlocks(), tq.WithRetry(tq.NoRetry))
	const n = 2
	put := func(c *tq.Client, prefix string, from int) error {
		return c.BatchPut(ctx, "p", keysN(prefix, from+n)[from:], blockBatch(from, n), nil)
	}
	if err := put(c1, "k", 0); err != nil { // Prepare and Commit, on both
		t.Fatal(err)
	}
	meta.waitBlocks(t, 1)                   // a block of c1's, the primary's alone
	if err := put(c1, "k", n); err != nil { // by the block: lost with it
		t.Fatal(err)
	}
	meta.fail()
	c2 := newClient(t, unstaged{st}, meta, tq.WithIndexBlocks(), tq.WithRetry(tq.NoRetry))
	if err := put(c2, "j", 0); err != nil { // Prepare and Commit
		t.Fatal(err)
	}
	meta.waitBlocks(t, 2)     // c2's block, over c1's indexes
	err1 := put(c1, "k", 2*n) // c1's lost block
	if err := put(c2, "j", n); err != nil {
		t.Fatal(err)
	}
	if err1 != nil {
		t.Logf("c1's put by its lost block: %v (refused: fine)", err1)
		return
	}
	keys := keysN("k", 3*n)[2*n:]
	b, err := c1.BatchGet(ctx, "p", keys, "x")
	if err != nil {
		t.Fatalf("rows %v, put by c1 with success, read back: %v", keys, err)
	}
	want := blockBatch(2*n, n)["x"]
	for i := range n {
		if !reflect.DeepEqual(b["x"].Row(i), want.Row(i)) {
			t.Fatalf("row %q: x = %v, want %v", keys[i], b["x"].Row(i), want.Row(i))
		}
	}
}
