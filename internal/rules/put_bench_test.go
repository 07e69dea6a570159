package rules

import (
	"fmt"
	"maps"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
)

// BenchmarkApplyPut: what a process pays to apply a put of n rows (its
// Prepare and Commit records, decoding included), GRPO-shaped: three
// fields with sizes. new puts new keys (the partition is refilled every
// 1024 puts); again puts the same keys, replacing their rows.
func BenchmarkApplyPut(b *testing.B) {
	fieldNames := []string{"input_ids", "responses", "rewards"}
	fields := map[string]metadata.FieldInfo{"input_ids": {DType: "int64", Shape: []int64{512}},
		"responses": {DType: "int64", Shape: []int64{1024}}, "rewards": {DType: "float32", Shape: []int64{}}}
	for _, again := range []bool{false, true} {
		for _, n := range []int{1, 64} {
			name := fmt.Sprintf("new/%d", n)
			if again {
				name = fmt.Sprintf("again/%d", n)
			}
			b.Run(name, func(b *testing.B) {
				var (
					p         *Partition
					seq, base uint64
					puts      int
				)
				sizes := make([]int64, 3*n)
				for i := range sizes {
					sizes[i] = int64(4096 + i%3)
				}
				keys := make([]string, n)
				put := func() {
					if !again || puts == 0 {
						for i := range keys {
							keys[i] = fmt.Sprintf("s%06d-r%02d", puts, i)
						}
					}
					puts++
					seq++
					e := backends.Entry{N: seq, ID: seq, Time: int64(seq), Base: base, Data: PrepareRecord(keys, fieldNames, sizes, n)}
					base += 1 << 20
					r := p.Apply(&e)
					if r.Err != nil {
						b.Fatal(r.Err)
					}
					ups := make([]metadata.RowUpdate, n)
					var (
						gens map[string]uint64
						fs   map[string]metadata.FieldInfo
					)
					for i := range ups {
						res := r.Reservations[i]
						if fs == nil || !maps.Equal(res.Gens, gens) {
							gens, fs = res.Gens, make(map[string]metadata.FieldInfo, len(fields))
							for f, fi := range fields {
								fi.Gen = gens[f]
								fs[f] = fi
							}
						}
						ups[i] = metadata.RowUpdate{Key: keys[i], Index: res.Index, Fields: fs,
							Tag: map[string]any{"uid": keys[i][:7]}}
					}
					rec, err := CommitRecord(ups)
					if err != nil {
						b.Fatal(err)
					}
					seq++
					e = backends.Entry{N: seq, ID: seq, Time: int64(seq), Data: rec}
					if r := p.Apply(&e); r.Err != nil {
						b.Fatal(r.Err)
					}
				}
				fill := func() { p, puts = New(), 0; put() }
				fill()
				b.ReportAllocs()
				for b.Loop() {
					if puts%1024 == 0 {
						b.StopTimer()
						fill()
						b.StartTimer()
					}
					put()
				}
			})
		}
	}
}
