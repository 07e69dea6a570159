package redistest

import (
	"context"

	goredis "github.com/redis/go-redis/v9"
)

// Persistent returns those of keys that have no expiry: what stays on the
// server for good. The engine's short-lived keys (a deleted partition's
// tombstone, kept a minute so that a resent delete knows it ran) are left
// out.
func Persistent(ctx context.Context, c goredis.Cmdable, keys []string) ([]string, error) {
	var out []string
	for _, k := range keys {
		ttl, err := c.PTTL(ctx, k).Result()
		if err != nil {
			return nil, err
		}
		if ttl == -1 {
			out = append(out, k)
		}
	}
	return out, nil
}
