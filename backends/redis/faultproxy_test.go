package redis_test

import (
	"bytes"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

// faultProxy forwards TCP between the Store and a redis-server and, once
// armed, interferes with one request of the direct connections.
type faultProxy struct {
	*tcpProxy
	mode atomic.Int32 // what to do to the next matching request
	hook func()       // modeHookBeforeExec: runs before EXEC is forwarded

}

const (
	modePass = iota
	// modeDropExecReply: after the server replied to a MULTI ... EXEC
	// (so EXEC ran), pass on the status lines and drop the connection
	// before the EXEC reply.
	modeDropExecReply
	// modeHugeBulk: reply to the next request carrying EVALSHA and MGET
	// (a confirmed read) with a bulk header of length MaxInt64.
	modeHugeBulk
	// modeHookBeforeExec: hold EXEC until MSET and EVALSHA are queued,
	// run hook, then send EXEC.
	modeHookBeforeExec
)

var execMarker = []byte("*1\r\n$4\r\nEXEC\r\n")

func startFaultProxy(t *testing.T, target string) *faultProxy {
	t.Helper()
	p := &faultProxy{}
	p.tcpProxy = startTCPProxy(t, target, p.serve)
	return p
}

func (p *faultProxy) serve(client, server net.Conn) {
	var act atomic.Int32
	queued := make(chan struct{})
	var queuedOnce sync.Once
	var seen []byte
	go pump(client, server, func(chunk []byte) ([]byte, bool) {
		switch act.Load() {
		case modeDropExecReply:
			seen = append(seen, chunk...)
			status := []byte("+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n")
			if i := bytes.Index(seen, status); i >= 0 && len(seen) > i+len(status) {
				return seen[:i+len(status)], true
			}
			return nil, false
		case modeHugeBulk:
			return []byte("$9223372036854775807\r\n"), true
		case modeHookBeforeExec:
			seen = append(seen, chunk...)
			if bytes.Contains(seen, []byte("+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n")) {
				queuedOnce.Do(func() { close(queued) })
			}
		}
		return chunk, false
	})
	pump(server, client, func(chunk []byte) ([]byte, bool) {
		if act.Load() != modePass {
			return chunk, false
		}
		switch m := p.mode.Load(); m {
		case modeDropExecReply:
			if bytes.Contains(chunk, execMarker) && p.mode.CompareAndSwap(m, modePass) {
				act.Store(m)
			}
		case modeHugeBulk:
			if bytes.Contains(chunk, []byte("EVALSHA")) && bytes.Contains(chunk, []byte("MGET")) && p.mode.CompareAndSwap(m, modePass) {
				act.Store(m)
			}
		case modeHookBeforeExec:
			if i := bytes.Index(chunk, execMarker); i >= 0 && p.mode.CompareAndSwap(m, modePass) {
				act.Store(m)
				if _, err := server.Write(chunk[:i]); err != nil {
					return nil, true
				}
				select {
				case <-queued:
				case <-time.After(5 * time.Second):
				}
				p.hook()
				return chunk[i:], false
			}
		}
		return chunk, false
	})
}

// proxyTQ is a tq client on a Store (and its own Meta) at url.
func proxyTQ(t *testing.T, url string) *tq.Client {
	t.Helper()
	s := open(t, url)
	c, err := tq.New(engine(s), tq.WithRetry(tq.NoRetry))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// settlingTQ is proxyTQ whose settles try for settle (replica.SettleFor).
func settlingTQ(t *testing.T, url string, settle time.Duration) *tq.Client {
	t.Helper()
	s := open(t, url)
	c, err := tq.New(settling(t, s, s.Log(), settle), tq.WithRetry(tq.NoRetry))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// wantPutAtomic checks the partition after a put that returned putErr: a
// put that failed must not be visible, and a visible row must read back.
func wantPutAtomic(t *testing.T, url, p string, keys []string, data []byte, putErr error) {
	t.Helper()
	ctx := t.Context()
	fresh := proxyTQ(t, url)
	m, err := fresh.List(ctx, p)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(m.Rows) == 0 {
		if putErr == nil {
			t.Fatalf("put succeeded but no rows are listed")
		}
		return // failed and not applied: fine
	}
	got, err := fresh.BatchGet(ctx, p, keys)
	if err != nil {
		t.Fatalf("put returned %v, yet %d rows are committed; reading them: %v (committed rows without their cells)", putErr, len(m.Rows), err)
	}
	if x, ok := got["x"].Tensor(); !ok || !bytes.Equal(x.Data, data) {
		t.Fatalf("put returned %v; the committed rows read back other data", putErr)
	}
	if putErr != nil {
		t.Errorf("put returned %v although its commit applied and its rows read back", putErr)
	}
}

// TestPutReplyLost: the connection drops after the server ran the
// MULTI/EXEC of WriteCommit but before its EXEC reply arrives. The
// commit applied, so the error must say the outcome is unknown (tq then
// looks the rows up rather than delete the cells of committed rows): the
// put succeeds or leaves nothing, and its rows read back.
func TestPutReplyLost(t *testing.T) {
	srv := redistest.Start(t)
	p := startFaultProxy(t, srv.Addr())
	url := p.url("lost")
	c := proxyTQ(t, url)
	keys := keyRange("k", 20)
	data, batch := smallBatch(len(keys), 1)
	p.mode.Store(modeDropExecReply)
	err := c.BatchPut(t.Context(), "p", keys, batch, nil)
	if p.mode.Load() != modePass {
		t.Fatal("the put sent no MULTI/EXEC")
	}
	t.Logf("BatchPut: %v", err)
	wantPutAtomic(t, srv.URL()+"?prefix=lost", "p", keys, data, err)
}

// TestPutMSETFailsAtExec: a transaction runs every queued command even
// when one fails at EXEC (here the MSET: ACL rules changed between
// queueing and EXEC, which Redis checks again per command). The append
// must not commit rows whose cells were not written: the put fails and
// leaves nothing.
func TestPutMSETFailsAtExec(t *testing.T) {
	srv := redistest.Start(t)
	p := startFaultProxy(t, srv.Addr())
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer admin.Close()
	ctx := t.Context()
	p.hook = func() {
		if err := admin.Do(ctx, "ACL", "SETUSER", "default", "-mset").Err(); err != nil {
			t.Error(err)
		}
	}
	c := proxyTQ(t, p.url("partial"))
	keys := keyRange("k", 20)
	data, batch := smallBatch(len(keys), 2)
	p.mode.Store(modeHookBeforeExec)
	err := c.BatchPut(ctx, "p", keys, batch, nil)
	if p.mode.Load() != modePass {
		t.Fatal("the put sent no MULTI/EXEC")
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "default", "+mset").Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("BatchPut: %v", err)
	wantPutAtomic(t, srv.URL()+"?prefix=partial", "p", keys, data, err)
}

// TestConfirmedReadHugeBulk: a malformed reply (a bulk length near
// MaxInt64) to the confirmed read's log script is an error, not a panic
// nor an allocation of that size.
func TestConfirmedReadHugeBulk(t *testing.T) {
	srv := redistest.Start(t)
	p := startFaultProxy(t, srv.Addr())
	c := proxyTQ(t, p.url("huge"))
	ctx := t.Context()
	keys := keyRange("k", 4)
	_, batch := smallBatch(len(keys), 3)
	if err := c.BatchPut(ctx, "p", keys, batch, nil); err != nil {
		t.Fatal(err)
	}
	p.mode.Store(modeHugeBulk)
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("BatchGet panicked on a malformed reply: %v", r)
			}
		}()
		_, err = c.BatchGet(ctx, "p", keys)
	}()
	if p.mode.Load() != modePass {
		t.Fatal("the read sent no confirmed read")
	}
	if !errors.Is(err, redis.ErrCorrupt) {
		t.Fatalf("BatchGet on a malformed reply: %v, want ErrCorrupt", err)
	}
}
