package tq_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/tq"
)

// The benchmarks move one GRPO step's batch through the memory engine: 512
// samples, sequences of benchL tokens, the fields verl's actor update reads:
//
//	input_ids      int64   [512, 256]   stacked
//	responses      int64   [512, 256]   stacked, or jagged with lengths 32..256
//	attention_mask int64   [512, 256]   stacked
//	old_log_probs  float32 [512, 256]   stacked
//	rewards        float32 [512]        stacked (one scalar per sample)
//	uid            string               values ("uid-00042", 9 bytes)
//
// 3,072 cells of up to 2 KiB, about 3.5 MiB: every cell is under the
// 256 KiB pack threshold, so packing runs on the calling goroutine. Bytes/s
// counts tensor and string payload; ns/sample is ns/op / 512. Run:
//
//	go test ./tq -run '^$' -bench 'Batch(Put|Get)' -benchmem -count 5
const (
	benchB = 512
	benchL = 256
)

// grpoBatch returns the keys, the batch and its payload bytes.
func grpoBatch(jagged bool) ([]string, tq.Batch, int64) {
	keys := make([]string, benchB)
	uids := make([]string, benchB)
	for i := range keys {
		keys[i] = fmt.Sprintf("sample-%05d", i)
		uids[i] = fmt.Sprintf("uid-%05d", i/8) // 8 responses per prompt
	}
	tokens := func(seed int64) []int64 {
		s := make([]int64, benchB*benchL)
		for i := range s {
			s[i] = (int64(i)*7919 + seed) % 151_936
		}
		return s
	}
	mask := make([]int64, benchB*benchL)
	for i := range mask {
		mask[i] = 1
	}
	logp := make([]float32, benchB*benchL)
	for i := range logp {
		logp[i] = -float32(i%1000) / 100
	}
	rewards := make([]float32, benchB)
	for i := range rewards {
		rewards[i] = float32(i % 2)
	}
	b := tq.Batch{
		"input_ids":      tq.Stacked(tokens(1), benchB, benchL),
		"attention_mask": tq.Stacked(mask, benchB, benchL),
		"old_log_probs":  tq.Stacked(logp, benchB, benchL),
		"rewards":        tq.Stacked(rewards, benchB),
		"uid":            tq.ValuesOf(uids),
	}
	// input_ids and attention_mask, old_log_probs, rewards, uid; responses below.
	bytes := int64(2*benchB*benchL*8 + benchB*benchL*4 + benchB*4 + benchB*9)
	if !jagged {
		b["responses"] = tq.Stacked(tokens(2), benchB, benchL)
		return keys, b, bytes + benchB*benchL*8
	}
	all := tokens(2)
	rows := make([][]int64, benchB)
	for i := range rows {
		n := 32 + (i*37)%(benchL-32+1)
		rows[i] = all[i*benchL : i*benchL+n]
		bytes += int64(n) * 8
	}
	b["responses"] = tq.JaggedOf(rows)
	return keys, b, bytes
}

func benchShapes() []struct {
	name   string
	jagged bool
} {
	return []struct {
		name   string
		jagged bool
	}{{"stacked", false}, {"jagged", true}}
}

func perSample(b *testing.B) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchB, "ns/sample")
}

// BenchmarkBatchPut writes the batch over the same keys each iteration: the
// steady state of a partition reused step after step, so each put also
// deletes the generation it replaces.
func BenchmarkBatchPut(b *testing.B) {
	for _, sh := range benchShapes() {
		b.Run(sh.name, func(b *testing.B) {
			ctx := context.Background()
			c := newClient(b, memory.New(), nil)
			keys, batch, bytes := grpoBatch(sh.jagged)
			if err := c.BatchPut(ctx, "train", keys, batch, nil); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(bytes)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if err := c.BatchPut(ctx, "train", keys, batch, nil); err != nil {
					b.Fatal(err)
				}
			}
			perSample(b)
		})
	}
}

// BenchmarkBatchPutFresh writes the batch to new rows (index allocation,
// first generation); the partition is cleared between iterations, off the
// clock.
func BenchmarkBatchPutFresh(b *testing.B) {
	c := newClient(b, memory.New(), nil)
	keys, batch, bytes := grpoBatch(false)
	putFresh(b, c, keys, batch, bytes)
	perSample(b)
}

// putFresh times BatchPut of batch to new rows, clearing the partition
// between iterations off the clock.
func putFresh(b *testing.B, c *tq.Client, keys []string, batch tq.Batch, bytes int64) {
	ctx := context.Background()
	b.SetBytes(bytes)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := c.BatchPut(ctx, "train", keys, batch, nil); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := c.ClearPartition(ctx, "train"); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkBatchGet reads every field of the 512 rows.
func BenchmarkBatchGet(b *testing.B) {
	for _, sh := range benchShapes() {
		b.Run(sh.name, func(b *testing.B) {
			ctx := context.Background()
			c := newClient(b, memory.New(), nil)
			keys, batch, bytes := grpoBatch(sh.jagged)
			if err := c.BatchPut(ctx, "train", keys, batch, nil); err != nil {
				b.Fatal(err)
			}
			got, err := c.BatchGet(ctx, "train", keys)
			if err != nil || len(got) != 6 {
				b.Fatalf("BatchGet: %d fields, %v", len(got), err)
			}
			want := tq.KindStacked
			if sh.jagged {
				want = tq.KindJagged
			}
			if k := got["responses"].Kind(); k != want {
				b.Fatalf("responses kind %v, want %v", k, want)
			}
			b.SetBytes(bytes)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := c.BatchGet(ctx, "train", keys); err != nil {
					b.Fatal(err)
				}
			}
			perSample(b)
		})
	}
}

// BenchmarkBatchPutLarge writes 64 rows of a 1 MiB tensor each (a
// per-sample tensor as large as a vocabulary's logits) to new rows of the
// embedded engine: its cost is the copy into the engine's memory.
func BenchmarkBatchPutLarge(b *testing.B) {
	c := newClient(b, memory.New(), nil)
	const n, size = 64, 1 << 20
	data := make([]float32, n*size/4)
	for i := range data {
		data[i] = float32(i)
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("s%d", i)
	}
	putFresh(b, c, keys, tq.Batch{"logits": tq.Stacked(data, n, size/4)}, n*size)
}
