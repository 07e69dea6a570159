package redis_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

// TestPoolSizeBoundsAllConnections: under concurrent puts and reads
// through tq, the server never counts more of the engine's connections
// than the URL's pool_size, go-redis's and the engine's own together.
func TestPoolSizeBoundsAllConnections(t *testing.T) {
	srv := redistest.Start(t)
	const poolSize = 4
	s := open(t, srv.URL()+"?pool_size=4")
	if on, n := redis.DirectConnections(s); !on || n != poolSize/2 {
		t.Fatalf("direct connections %v, %d; want on, %d", on, n, poolSize/2)
	}
	c, err := tq.New(engine(s), tq.WithRetry(tq.NoRetry))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	watch := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), PoolSize: 1})
	t.Cleanup(func() { watch.Close() })
	ctx := t.Context()

	stop := make(chan struct{})
	most := make(chan int, 1)
	go func() {
		m := 0
		defer func() { most <- m }()
		for {
			list, err := watch.ClientList(ctx).Result()
			if err == nil {
				m = max(m, strings.Count(list, "\n")-1) // less the watcher's own
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			keys := keyRange("g"+string(rune('a'+g))+"-", 64)
			for i := range 5 {
				if err := c.BatchPut(ctx, "p", keys, rollout(keys, i), nil); err != nil {
					t.Error(err)
					return
				}
				if _, err := c.BatchGet(ctx, "p", keys); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	if m := <-most; m > poolSize || m < 1 {
		t.Errorf("server counted up to %d of the engine's connections, want 1..%d", m, poolSize)
	}
}

// TestDirectPoolSizeOption: direct_pool_size takes its share of
// pool_size, and one that leaves go-redis nothing is refused.
func TestDirectPoolSizeOption(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, srv.URL()+"?pool_size=6&direct_pool_size=1")
	if on, n := redis.DirectConnections(s); !on || n != 1 {
		t.Errorf("direct connections %v, %d; want on, 1", on, n)
	}
	if got := s.Client().(*goredis.Client).Options().PoolSize; got != 5 {
		t.Errorf("go-redis pool size %d, want 5", got)
	}
	if s, err := redis.OpenURL(t.Context(), srv.URL()+"?pool_size=2&direct_pool_size=2"); err == nil {
		s.Close()
		s.Log().Close()
		t.Error("direct_pool_size=pool_size accepted")
	}
	s1 := open(t, srv.URL()+"?pool_size=1")
	if on, _ := redis.DirectConnections(s1); on {
		t.Error("pool_size=1 left room for direct connections")
	}
}

// cmdHook counts the commands and dials it sees.
type cmdHook struct {
	mu    sync.Mutex // guards the fields below
	names map[string]int
	dials int
}

func (h *cmdHook) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		h.mu.Lock()
		h.dials++
		h.mu.Unlock()
		return next(ctx, network, addr)
	}
}

func (h *cmdHook) count(cmds ...goredis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range cmds {
		h.names[c.Name()]++
	}
}

func (h *cmdHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *cmdHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.count(cmds...)
		return next(ctx, cmds)
	}
}

// TestHooksSeeDirectConnections: hooks given with WithHooks see the traffic
// of the direct connections (tensor cells' MGET and MSET, a put's
// MULTI/EXEC with its EVALSHA) as well as go-redis's.
func TestHooksSeeDirectConnections(t *testing.T) {
	srv := redistest.Start(t)
	h := &cmdHook{names: map[string]int{}}
	s := open(t, srv.URL(), redis.WithHooks(h))
	if on, _ := redis.DirectConnections(s); !on {
		t.Fatal("no direct connections")
	}
	c, err := tq.New(engine(s), tq.WithRetry(tq.NoRetry))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := t.Context()
	keys := keyRange("h", 16)
	for i := range 2 {
		data, batch := smallBatch(len(keys), byte(i))
		if err := c.BatchPut(ctx, "p", keys, batch, nil); err != nil {
			t.Fatal(err)
		}
		wantStacked(t, c, "p", keys, data)
		wantStacked(t, c, "p", keys, data) // from the view: the log read rides with the MGET
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, name := range []string{"mget", "mset", "multi", "exec", "evalsha"} {
		if h.names[name] == 0 {
			t.Errorf("hooks saw no %s (saw %v)", name, h.names)
		}
	}
	if h.dials < 2 {
		t.Errorf("hooks saw %d dials, want go-redis's and the engine's own", h.dials)
	}
}
