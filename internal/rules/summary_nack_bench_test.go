package rules

import (
	"fmt"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
)

// A status polled while a consumer claims, nacks (a failing row) and
// claims again: each Summary after a nack of a row below the look's
// resume point walks the acked rows from the first.
func BenchmarkSummaryAfterNack(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			p := heldRows(b, n)
			req := metadata.SummaryRequest{Counts: true, Tasks: []string{"reward"}}
			now := p.Now()
			seq := uint64(1 << 40)
			apply := func(data []byte) Result {
				seq++
				now++
				r := p.Apply(&backends.Entry{N: seq, ID: seq, Time: now, Data: data})
				if r.Err != nil {
					b.Fatal(r.Err)
				}
				return r
			}
			p.Summary(now, req)
			k := 0
			for b.Loop() {
				k++
				tok := fmt.Sprintf("x-%d", k)
				c := apply(ClaimRecord(&ClaimArgs{Task: "reward", Token: tok, Lease: time.Hour, Rows: 8, Min: 1, Select: Select{Fields: []string{"rewards"}}})).Claimed
				p.Summary(now, req)
				idx := make([]uint64, len(c.Rows))
				for i, r := range c.Rows {
					idx[i] = r.Index
				}
				apply(SettleRecord(&SettleArgs{Task: "reward", Op: metadata.Nack, Lease: tok, Indexes: idx}))
				p.Summary(now, req)
			}
		})
	}
}

// BenchmarkApplyClaimAckStatus: BenchmarkApplyClaimAck with the counts a
// Status reads kept (one asked before the timing).
func BenchmarkApplyClaimAckStatus(b *testing.B) { benchApplyClaimSettle(b, true) }
