package memory_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/backends/metadata"
)

// BenchmarkClaimScale: a Claim of 8 rows and their Ack, on partitions
// holding 1,000 to 100,000 ready rows. A claim costs the rows it takes:
// the times should not grow with the partition.
func BenchmarkClaimScale(b *testing.B) {
	for _, size := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			ctx := context.Background()
			m := memory.NewMetaStore()
			keys := make([]string, size)
			for i := range keys {
				keys[i] = fmt.Sprintf("k%07d", i)
			}
			res, err := m.Prepare(ctx, "p", keys, []string{"f"}, nil)
			if err != nil {
				b.Fatal(err)
			}
			ups := make([]metadata.RowUpdate, size)
			fields := map[string]metadata.FieldInfo{"f": {}}
			for i := range ups {
				ups[i] = metadata.RowUpdate{Key: keys[i], Index: res[i].Index, Fields: fields}
			}
			if _, err := m.Commit(ctx, "p", ups); err != nil {
				b.Fatal(err)
			}
			req := metadata.ClaimRequest{Task: "t", Lease: time.Minute, Rows: 8, Min: 1, Select: metadata.Select{Fields: []string{"f"}}}
			idx := make([]uint64, 8)
			claim := func() {
				c, err := m.Claim(ctx, "p", req, nil)
				if err != nil || len(c.Rows) != 8 {
					b.Fatal(len(c.Rows), err)
				}
				for i, r := range c.Rows {
					idx[i] = r.Index
				}
				// Nack rather than Ack, so the partition keeps its ready rows.
				if _, err := m.Settle(ctx, "p", metadata.SettleRequest{Task: "t", Op: metadata.Nack, Lease: c.Lease, Indexes: idx}); err != nil {
					b.Fatal(err)
				}
			}
			claim() // the task's first claim indexes the partition
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				claim()
			}
		})
	}
}
