package redis_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/internal/redistest"
)

// TestPutMarkerExpiresWhenAppendFails: the append of a one-request put
// fails inside the transaction before it deletes the marker (here the ACL
// takes DEL away, so the script's first call errs), after the MSET set
// the cells and the marker. The put fails, and the marker, which only the
// append deletes, expires instead of staying forever.
func TestPutMarkerExpiresWhenAppendFails(t *testing.T) {
	srv := redistest.Start(t)
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer admin.Close()
	ctx := t.Context()
	c := commitTQ(t, srv.URL()+"?prefix=mk", func(script int) {
		if script == 1 {
			if err := admin.Do(ctx, "ACL", "SETUSER", "default", "-del").Err(); err != nil {
				t.Error(err)
			}
		}
	})
	defer admin.Do(context.WithoutCancel(ctx), "ACL", "SETUSER", "default", "+del")
	keys := keyRange("k", 10)
	_, batch := smallBatch(len(keys), 3)
	if err := c.BatchPut(ctx, "p", keys, batch, nil); err == nil {
		t.Fatal("put with a corrupt log succeeded")
	}
	markers, err := admin.Keys(ctx, "mk*!put:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(markers) != 1 {
		t.Fatalf("markers after the failed append: %q, want the put's one", markers)
	}
	ttl, err := admin.PTTL(ctx, markers[0]).Result()
	if err != nil || ttl <= 0 || ttl > 10*time.Minute {
		t.Fatalf("marker %s has TTL %v (%v), want one of at most 10 minutes", markers[0], ttl, err)
	}
}
