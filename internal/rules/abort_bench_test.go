package rules

import (
	"fmt"
	"testing"

	"github.com/tqgo/tqgo/backends"
)

// BenchmarkAbortWithPutPending is a reclaim's abort (AbortRecord, what
// Garbage appends) on a partition of n held rows (BenchmarkHeldRowMemory's)
// while one put of 64 rows is pending, younger than the cutoff: what the
// abort costs under the partition's lock when it aborts nothing.
func BenchmarkAbortWithPutPending(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			p := heldRows(b, n)
			seq := uint64(1 << 40)
			apply := func(data []byte) {
				seq++
				e := backends.Entry{N: p.Seq() + 1, ID: seq, Time: p.Now() + 1, Base: seq << 20, Data: data}
				if r := p.Apply(&e); r.Err != nil {
					b.Fatal(r.Err)
				}
			}
			keys := make([]string, 64)
			for i := range keys {
				keys[i] = fmt.Sprintf("pending-%02d", i)
			}
			apply(PrepareRecord(keys, []string{"x"}, nil, len(keys)))
			b.ResetTimer()
			for b.Loop() {
				apply(AbortRecord(3600_000_000_000)) // an hour: aborts nothing
			}
		})
	}
}
