package redis_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

// TestModelBlocks says puts go by blocks on Redis ("the Redis store
// stages nothing, so they do"), and WithIndexBlocks's doc that every
// engine of this module can: on a standalone Redis the metadata is
// Colocated, and a client puts by Prepare and WriteCommit whatever its
// options. The log of puts by a client with WithIndexBlocks holds no N
// or U record.
func TestReviewRedisBlocksUsed(t *testing.T) {
	if os.Getenv("TQ_REVIEW_KNOWN") == "" {
		t.Skip("a known doc and test mismatch, not fixed: TQ_REVIEW_KNOWN=1 runs it")
	}
	srv := redistest.Start(t)
	u := fmt.Sprintf("%s?prefix=rv", srv.URL())
	c := openTQ(t, u, tq.WithIndexBlocks())
	ctx := context.Background()
	for i := range 4 {
		keys := []string{fmt.Sprint("k", 2*i), fmt.Sprint("k", 2*i+1)}
		if err := c.BatchPut(ctx, "p", keys, tq.Batch{"x": tq.Stacked([]int64{1, 2}, 2, 1)}, nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	opt, err := goredis.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	r := goredis.NewClient(opt)
	defer r.Close()
	keys, _ := r.Keys(ctx, "*").Result()
	kinds := map[byte]int{}
	for _, k := range keys {
		if typ, _ := r.Type(ctx, k).Result(); typ == "stream" {
			msgs, _ := r.XRange(ctx, k, "-", "+").Result()
			for _, m := range msgs {
				for _, v := range m.Values {
					if s, ok := v.(string); ok && len(s) > 0 {
						kinds[s[0]]++
					}
				}
			}
		}
	}
	if kinds['N'] == 0 || kinds['U'] == 0 {
		t.Fatalf("record kinds in the log (first bytes of stream values, as numbers): %v; no N or U: no put went by a block", kinds)
	}
}
