package redis_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/internal/redisserver"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

// bigBatch is n rows of one 1 MiB tensor each.
func bigBatch(n int) tq.Batch {
	data := make([]byte, n<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	return tq.Batch{"blob": tq.Stacked(data, n, 1<<20)}
}

// wantServerError checks that err is a *redis.Error naming addr and
// matching kind.
func wantServerError(t *testing.T, what string, err error, addr string, kind error) {
	t.Helper()
	var re *redis.Error
	switch {
	case err == nil:
		t.Fatalf("%s: no error, want one matching %v", what, kind)
	case !errors.As(err, &re):
		t.Fatalf("%s: error %v (%T) is not a *redis.Error", what, err, err)
	case re.Addr != addr || !strings.Contains(err.Error(), addr):
		t.Errorf("%s: error %q names address %q, want %q", what, err, re.Addr, addr)
	}
	if kind != nil && !errors.Is(err, kind) {
		t.Errorf("%s: error %q does not match %v", what, err, kind)
	}
}

// killHook kills the server once the first pipeline of SETs has been
// answered: the server dies in the middle of a multi-round Put.
type killHook struct {
	srv  *redisserver.Server
	once sync.Once
}

func (h *killHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *killHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return next
}
func (h *killHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		err := next(ctx, cmds)
		if len(cmds) > 0 && cmds[0].Name() == "set" {
			h.once.Do(func() { _ = h.srv.Kill() })
		}
		return err
	}
}

// TestKilledMidPut kills redis-server after the first round of a 64 MiB
// BatchPut: the call fails with an error naming the server, and after a
// restart no row of it is visible.
func TestKilledMidPut(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	kill := &killHook{srv: srv}
	// Puts of tensors go through Write's direct connections, which the
	// go-redis hook does not see; other values go through go-redis.
	s := open(t, srv.URL()+"?prefix=kill", redis.WithRoundHook(func(op string) {
		if op == "set" {
			kill.once.Do(func() { _ = srv.Kill() })
		}
	}))
	c, err := tq.New(engine(s), tq.WithRetry(tq.NoRetry))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	keys := keyRange("k", 64)
	s.Client().AddHook(kill)
	err = c.BatchPut(ctx, "p", keys, bigBatch(64), nil)
	wantServerError(t, "BatchPut with the server killed", err, srv.Addr(), redis.ErrUnavailable)

	_, err = c.BatchGet(ctx, "p", keys)
	wantServerError(t, "BatchGet with the server down", err, srv.Addr(), redis.ErrUnavailable)

	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if m, err := listAfterRestart(t, c, "p"); err != nil || len(m.Rows) != 0 {
		t.Fatalf("List after restart: %v, %v; want no rows", m, err)
	}
	if _, err := c.BatchGet(ctx, "p", keys[:1]); !errors.Is(err, tq.ErrNotFound) {
		t.Fatalf("BatchGet after restart: %v, want ErrNotFound", err)
	}
	// The same client works again.
	if err := c.BatchPut(ctx, "p", keys[:2], bigBatch(2), nil); err != nil {
		t.Fatalf("BatchPut after restart: %v", err)
	}
}

