package rules

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
)

// BenchmarkHeldRowMemory reports what a partition's state costs in memory
// per row it holds (B/row: the live heap after building it, over the
// rows), GRPO-shaped: rows put 64 at a time (one prompt's responses),
// three fields and two tags each, a task (reward) that acked the first
// half and one (train) holding a quarter under leases of 8 rows: what an
// owner keeps in memory for a partition.
// With status, the partition was asked a Summary (which builds its
// index).
func BenchmarkHeldRowMemory(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		for _, status := range []bool{false, true} {
			name := fmt.Sprint(n)
			if status {
				name += "/status"
			}
			b.Run(name, func(b *testing.B) {
				var per float64
				for b.Loop() {
					before := liveHeap()
					p := heldRows(b, n)
					if status {
						p.Summary(p.Now(), metadata.SummaryRequest{Counts: true})
					}
					per = float64(liveHeap()-before) / float64(n)
					runtime.KeepAlive(p)
				}
				b.ReportMetric(per, "B/row")
			})
		}
	}
}

// liveHeap is the heap in use after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// heldRows builds BenchmarkHeldRowMemory's partition of n rows, as an
// owner does: by applying the records its clients' calls append.
func heldRows(b *testing.B, n int) *Partition {
	p := New()
	var seq, base uint64
	apply := func(data []byte) Result {
		seq++
		e := backends.Entry{N: seq, ID: seq, Time: int64(seq), Base: base, Data: data}
		base += 1 << 20
		r := p.Apply(&e)
		if r.Err != nil {
			b.Fatal(r.Err)
		}
		return r
	}
	const put = 64
	fieldNames := []string{"input_ids", "responses", "rewards"}
	for start := 0; start < n; start += put {
		keys := make([]string, min(put, n-start))
		for i := range keys {
			keys[i] = fmt.Sprintf("s%06d-r%02d", (start+i)/put, i)
		}
		res := apply(PrepareRecord(keys, fieldNames, nil, len(keys))).Reservations
		fields := map[string]metadata.FieldInfo{"input_ids": {DType: "int64", Shape: []int64{512}},
			"responses": {DType: "int64", Shape: []int64{1024}}, "rewards": {DType: "float32", Shape: []int64{}}}
		ups := make([]metadata.RowUpdate, len(keys))
		for i := range ups {
			ups[i] = metadata.RowUpdate{Key: keys[i], Index: res[i].Index, Fields: fields,
				Tag: map[string]any{"uid": keys[i][:7], "version": int64(start / 4096)}}
		}
		rec, err := CommitRecord(ups)
		if err != nil {
			b.Fatal(err)
		}
		apply(rec)
	}
	claim := func(task string, rows int, ack bool) {
		for done := 0; done < rows; done += 8 {
			tok := fmt.Sprintf("%s-%d", task, done)
			c := apply(ClaimRecord(&ClaimArgs{Task: task, Token: tok, Lease: time.Hour, Rows: 8, Min: 1, Select: Select{Fields: []string{"rewards"}}})).Claimed
			if !ack {
				continue
			}
			idx := make([]uint64, len(c.Rows))
			for i, r := range c.Rows {
				idx[i] = r.Index
			}
			apply(SettleRecord(&SettleArgs{Task: task, Op: metadata.Ack, Lease: tok, Indexes: idx}))
		}
	}
	claim("reward", n/2, true)
	claim("train", n/4, false)
	return p
}
