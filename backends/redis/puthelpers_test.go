package redis_test

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends/redis"
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

// afterScripts is a go-redis hook that calls f with the count so far
// after each script (EVALSHA or EVAL) the client ran through go-redis.
type afterScripts struct {
	n atomic.Int64
	f func(n int)
}

func (h *afterScripts) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *afterScripts) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			h.f(int(h.n.Add(1)))
		}
		return err
	}
}

func (h *afterScripts) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if n := cmd.Name(); n == "evalsha" || n == "eval" {
				h.f(int(h.n.Add(1)))
			}
		}
		return err
	}
}

// commitTQ is a tq client on a Store of its own that calls f after each
// script it sends (redis.WithHooks: on its direct connections too, a
// transaction's script included), counting from 1. The server's script
// cache is filled first, so that a put's reservation is one script and its
// cells with their commit the next.
func commitTQ(t *testing.T, url string, f func(script int)) *tq.Client {
	t.Helper()
	s := open(t, url, redis.WithHooks(&afterScripts{f: f}))
	if err := redis.LoadScripts(t.Context(), s.Client()); err != nil {
		t.Fatal(err)
	}
	c, err := tq.New(engine(s), tq.WithRetry(tq.NoRetry))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
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
