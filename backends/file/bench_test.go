package file

import (
	"fmt"
	"testing"

	"github.com/tqgo/tqgo/tq"
)

// grpoBatch is the bench program's GRPO-shaped batch: n rows of four [L]
// tensors, a reward and a uid.
func grpoBatch(n, L int) ([]string, tq.Batch) {
	keys, uid := make([]string, n), make([]string, n)
	ids, resp := make([]int64, n*L), make([]int64, n*L)
	mask, logp, rew := make([]float32, n*L), make([]float32, n*L), make([]float32, n)
	for i := range n {
		keys[i], uid[i] = fmt.Sprintf("sample-%06d", i), fmt.Sprintf("prompt-%06d", i/8)
		for j := range L {
			ids[i*L+j], resp[i*L+j], mask[i*L+j], logp[i*L+j] = int64(i+j), int64(i*j), 1, -float32(j)/100
		}
	}
	return keys, tq.Batch{
		"input_ids": tq.Stacked(ids, n, L), "responses": tq.Stacked(resp, n, L),
		"attention_mask": tq.Stacked(mask, n, L), "old_log_probs": tq.Stacked(logp, n, L),
		"rewards": tq.Stacked(rew), "uid": tq.ValuesOf(uid),
	}
}

// BenchmarkBatchPut puts the bench program's GRPO batch (512 rows, L =
// 512: 6 MiB) into an empty partition and clears it, on memory and on
// the file engine under each sync policy.
func BenchmarkBatchPut(b *testing.B) {
	keys, batch := grpoBatch(512, 512)
	for _, url := range []string{"memory://", "file?sync=never", "file?sync=everysec", "file?sync=always"} {
		b.Run(url, func(b *testing.B) {
			if url != "memory://" {
				url = "file://" + b.TempDir() + url[len("file"):]
			}
			c, err := tq.Open(b.Context(), url)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			b.SetBytes(6 << 20)
			b.ReportAllocs()
			for b.Loop() {
				if err := c.BatchPut(b.Context(), "p", keys, batch, nil); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := c.ClearPartition(b.Context(), "p"); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
