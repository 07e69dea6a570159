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

func BenchmarkApplyClaimAckStatus(b *testing.B) {
	for _, n := range []int{8, 512} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			p := New()
			keys := make([]string, 100_000)
			for i := range keys {
				keys[i] = fmt.Sprintf("k%07d", i)
			}
			res, err := p.Prepare(1, keys, []string{"f"}, nil, 0, len(keys))
			if err != nil {
				b.Fatal(err)
			}
			ups := make([]metadata.RowUpdate, len(keys))
			fields := map[string]metadata.FieldInfo{"f": {}}
			for i := range ups {
				ups[i] = metadata.RowUpdate{Key: keys[i], Index: res[i].Index, Fields: fields}
			}
			if _, err := p.Commit(2, ups); err != nil {
				b.Fatal(err)
			}
			a := &ClaimArgs{Task: "t", Lease: time.Minute, Rows: n, Min: 1, Select: Select{Fields: []string{"f"}}}
			idx := make([]uint64, n)
			now := int64(3)
			var seq uint64
			step := func() {
				now++
				seq++
				a.Token = fmt.Sprint(seq)
				e := backends.Entry{N: seq, ID: seq, Time: now, Data: ClaimRecord(a)}
				r := p.Apply(&e)
				for i, row := range r.Claimed.Rows {
					idx[i] = row.Index
				}
				e = backends.Entry{N: seq, ID: seq<<1 | 1, Time: now, Data: SettleRecord(&SettleArgs{Task: "t", Op: metadata.Nack, Lease: a.Token, Indexes: idx[:len(r.Claimed.Rows)]})}
				if r := p.Apply(&e); r.Err != nil {
					b.Fatal(r.Err)
				}
			}
			step()
			p.Summary(now, metadata.SummaryRequest{Counts: true})
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				step()
			}
		})
	}
}