// TestOutOfMemoryMidPut has the server refuse writes part-way through a
// BatchPut (maxmemory): the call fails and rolls back, leaving no row and
// no data key, on a server that is still up and holds the rest.
func TestOutOfMemoryMidPut(t *testing.T) {
	srv := redistest.Start(t, redisserver.Options{Args: []string{"--maxmemory", "24mb", "--maxmemory-policy", "noeviction"}})
	ctx := t.Context()
	c := openTQ(t, srv.URL()+"?prefix=oom")
	keep := keyRange("keep", 2)
	if err := c.BatchPut(ctx, "p", keep, bigBatch(2), []tq.Tag{{"n": int64(1)}, {"n": int64(2)}}); err != nil {
		t.Fatal(err)
	}
	keys := keyRange("k", 64)
	err := c.BatchPut(ctx, "p", keys, bigBatch(64), nil)
	wantServerError(t, "BatchPut past maxmemory", err, srv.Addr(), nil)
	if !strings.Contains(err.Error(), "OOM") {
		t.Errorf("error %q does not say the server is out of memory", err)
	}
	m, err := c.List(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Rows) != 2 || m.Rows[0].Key != keep[0] || m.Rows[1].Key != keep[1] {
		t.Fatalf("List after the failed put: %d rows, want only %q", len(m.Rows), keep)
	}
	if _, err := c.BatchGet(ctx, "p", keys[:1]); !errors.Is(err, tq.ErrNotFound) {
		t.Fatalf("BatchGet of a key of the failed put: %v, want ErrNotFound", err)
	}
	if _, err := c.BatchGet(ctx, "p", keep); err != nil {
		t.Fatalf("BatchGet of the rows written before: %v", err)
	}
	cl := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer cl.Close()
	data, err := cl.Keys(ctx, "oom:d:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(data) != 2 {
		t.Errorf("%d data keys after the rollback, want the 2 of the kept rows: %q", len(data), data)
	}
}

// killAfterPut is a data store that kills a server once its Write has
// succeeded: the failure falls between the data write and the metadata
// commit.
type killAfterPut struct {
	backends.Store
	srv  *redisserver.Server
	once sync.Once
}

func (k *killAfterPut) Write(ctx context.Context, cells []backends.Cell) error {
	err := k.Store.Write(ctx, cells)
	if err == nil {
		k.once.Do(func() { _ = k.srv.Kill() })
	}
	return err
}

// TestKilledBeforeCommit keeps data and metadata on two servers and kills
// the metadata server after the data is written. The commit's request may
// have reached the server before it died (go-redis cannot tell), and it
// cannot be settled while the server is down: the put fails with
// ErrOutcomeUnknown, keeps its cells (nothing a row may reference is
// deleted), and once the server is back no row appears (it never ran).
func TestKilledBeforeCommit(t *testing.T) {
	dataSrv, metaSrv := redistest.Start(t), redistest.Start(t)
	ctx := t.Context()
	data := open(t, dataSrv.URL()+"?prefix=two")
	meta := open(t, metaSrv.URL()+"?prefix=two")
	// The metadata server stays down until the put returns: its settles
	// are refused however long they try, so they try briefly.
	killer := &killAfterPut{Store: data, srv: metaSrv}
	c, err := tq.New(settling(t, killer, logOnly{meta.Log()}, 250*time.Millisecond), tq.WithRetry(tq.NoRetry))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	keys := keyRange("k", 16)
	err = c.BatchPut(ctx, "p", keys, rollout(keys, 1), nil)
	wantServerError(t, "BatchPut with the metadata server killed before commit", err, metaSrv.Addr(), redis.ErrUnavailable)
	if !errors.Is(err, tq.ErrOutcomeUnknown) {
		t.Errorf("BatchPut with the metadata server down: %v, want ErrOutcomeUnknown", err)
	}

	cl := goredis.NewClient(&goredis.Options{Addr: dataSrv.Addr()})
	defer cl.Close()
	if n, err := cl.DBSize(ctx).Result(); err != nil || n != 48 {
		t.Errorf("data server holds %d keys (%v) after the unsettled put, want its 48 cells kept", n, err)
	}
	if err := metaSrv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if m, err := listAfterRestart(t, c, "p"); err != nil || len(m.Rows) != 0 {
		t.Fatalf("List after restart: %v, %v; want no rows", m, err)
	}
}

// freeAddr returns a loopback address nobody listens on.
func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestConnectionRefused(t *testing.T) {
	redistest.Available(t)
	addr := freeAddr(t)
	_, err := tq.Open(t.Context(), "redis://"+addr+"/0?dial_timeout=1s", tq.WithRetry(tq.NoRetry))
	wantServerError(t, "tq.Open of a closed port", err, addr, redis.ErrUnavailable)
	if errors.Is(err, redis.ErrAuth) || errors.Is(err, redis.ErrTimeout) {
		t.Errorf("connection refused also matches ErrAuth or ErrTimeout: %v", err)
	}
}

