package rules

import (
	"fmt"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
)

// BenchmarkApplyClaimAck: what a process pays to apply another's claim of
// n rows and its ack (decoding included), the replay cost of consumers
// sharing a log.
func BenchmarkApplyClaimAck(b *testing.B) { benchApplyClaimSettle(b, false) }

// benchApplyClaimSettle applies claims of n rows and their settles; with
// status, after a Summary made the partition keep its counts.
func benchApplyClaimSettle(b *testing.B, status bool) {
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
			if status {
				p.Summary(now, metadata.SummaryRequest{Counts: true})
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				step()
			}
		})
	}
}

// BenchmarkRestore: what a process joining a partition pays for its
// snapshot (see Meta's compaction: the log after it is at most its size):
// encoding (the writer that compacts) and decoding, by rows held, with
// a task that consumed half of them.
func BenchmarkRestore(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		p := New()
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("r%07d-p%03d-g%02d", i/64, i%64, i%8)
		}
		res, err := p.Prepare(1, keys, []string{"input_ids", "responses", "rewards"}, nil, 0, n)
		if err != nil {
			b.Fatal(err)
		}
		fields := map[string]metadata.FieldInfo{"input_ids": {DType: "int64", Shape: []int64{512}}, "responses": {DType: "int64", Shape: []int64{1024}}, "rewards": {DType: "float32", Shape: []int64{}}}
		ups := make([]metadata.RowUpdate, n)
		for i := range ups {
			ups[i] = metadata.RowUpdate{Key: keys[i], Index: res[i].Index, Fields: fields,
				Tag: map[string]any{"uid": keys[i][:13], "version": int64(i / 1000), "length": int64(1536)}}
		}
		if _, err := p.Commit(2, ups); err != nil {
			b.Fatal(err)
		}
		c := p.Claim(3, &ClaimArgs{Task: "train", Token: "x", Lease: time.Hour, Rows: n / 2, Min: 1, Select: Select{Fields: []string{"rewards"}}})
		idx := make([]uint64, len(c.Rows))
		for i, r := range c.Rows {
			idx[i] = r.Index
		}
		p.Settle(4, &SettleArgs{Task: "train", Op: metadata.Ack, Lease: "x", Indexes: idx})
		snap, err := p.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("encode/%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(snap)))
			for b.Loop() {
				if _, err := p.Snapshot(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("freeze/%d", n), func(b *testing.B) {
			// What an owner holds its partition's lock for: the encoding
			// runs after, without it.
			for b.Loop() {
				p.Freeze()
			}
		})
		b.Run(fmt.Sprintf("decode/%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(snap)))
			b.ReportMetric(float64(len(snap))/float64(n), "B/row")
			for b.Loop() {
				if _, err := Restore(snap); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReplayClaimAck: what a process pays to replay another's claim
// of 8 rows and its ack (Replay: no result built), as every consumer of
// a shared log does for every other consumer's claim.
func BenchmarkReplayClaimAck(b *testing.B) {
	const rows, n = 4096, 8
	keys := make([]string, rows)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%07d", i)
	}
	var p *Partition
	now := int64(3)
	var seq uint64
	fill := func() {
		p = New()
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
	}
	a := &ClaimArgs{Task: "t", Lease: time.Minute, Rows: n, Min: 1, Select: Select{Fields: []string{"f"}}}
	idx := make([]uint64, n)
	fill()
	b.ReportAllocs()
	for b.Loop() {
		now++
		seq++
		a.Token = fmt.Sprint(seq)
		ready := p.Ready("t")
		if ready == 0 {
			b.StopTimer()
			fill()
			b.StartTimer()
			ready = rows
		}
		// The rows the claim leases: the oldest ready ones.
		first := uint64(rows - max(ready, 0))
		if ready < 0 {
			first = 0
		}
		for i := range idx {
			idx[i] = first + uint64(i)
		}
		e := backends.Entry{N: seq, ID: seq, Time: now, Data: ClaimRecord(a)}
		p.Replay(&e)
		e = backends.Entry{N: seq, ID: seq<<1 | 1, Time: now, Data: SettleRecord(&SettleArgs{Task: "t", Op: metadata.Ack, Lease: a.Token, Indexes: idx})}
		p.Replay(&e)
	}
}
