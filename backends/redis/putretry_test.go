package redis_test

import (
	"bytes"
	"net"
	"sync/atomic"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

// dropProxy forwards TCP to a redis-server; once armed, it lets one request
// reach the server, lets the server run it, and then drops the connection
// without passing on a single byte of the reply.
type dropProxy struct {
	*tcpProxy
	// armed: the next client chunk containing trigger marks its
	// connection; once the server's reply on it contains done, hook runs
	// and the connection is dropped.
	armed   atomic.Bool
	trigger []byte
	done    []byte
	hook    func()
}

func startDropProxy(t *testing.T, target string) *dropProxy {
	t.Helper()
	p := &dropProxy{}
	p.tcpProxy = startTCPProxy(t, target, p.serve)
	return p
}

func (p *dropProxy) serve(client, server net.Conn) {
	var drop atomic.Bool
	var seen []byte
	go pump(client, server, func(chunk []byte) ([]byte, bool) {
		if !drop.Load() {
			return chunk, false
		}
		seen = append(seen, chunk...)
		if bytes.Contains(seen, p.done) {
			if p.hook != nil {
				p.hook()
			}
			return nil, true
		}
		return nil, false
	})
	pump(server, client, func(chunk []byte) ([]byte, bool) {
		if !drop.Load() && bytes.Contains(chunk, p.trigger) && p.armed.CompareAndSwap(true, false) {
			drop.Store(true) // before the server can reply
		}
		return chunk, false
	})
}

// TestPutRetriedAfterAppliedThenRefused: WriteCommit's transaction
// goes out on an idle connection, the server runs it (cells and commit
// applied) and the connection drops before any reply byte, so resp.Pool.Do
// sends it once more on a new connection. That second attempt is refused
// (here an ACL change; out of memory after the first attempt's cells is
// the natural case). The refusal says nothing of the first attempt: the
// outcome is unknown, and tq must not delete the cells of committed rows.
func TestPutRetriedAfterAppliedThenRefused(t *testing.T) {
	srv := redistest.Start(t)
	p := startDropProxy(t, srv.Addr())
	p.trigger = []byte("*1\r\n$5\r\nMULTI\r\n")
	p.done = []byte("+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*3\r\n") // EXEC ran
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer admin.Close()
	ctx := t.Context()
	p.hook = func() {
		if err := admin.Do(ctx, "ACL", "SETUSER", "default", "-mset").Err(); err != nil {
			t.Error(err)
		}
	}
	c := proxyTQ(t, p.url("r3retry"))
	// A first put leaves an idle engine connection, which the second put
	// reuses (the retry applies only to a reused connection).
	_, warm := smallBatch(2, 7)
	if err := c.BatchPut(ctx, "p", []string{"w0", "w1"}, warm, nil); err != nil {
		t.Fatal(err)
	}
	keys := keyRange("k", 20)
	data, batch := smallBatch(len(keys), 2)
	p.armed.Store(true)
	err := c.BatchPut(ctx, "p", keys, batch, nil)
	if p.armed.Load() {
		t.Fatal("the put sent no MULTI/EXEC")
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "default", "+mset").Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("BatchPut: %v", err)
	fresh := proxyTQ(t, srv.URL()+"?prefix=r3retry")
	m, lerr := fresh.Lookup(ctx, "p", keys)
	if lerr == nil {
		t.Logf("rows committed after the put: %d", len(m.Rows))
	}
	wantPutAtomic(t, srv.URL()+"?prefix=r3retry", "p", keys, data, err)
}

// TestPutNoScriptFallbackRetried: the server lost its scripts before the
// transaction, so the append goes again through go-redis (EVALSHA, then
// EVAL). The EVAL runs (commit applied) but its reply is lost, and
// go-redis retries it: the retry finds the log moved on by the first and
// catches up, and the put succeeds with its cells.
func TestPutNoScriptFallbackRetried(t *testing.T) {
	srv := redistest.Start(t)
	p := startDropProxy(t, srv.Addr())
	p.trigger = []byte("\r\n$4\r\neval\r\n")
	p.done = []byte("\r\n") // any reply: the EVAL ran
	url := p.url("r3noscript")
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer admin.Close()
	c := commitTQ(t, url, func(write int) {
		if write == 1 {
			if err := admin.ScriptFlush(t.Context()).Err(); err != nil {
				t.Error(err)
			}
			p.armed.Store(true)
		}
	})
	keys := keyRange("k", 20)
	data, batch := smallBatch(len(keys), 3)
	err := c.BatchPut(t.Context(), "p", keys, batch, nil)
	if p.armed.Load() {
		t.Fatal("no EVAL went out after the transaction's NOSCRIPT")
	}
	t.Logf("BatchPut: %v", err)
	wantPutAtomic(t, srv.URL()+"?prefix=r3noscript", "p", keys, data, err)
}

// TestPutNoMarkerLeft: puts through the one-request path (plain, one
// whose append finds the log moved on, one after SCRIPT FLUSH) leave no
// marker key behind, and the metadata's own writes (Prepare, Delete: the
// 9-argument append, ARGV[10] nil) work as before.
func TestPutNoMarkerLeft(t *testing.T) {
	srv := redistest.Start(t)
	url := srv.URL() + "?prefix=r3marker"
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer admin.Close()
	ctx := t.Context()
	other := openTQ(t, url)
	_, otherBatch := smallBatch(1, 9)
	var last, actAt, mode atomic.Int64
	c := commitTQ(t, url, func(write int) {
		last.Store(int64(write))
		if int64(write) != actAt.Load() {
			return
		}
		switch mode.Load() {
		case 1:
			if err := other.BatchPut(ctx, "p", []string{"other"}, otherBatch, nil); err != nil {
				t.Error(err)
			}
		case 2:
			if err := admin.ScriptFlush(ctx).Err(); err != nil {
				t.Error(err)
			}
		}
	})
	keys := keyRange("k", 50)
	for i := range 3 {
		data, batch := smallBatch(len(keys), byte(10+i))
		mode.Store(int64(i))
		actAt.Store(last.Load() + 1) // after the put's Prepare, before its transaction
		if err := c.BatchPut(ctx, "p", keys, batch, nil); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
		wantStacked(t, c, "p", keys, data)
	}
	leaked, err := admin.Keys(ctx, "r3marker:d:!put:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(leaked) != 0 {
		t.Errorf("marker keys left after normal puts: %q", leaked)
	}
	if err := c.Clear(ctx, "p", keys); err != nil {
		t.Fatal(err)
	}
	if _, err := c.BatchGet(ctx, "p", keys[:1]); err == nil {
		t.Error("a cleared row still reads")
	}
}

// TestConfirmedReadManyRounds: a confirmed read of many rounds, eight
// requested at a time, calls dst exactly once, with every round reading
// into its own part of what it returned (also under -race).
func TestConfirmedReadManyRounds(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	url := srv.URL() + "?prefix=r3rounds"
	s := open(t, url, redis.WithReadRoundBytes(4096), redis.WithIODepth(8))
	c, err := tq.New(engine(s), tq.WithRetry(tq.NoRetry))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	keys := keyRange("k", 200)
	data, batch := smallBatch(len(keys), 4)
	if err := c.BatchPut(ctx, "p", keys, batch, nil); err != nil {
		t.Fatal(err)
	}
	wantStacked(t, c, "p", keys, data) // loads readScript (a fresh server has none)
	m := metaOf(s)
	if _, err := m.Lookup(ctx, "p", keys); err != nil { // m's copy of p, current
		t.Fatal(err)
	}
	var calls atomic.Int32
	var dst []backends.ReadCell
	_, err = colo(m).ReadRows(ctx, "p", keys, func(rows []*metadata.Row) ([]backends.ReadCell, error) {
		calls.Add(1)
		dst = make([]backends.ReadCell, len(rows))
		for i, r := range rows {
			// A wrong guess of the prefix: values land in Value.
			dst[i] = backends.ReadCell{Key: backends.StorageKey(r.Index, "x", r.Fields["x"].Gen), Body: make([]byte, 512+64)}
		}
		return dst, nil
	})
	if err != nil {
		t.Fatalf("ReadRows: %v", err)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("plan called %d times, want 1 (the view's copy is current)", n)
	}
	for i, d := range dst {
		if !d.Found || len(d.Value) < 512 || !bytes.Equal(d.Value[len(d.Value)-512:], data[i*512:(i+1)*512]) {
			t.Fatalf("cell %d not read into its destination", i)
		}
	}
	// And through tq, which reads into the stacked column.
	wantStacked(t, c, "p", keys, data)
}