// TestWithAddr: a Store over the caller's own client names the address
// WithAddr gives (a proxy's or service's name, say), not the client's.
func TestWithAddr(t *testing.T) {
	redistest.Available(t)
	addr := freeAddr(t)
	client := goredis.NewClient(&goredis.Options{Addr: addr, DialTimeout: time.Second, MaxRetries: -1})
	defer client.Close()
	s, err := redis.New(client, redis.WithAddr("redis.job1.svc:6379"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = getVals(t.Context(), s, []string{"k"})
	wantServerError(t, "Get through a client of a closed port", err, "redis.job1.svc:6379", redis.ErrUnavailable)
}

func TestAuthFailure(t *testing.T) {
	srv := redistest.Start(t, redisserver.Options{Password: "s3cret"})
	ctx := t.Context()
	for _, url := range []string{
		"redis://" + srv.Addr() + "/0",
		"redis://:wrong@" + srv.Addr() + "/0",
		"redis://someone:s3cret@" + srv.Addr() + "/0",
	} {
		_, err := tq.Open(ctx, url, tq.WithRetry(tq.NoRetry))
		wantServerError(t, "tq.Open of "+url, err, srv.Addr(), redis.ErrAuth)
		if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "wrong") {
			t.Errorf("error %q shows a password", err)
		}
	}
	c := openTQ(t, srv.URL())
	keys := keyRange("k", 2)
	if err := c.BatchPut(ctx, "p", keys, rollout(keys, 1), nil); err != nil {
		t.Fatalf("BatchPut with the password: %v", err)
	}
}

// TestTimeout pauses the server longer than the client's read timeout.
func TestTimeout(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	c := openTQ(t, srv.URL()+"?read_timeout=200ms&write_timeout=200ms&max_retries=-1")
	keys := keyRange("k", 4)
	if err := c.BatchPut(ctx, "p", keys, rollout(keys, 1), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := redisserver.Do(ctx, srv.Addr(), []string{"CLIENT", "PAUSE", "3000", "ALL"}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := c.BatchGet(ctx, "p", keys)
	wantServerError(t, "BatchGet from a paused server", err, srv.Addr(), redis.ErrTimeout)
	if d := time.Since(start); d > 2500*time.Millisecond {
		t.Errorf("BatchGet took %v against a read timeout of 200ms", d)
	}
	if errors.Is(err, redis.ErrUnavailable) {
		t.Errorf("a timeout also matches ErrUnavailable: %v", err)
	}
	// A caller's deadline is the caller's error, not the client's timeout.
	dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = c.BatchGet(dctx, "p", keys)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("BatchGet past the caller's deadline: %v, want context.DeadlineExceeded", err)
	}
}

func TestBadURLs(t *testing.T) {
	ctx := t.Context()
	for _, url := range []string{
		"redis://127.0.0.1:1/0?prefix=a:b",
		"redis://127.0.0.1:1/0?io_depth=0",
		"redis://127.0.0.1:1/0?round_keys=x",
		"redis://127.0.0.1:1/0?no_such_option=1",
		"redis://127.0.0.1:1/notadb",
		"redis://h1:1,h2:2/0",
		"redis+cluster://h1:1,h2:2/3",
	} {
		_, err := tq.Open(ctx, url, tq.WithRetry(tq.NoRetry))
		if !errors.Is(err, backends.ErrInvalid) {
			t.Errorf("tq.Open(%q): %v, want ErrInvalid", url, err)
		}
	}
	if got := fmt.Sprint(backends.Schemes()); !strings.Contains(got, "redis+cluster") || !strings.Contains(got, "rediss") {
		t.Errorf("registered schemes %s", got)
	}
}

// listAfterRestart lists partition once the client reaches the restarted
// server. After many failed dials go-redis answers with the last dial error
// and redials in the background about once a second, so the first calls
// after a restart may still see "connection refused".
func listAfterRestart(t *testing.T, c *tq.Client, partition string) (*tq.BatchMeta, error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, err := c.List(t.Context(), partition)
		if !errors.Is(err, redis.ErrUnavailable) || time.Now().After(deadline) {
			return m, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
