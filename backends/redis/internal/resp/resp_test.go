package resp_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/redis/internal/resp"
	"github.com/tqgo/tqgo/internal/redisserver"
	"github.com/tqgo/tqgo/internal/redistest"
)

// newPool returns a pool of size on srv's server, with go-redis options
// from url, closed when t ends, and a go-redis client on the same server.
func newPool(t *testing.T, url string, size int, hooks ...goredis.Hook) (*resp.Pool, *goredis.Client) {
	t.Helper()
	opt, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	opt.ContextTimeoutEnabled = true
	c := goredis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	p, err := resp.NewPool(resp.Config{Options: c.Options(), Size: size, Hooks: hooks})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p, c
}

func TestParse(t *testing.T) {
	srv := redistest.Start(t)
	p, c := newPool(t, srv.URL(), 2)
	ctx := t.Context()
	if err := c.MSet(ctx, "exact", "hello world", "short", "abc", "int", "7").Err(); err != nil {
		t.Fatal(err)
	}
	c.LPush(ctx, "list", "x")
	err := p.Do(ctx, nil, func(conn *resp.Conn) error {
		req := conn.Request().Cmd("MGET", "exact", "short", "missing")
		req = req.Cmd("GET", "list") // WRONGTYPE
		req = req.Cmd("INCR", "int").Cmd("LRANGE", "list", "0", "-1").Cmd("PING")
		if err := conn.Send(req); err != nil {
			return err
		}
		if n, err := conn.Header('*'); err != nil || n != 3 {
			t.Fatalf("MGET header %d, %v", n, err)
		}
		head, body := make([]byte, 5), make([]byte, 6)
		found, other, err := conn.BulkInto(head, body)
		if err != nil || !found || other != nil || string(head)+string(body) != "hello world" {
			t.Fatalf("exact: %v %q %v %q%q", found, other, err, head, body)
		}
		found, other, err = conn.BulkInto(head, body)
		if err != nil || !found || string(other) != "abc" {
			t.Fatalf("other length: %v %q %v", found, other, err)
		}
		found, other, err = conn.BulkInto(head, body)
		if err != nil || found || other != nil {
			t.Fatalf("missing: %v %q %v", found, other, err)
		}
		_, err = conn.Value()
		var se resp.ServerError
		if !errors.As(err, &se) || string(se[:9]) != "WRONGTYPE" {
			t.Fatalf("GET of a list: %v", err)
		}
		var ge goredis.Error
		if !errors.As(err, &ge) {
			t.Fatalf("a server error is not a goredis.Error: %T", err)
		}
		if v, err := conn.Value(); err != nil || v != int64(8) {
			t.Fatalf("INCR: %v %v", v, err)
		}
		if v, err := conn.Value(); err != nil || len(v.([]any)) != 1 || v.([]any)[0] != "x" {
			t.Fatalf("LRANGE: %v %v", v, err)
		}
		if l, err := conn.Line(); err != nil || string(l) != "+PONG" {
			t.Fatalf("PING: %q %v", l, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A header of the wrong kind is ErrCorrupt.
	err = p.Do(ctx, nil, func(conn *resp.Conn) error {
		if err := conn.Send(conn.Request().Cmd("PING")); err != nil {
			return err
		}
		_, err := conn.Header('*')
		return err
	})
	if !errors.Is(err, resp.ErrCorrupt) {
		t.Fatalf("PING read as an array: %v, want ErrCorrupt", err)
	}
}

// TestExecValue: Value reads an EXEC reply with a command that failed
// at EXEC as a ServerError element.
func TestExecValue(t *testing.T) {
	srv := redistest.Start(t)
	p, c := newPool(t, srv.URL(), 1)
	ctx := t.Context()
	c.LPush(ctx, "list", "x")
	var reply any
	err := p.Do(ctx, nil, func(conn *resp.Conn) error {
		req := conn.Request().Cmd("MULTI").Cmd("SET", "a", "1").Cmd("INCR", "list").Cmd("GET", "a").Cmd("EXEC")
		if err := conn.Send(req); err != nil {
			return err
		}
		for range 4 { // +OK, +QUEUED x 3
			if _, err := conn.Line(); err != nil {
				return err
			}
		}
		var err error
		reply, err = conn.Value()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	replies, _ := reply.([]any)
	if len(replies) != 3 || replies[0] != "OK" || replies[2] != "1" {
		t.Fatalf("replies %v", reply)
	}
	if se, ok := replies[1].(resp.ServerError); !ok || string(se[:9]) != "WRONGTYPE" {
		t.Fatalf("INCR of a list at EXEC: %#v, want a WRONGTYPE element", replies[1])
	}
}

func TestPoolSize(t *testing.T) {
	srv := redistest.Start(t)
	const size = 3
	p, c := newPool(t, srv.URL(), size)
	ctx := t.Context()
	var inUse, most atomic.Int32
	var wg sync.WaitGroup
	for range 12 {
		wg.Go(func() {
			for range 5 {
				err := p.Do(ctx, nil, func(conn *resp.Conn) error {
					n := inUse.Add(1)
					defer inUse.Add(-1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					if err := conn.Send(conn.Request().Cmd("PING")); err != nil {
						return err
					}
					time.Sleep(time.Millisecond)
					_, err := conn.Line()
					return err
				})
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if m := most.Load(); m > size || m < 2 {
		t.Errorf("%d calls held connections at once, want 2..%d", m, size)
	}
	if open, _ := p.Stats(); open > size {
		t.Errorf("%d connections open, want at most %d", open, size)
	}
	// The server counts them too: the pool's plus the go-redis client's one.
	clients, err := c.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n := countLines(clients); n > size+1 {
		t.Errorf("server has %d clients, want at most %d", n, size+1)
	}
	// A call waiting for a connection gives up with its ctx.
	hold := make(chan struct{})
	var held sync.WaitGroup
	for range size {
		held.Add(1)
		go p.Do(ctx, nil, func(*resp.Conn) error { held.Done(); <-hold; return nil })
	}
	held.Wait()
	wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	err = p.Do(wctx, nil, func(*resp.Conn) error { return nil })
	cancel()
	close(hold)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Do on a full pool: %v, want DeadlineExceeded", err)
	}
}

func countLines(s string) int {
	n := 0
	for _, r := range s {
		if r == '\n' {
			n++
		}
	}
	return n
}

// TestIdleRetry: a request that fails on an idle connection the server
// closed runs once more on a new one; a failure after a reply byte, or on
// a fresh connection, does not.
func TestIdleRetry(t *testing.T) {
	srv := redistest.Start(t)
	p, c := newPool(t, srv.URL(), 1)
	ctx := t.Context()
	ping := func(conn *resp.Conn) error {
		if err := conn.Send(conn.Request().Cmd("PING")); err != nil {
			return err
		}
		_, err := conn.Line()
		return err
	}
	if err := p.Do(ctx, nil, ping); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	runs := 0
	err := p.Do(ctx, nil, func(conn *resp.Conn) error { runs++; return ping(conn) })
	if err != nil || runs != 2 {
		t.Fatalf("PING on a killed idle connection: %v after %d runs, want nil after 2", err, runs)
	}
	// A network error on a fresh connection is returned.
	p.DropIdle()
	runs = 0
	err = p.Do(ctx, nil, func(conn *resp.Conn) error { runs++; return &net.OpError{Op: "read", Err: errors.New("boom")} })
	if err == nil || runs != 1 {
		t.Fatalf("failure on a fresh connection: %v after %d runs, want it after 1", err, runs)
	}
}

func TestDeadlines(t *testing.T) {
	srv := redistest.Start(t)
	p, _ := newPool(t, srv.URL(), 1)
	block := func(conn *resp.Conn) error {
		if err := conn.Send(conn.Request().Cmd("BLPOP", "nothing", "0")); err != nil {
			return err
		}
		_, err := conn.Line()
		return err
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	err := p.Do(ctx, nil, block)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("BLPOP past ctx's deadline: %v, want a timeout", err)
	}
	ctx, cancel = context.WithCancel(t.Context())
	time.AfterFunc(30*time.Millisecond, cancel)
	start := time.Now()
	err = p.Do(ctx, nil, block)
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("BLPOP with ctx cancelled: %v after %v", err, time.Since(start))
	}
	if open, _ := p.Stats(); open != 0 {
		t.Errorf("%d connections open after interrupted calls, want 0", open)
	}
	p.Close()
	if err := p.Do(t.Context(), nil, block); !errors.Is(err, backends.ErrClosed) {
		t.Errorf("Do after Close: %v, want ErrClosed", err)
	}
}

func TestAuthSelect(t *testing.T) {
	srv := redistest.Start(t, redisserver.Options{Password: "sekret"})
	p, c := newPool(t, "redis://:sekret@"+srv.Addr()+"/3", 1)
	ctx := t.Context()
	if err := c.Set(ctx, "k", "db3", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var got any
	err := p.Do(ctx, nil, func(conn *resp.Conn) error {
		if err := conn.Send(conn.Request().Cmd("GET", "k")); err != nil {
			return err
		}
		var err error
		got, err = conn.Value()
		return err
	})
	if err != nil || got != "db3" {
		t.Fatalf("GET k in db 3: %v %v", got, err)
	}
	bad, _ := newPool(t, "redis://:wrong@"+srv.Addr(), 1)
	err = bad.Do(ctx, nil, func(*resp.Conn) error { return nil })
	var se resp.ServerError
	if !errors.As(err, &se) {
		t.Fatalf("wrong password: %v, want a server error", err)
	}
}

// countHook counts dials, commands and pipelines, and the commands' names.
type countHook struct {
	mu                  sync.Mutex
	dials, procs, pipes int
	names               []string
	lastErr             error
}

func (h *countHook) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		h.mu.Lock()
		h.dials++
		h.mu.Unlock()
		return next(ctx, network, addr)
	}
}

func (h *countHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		h.mu.Lock()
		h.procs++
		h.names = append(h.names, cmd.Name())
		h.lastErr = cmd.Err()
		h.mu.Unlock()
		return err
	}
}

func (h *countHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		err := next(ctx, cmds)
		h.mu.Lock()
		h.pipes++
		for _, c := range cmds {
			h.names = append(h.names, c.Name())
		}
		h.mu.Unlock()
		return err
	}
}

func TestHooks(t *testing.T) {
	srv := redistest.Start(t)
	h := &countHook{}
	p, _ := newPool(t, srv.URL(), 1, h)
	ctx := t.Context()
	one := func() []goredis.Cmder { return []goredis.Cmder{goredis.NewCmd(ctx, "GET", "k")} }
	two := func() []goredis.Cmder {
		return []goredis.Cmder{goredis.NewCmd(ctx, "GET", "k"), goredis.NewCmd(ctx, "GET", "j")}
	}
	if err := p.Do(ctx, one, func(*resp.Conn) error { return nil }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if err := p.Do(ctx, two, func(*resp.Conn) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Do: %v, want boom", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.dials != 1 || h.procs != 1 || h.pipes != 1 || len(h.names) != 3 {
		t.Errorf("hook saw %d dials, %d commands, %d pipelines (%v); want 1, 1, 1", h.dials, h.procs, h.pipes, h.names)
	}
}
