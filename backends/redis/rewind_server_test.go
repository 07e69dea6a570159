package redis_test

import (
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/internal/redistest"
)

// dumpedKey is a key's DUMP and its time to live (0: none).
type dumpedKey struct {
	value string
	ttl   time.Duration
}

// dumpKeys returns every key under prefix, DUMPed.
func dumpKeys(t *testing.T, c *goredis.Client, prefix string) map[string]dumpedKey {
	t.Helper()
	ctx := t.Context()
	out := map[string]dumpedKey{}
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		v, err := c.Dump(ctx, k).Result()
		if errors.Is(err, goredis.Nil) {
			continue // expired meanwhile
		}
		must(t, "DUMP", err)
		ttl, err := c.PTTL(ctx, k).Result()
		must(t, "PTTL", err)
		out[k] = dumpedKey{value: v, ttl: max(ttl, 0)}
	}
	must(t, "SCAN", iter.Err())
	return out
}

// restoreKeys makes the keys under prefix what dumpKeys returned: the
// server's state for them goes back to that moment.
func restoreKeys(t *testing.T, c *goredis.Client, prefix string, dump map[string]dumpedKey) {
	t.Helper()
	ctx := t.Context()
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		if _, keep := dump[iter.Val()]; !keep {
			must(t, "DEL", c.Del(ctx, iter.Val()).Err())
		}
	}
	must(t, "SCAN", iter.Err())
	for k, d := range dump {
		must(t, "RESTORE", c.RestoreReplace(ctx, k, d.ttl, d.value).Err())
	}
}

// TestLogRewoundToEarlierState: on one server, every key of the prefix
// goes back to an earlier moment (DUMP then RESTORE: the state of a
// replica that missed the writes since), while clients have replayed
// past it (see testRewind).
func TestLogRewoundToEarlierState(t *testing.T) {
	srv := redistest.Start(t)
	raw := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { raw.Close() })
	var dump map[string]dumpedKey
	testRewind(t, rewind{
		url:    srv.URL() + "?prefix=" + rewindPrefix,
		mark:   func(t *testing.T) { dump = dumpKeys(t, raw, rewindPrefix+":") },
		back:   func(t *testing.T) { restoreKeys(t, raw, rewindPrefix+":", dump) },
		server: func(*testing.T) goredis.Cmdable { return raw },
	})
}
