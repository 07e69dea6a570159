package redis_test

import (
	"bytes"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

// smallBatch is n rows of a uint8 tensor of 512 bytes: one write round.
func smallBatch(n int, seed byte) ([]byte, tq.Batch) {
	data := make([]byte, n*512)
	for i := range data {
		data[i] = byte(i*13) + seed
	}
	return data, tq.Batch{"x": tq.Stacked(data, n, 512)}
}

// commitTQ is a tq client on a Store of its own whose hook runs f before
// the append of each metadata write (on its first attempt: the Prepare's,
// then the one sent with the cells), and that counts the scripts sent
// through go-redis.
func commitTQ(t *testing.T, url string, f func(write int)) (*tq.Client, *scriptCounter) {
	t.Helper()
	var writes atomic.Int64
	s := open(t, url, redis.WithRoundHook(func(op string) {
		if op == "meta" {
			f(int(writes.Add(1)))
		}
	}))
	h := &scriptCounter{}
	s.Client().AddHook(h)
	c, err := tq.New(engine(s))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, h
}

func wantStacked(t *testing.T, c *tq.Client, p string, keys []string, want []byte) {
	t.Helper()
	got, err := c.BatchGet(t.Context(), p, keys)
	if err != nil {
		t.Fatal(err)
	}
	if x, ok := got["x"].Tensor(); !ok || !bytes.Equal(x.Data, want) {
		t.Fatalf("read %d bytes back (stacked: %v), not what was put", len(x.Data), ok)
	}
}

// TestWriteCommit: a put of one write round sends its cells and its
// commit in one transaction on the engine's connection (go-redis sees only
// the Prepare's script); the rows read back.
func TestWriteCommit(t *testing.T) {
	srv := redistest.Start(t)
	c, h := commitTQ(t, srv.URL()+"?prefix=fused", func(int) {})
	keys := keyRange("k", 300)
	data, batch := smallBatch(len(keys), 1)
	if err := c.BatchPut(t.Context(), "p", keys, batch, nil); err != nil {
		t.Fatal(err)
	}
	if got := h.scripts.Load(); got != 1 {
		t.Errorf("a put ran %d scripts through go-redis, want 1 (the Prepare; the commit goes with the cells)", got)
	}
	wantStacked(t, c, "p", keys, data)
}

// TestWriteCommitStale: another writer appends to the partition between
// the Prepare and the transaction: the cells are written, the commit
// finds the log moved on, catches up and commits.
func TestWriteCommitStale(t *testing.T) {
	srv := redistest.Start(t)
	url := srv.URL() + "?prefix=fstale"
	other := openTQ(t, url)
	_, otherBatch := smallBatch(1, 9)
	var writes int
	c, _ := commitTQ(t, url, func(write int) {
		writes = write
		if write == 2 {
			if err := other.BatchPut(t.Context(), "p", []string{"other"}, otherBatch, nil); err != nil {
				t.Error(err)
			}
		}
	})
	keys := keyRange("k", 100)
	data, batch := smallBatch(len(keys), 2)
	if err := c.BatchPut(t.Context(), "p", keys, batch, nil); err != nil {
		t.Fatal(err)
	}
	if writes != 3 {
		t.Errorf("%d metadata writes, want 3: Prepare, the refused commit, the commit again", writes)
	}
	wantStacked(t, c, "p", keys, data)
	m, err := c.List(t.Context(), "p")
	if err != nil || len(m.Rows) != len(keys)+1 {
		t.Fatalf("List: %v rows, %v; want %d", m, err, len(keys)+1)
	}
}

// TestWriteCommitNoScript: the server lost its scripts (a restart,
// SCRIPT FLUSH) between the Prepare and the transaction: the cells are
// written and the commit is sent again as a script body.
func TestWriteCommitNoScript(t *testing.T) {
	srv := redistest.Start(t)
	url := srv.URL() + "?prefix=fnoscript"
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer admin.Close()
	c, _ := commitTQ(t, url, func(write int) {
		if write == 2 {
			if err := admin.ScriptFlush(t.Context()).Err(); err != nil {
				t.Error(err)
			}
		}
	})
	keys := keyRange("k", 100)
	data, batch := smallBatch(len(keys), 3)
	if err := c.BatchPut(t.Context(), "p", keys, batch, nil); err != nil {
		t.Fatal(err)
	}
	wantStacked(t, c, "p", keys, data)
}

// TestWriteCommitOutOfMemory: the server runs out of memory between the
// Prepare and the transaction: its MSET is refused, so neither the cells
// nor the commit apply, and the put fails with the server's error.
func TestWriteCommitOutOfMemory(t *testing.T) {
	srv := redistest.Start(t)
	url := srv.URL() + "?prefix=foom"
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer admin.Close()
	ctx := t.Context()
	c, _ := commitTQ(t, url, func(write int) {
		if write == 2 {
			// Whatever the server holds now is its limit.
			used, err := admin.Info(ctx, "memory").Result()
			if err == nil {
				err = admin.ConfigSet(ctx, "maxmemory", usedMemory(used)).Err()
			}
			if err != nil {
				t.Error(err)
			}
		}
	})
	keys := keyRange("k", 100)
	_, batch := smallBatch(len(keys), 4)
	err := c.BatchPut(ctx, "p", keys, batch, nil)
	if err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("put past maxmemory: %v, want the server's OOM error", err)
	}
	var re *redis.Error
	if !errors.As(err, &re) || re.Addr != srv.Addr() {
		t.Errorf("error %v does not name the server %s", err, srv.Addr())
	}
	if err := admin.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	data, err := admin.Keys(ctx, "foom:d:*").Result()
	if err != nil || len(data) != 0 {
		t.Fatalf("data keys after the failed put: %q, %v; want none", data, err)
	}
	m, err := c.List(ctx, "p")
	if err != nil || len(m.Rows) != 0 {
		t.Fatalf("List after the failed put: %v, %v; want no rows", m, err)
	}
	if _, err := c.BatchGet(ctx, "p", keys[:1]); !errors.Is(err, tq.ErrNotFound) {
		t.Fatalf("BatchGet after the failed put: %v, want ErrNotFound", err)
	}
}

// usedMemory is the used_memory value of an INFO memory reply.
func usedMemory(info string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			return v
		}
	}
	return "1"
}

var _ backends.Colocated = (*redis.Meta)(nil)
