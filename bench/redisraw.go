package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// mgetChunk is how many keys one MGET asks for: the team's machine notes measured
// a 1024-key MGET of 8 KiB values at 185 MB/s and 64-key chunks at
// 643 MB/s (the server faults pages in for one huge reply). For the same
// reason a pipeline carries about rawRoundBytes of values, and the next
// pipeline is sent when its replies are in.
const (
	mgetChunk     = 64
	rawRoundBytes = 1 << 20
)

// rawRedis is the limit under the Redis engine: go-redis on one connection
// with nothing of tq in the way, the same bytes written with pipelined SETs
// and read back with pipelined MGETs of mgetChunk keys, a pipeline per
// rawRoundBytes.
type rawRedis struct {
	c    *redis.Client
	keys []string
}

func newRawRedis(opts *redis.Options, n int) *rawRedis {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("tqgo-bench:raw:%d", i)
	}
	return &rawRedis{c: redis.NewClient(opts), keys: keys}
}

func (r *rawRedis) Close() error { return r.c.Close() }

// rounds cuts vals into spans of about rawRoundBytes, each at least one
// value.
func rounds(vals [][]byte) [][2]int {
	var out [][2]int
	lo, bytes := 0, 0
	for i, v := range vals {
		bytes += len(v)
		if bytes >= rawRoundBytes {
			out = append(out, [2]int{lo, i + 1})
			lo, bytes = i+1, 0
		}
	}
	if lo < len(vals) {
		out = append(out, [2]int{lo, len(vals)})
	}
	return out
}

// set writes vals under the raw keys with pipelined SETs.
func (r *rawRedis) set(ctx context.Context, vals [][]byte) error {
	for _, rd := range rounds(vals) {
		pipe := r.c.Pipeline()
		for i := rd[0]; i < rd[1]; i++ {
			pipe.Set(ctx, r.keys[i], vals[i], 0)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
	}
	return nil
}

// mget reads the raw keys of vals back with pipelined MGETs of at most
// mgetChunk keys (cut at round ends) and returns the replies, in key order.
func (r *rawRedis) mget(ctx context.Context, vals [][]byte) ([]*redis.SliceCmd, error) {
	cmds := make([]*redis.SliceCmd, 0, (len(vals)+mgetChunk-1)/mgetChunk)
	for _, rd := range rounds(vals) {
		pipe := r.c.Pipeline()
		for lo := rd[0]; lo < rd[1]; lo += mgetChunk {
			cmds = append(cmds, pipe.MGet(ctx, r.keys[lo:min(lo+mgetChunk, rd[1])]...))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, err
		}
	}
	return cmds, nil
}

// check compares what mget read with vals.
func (r *rawRedis) check(cmds []*redis.SliceCmd, vals [][]byte) error {
	i := 0
	for _, cmd := range cmds {
		for _, v := range cmd.Val() {
			s, ok := v.(string)
			if !ok || i >= len(vals) || s != string(vals[i]) {
				return fmt.Errorf("raw MGET: value %d differs from what was SET", i)
			}
			i++
		}
	}
	if i != len(vals) {
		return fmt.Errorf("raw MGET: read %d values, wrote %d", i, len(vals))
	}
	return nil
}

// del removes the first n raw keys.
func (r *rawRedis) del(ctx context.Context, n int) error {
	pipe := r.c.Pipeline()
	for lo := 0; lo < n; lo += 1000 {
		pipe.Del(ctx, r.keys[lo:min(lo+1000, n)]...)
	}
	_, err := pipe.Exec(ctx)
	return err
}

// serverVersion asks the server for its redis_version.
func serverVersion(ctx context.Context, opts *redis.Options) string {
	c := redis.NewClient(opts)
	defer c.Close()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "unknown"
}
