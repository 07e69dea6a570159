package redis_test

import (
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/redis"
)

// BenchmarkClaimAck is one consumer's claim of 16 ready rows of a
// partition of 4096, and the ack of them: two round trips an op.
//
//	go test -run '^$' -bench ClaimAck ./backends/redis
func BenchmarkClaimAck(b *testing.B) {
	url, _ := benchServer(b)
	s := openBench(b, url+"?prefix=qbench")
	m := s.Meta()
	ctx := b.Context()
	const rows = 4096
	commitRows(b, m, "p", keysOf("r", rows)...)
	req := backends.ClaimRequest{Task: "t", Lease: time.Minute, Rows: 16, Min: 1}
	pick := firstN(16)
	b.ResetTimer()
	for b.Loop() {
		c, err := m.Claim(ctx, "p", req, pick)
		if err != nil {
			b.Fatal(err)
		}
		if len(c.Rows) == 0 {
			b.StopTimer()
			if err := m.Reset(ctx, "p", "t", nil); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			continue
		}
		if _, err := m.Settle(ctx, "p", backends.SettleRequest{Task: "t", Op: backends.Ack, Lease: c.Lease, Indexes: claimIdx(c)}); err != nil {
			b.Fatal(err)
		}
	}
}

// openBench opens a store on url for b, closed (both sides) when b ends.
func openBench(b *testing.B, url string) *redis.Store {
	b.Helper()
	s, err := redis.OpenURL(b.Context(), url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		s.Close()
		s.Meta().Close()
	})
	return s
}
