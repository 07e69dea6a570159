package redis_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/backends/redis"
)

// BenchmarkClaimAck is one consumer's claim of 16 ready rows of a
// partition of 4096, and the ack of them: two round trips an op.
//
//	go test -run '^$' -bench ClaimAck ./backends/redis
func BenchmarkClaimAck(b *testing.B) {
	url, _ := benchServer(b)
	s := openBench(b, url+"?prefix=qbench")
	m := metaOf(s)
	ctx := b.Context()
	const rows = 4096
	commitRows(b, m, "p", keysOf("r", rows)...)
	req := metadata.ClaimRequest{Task: "t", Lease: time.Minute, Rows: 16, Min: 1}
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
		if _, err := m.Settle(ctx, "p", metadata.SettleRequest{Task: "t", Op: metadata.Ack, Lease: c.Lease, Indexes: claimIdx(c)}); err != nil {
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
		s.Log().Close()
	})
	return s
}

// BenchmarkWake is the time from a commit returning to a Wait blocked on
// the partition returning ("wake-ns", the median; below 0: the Wait
// returned first), beside LPUSH returning
// to a BLPOP blocked on the same server returning.
//
//	go test -run '^$' -bench Wake ./backends/redis
func BenchmarkWake(b *testing.B) {
	url, raw := benchServer(b)
	const gap = time.Millisecond
	b.Run("engine", func(b *testing.B) {
		m := metaOf(openBench(b, url+"?prefix=qwake"))
		ctx := b.Context()
		none := func([]*metadata.Row, []metadata.Delivery) (metadata.Picked, error) { return metadata.Picked{}, nil }
		var ds []time.Duration
		n := 0
		for b.Loop() {
			c, err := m.Claim(ctx, "p", metadata.ClaimRequest{Task: "t", Lease: time.Minute, Rows: 1, Min: 1}, none)
			if err != nil {
				b.Fatal(err)
			}
			woke := make(chan time.Time, 1)
			go func() {
				if err := m.Wait(ctx, "p", c.Mark); err != nil {
					b.Error(err)
				}
				woke <- time.Now()
			}()
			time.Sleep(gap)
			n++
			began := time.Now()
			commitRows(b, m, "p", fmt.Sprint("k", n))
			at := time.Now()
			w := <-woke
			if w.Before(began) {
				b.Fatalf("the wait returned %v before the commit began", began.Sub(w))
			}
			ds = append(ds, w.Sub(at))
		}
		b.ReportMetric(float64(median(ds).Nanoseconds()), "wake-ns")
	})
	for _, pre := range []bool{false, true} {
		b.Run(fmt.Sprint("blpop-pre", pre), func(b *testing.B) {
			ctx := b.Context()
			var ds []time.Duration
			for b.Loop() {
				woke := make(chan time.Time, 1)
				go func() {
					if err := raw.BLPop(ctx, time.Minute, "qwake:list").Err(); err != nil {
						b.Error(err)
					}
					woke <- time.Now()
				}()
				time.Sleep(gap)
				if pre {
					raw.Get(ctx, "zz")
				}
				if err := raw.LPush(ctx, "qwake:list", "1").Err(); err != nil {
					b.Fatal(err)
				}
				at := time.Now()
				ds = append(ds, (<-woke).Sub(at))
			}
			b.ReportMetric(float64(median(ds).Nanoseconds()), "wake-ns")
		})
	}
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
