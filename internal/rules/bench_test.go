package rules

import (
	"fmt"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
)

// BenchmarkApplyClaimAck: what a process pays to apply another's claim of
// n rows and its ack (decoding included), the replay cost of consumers
// sharing a log.
func BenchmarkApplyClaimAck(b *testing.B) {
	for _, n := range []int{8, 512} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			p := New()
			keys := make([]string, 100_000)
			for i := range keys {
				keys[i] = fmt.Sprintf("k%07d", i)
			}
			res, err := p.Prepare(1, keys, []string{"f"}, 0, len(keys))
			if err != nil {
				b.Fatal(err)
			}
			ups := make([]backends.RowUpdate, len(keys))
			fields := map[string]backends.FieldInfo{"f": {}}
			for i := range ups {
				ups[i] = backends.RowUpdate{Key: keys[i], Index: res[i].Index, Fields: fields}
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
				e = backends.Entry{N: seq, ID: seq<<1 | 1, Time: now, Data: SettleRecord(&SettleArgs{Task: "t", Op: backends.Nack, Lease: a.Token, Indexes: idx[:len(r.Claimed.Rows)]})}
				if r := p.Apply(&e); r.Err != nil {
					b.Fatal(r.Err)
				}
			}
			step()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				step()
			}
		})
	}
}
