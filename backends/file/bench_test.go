package file_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/file"
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

// BenchmarkReopen opens a directory of 1M cells of 100 bytes (keys like
// a row's, "123456@field@0"): from the log alone (every cell written once:
// no checkpoint is due), and from a checkpoint (every cell written twice,
// then a checkpoint).
func BenchmarkReopen(b *testing.B) {
	const n, batch = 1_000_000, 10_000
	val := make([]byte, 100)
	fill := func(b *testing.B, eng backends.Engine, round int) {
		cells := make([]backends.Cell, batch)
		for lo := 0; lo < n; lo += batch {
			for i := range cells {
				val[0] = byte(round)
				cells[i] = backends.Cell{Key: fmt.Sprintf("%d@field@0", lo+i), Body: val}
			}
			if err := eng.Data.Write(b.Context(), cells); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, rounds := range []int{1, 2} {
		name := "log"
		if rounds == 2 {
			name = "checkpoint"
		}
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			o := file.Options{Sync: file.SyncNever, CheckpointMin: 1 << 20}
			eng, err := file.Open(b.Context(), dir, o)
			if err != nil {
				b.Fatal(err)
			}
			for r := range rounds {
				fill(b, eng, r)
			}
			file.WaitCheckpointIdle(eng)
			if rounds == 2 && file.Checkpoints(eng) == 0 {
				b.Fatal("no checkpoint")
			}
			if err := errors.Join(eng.Data.Close(), eng.Log.Close()); err != nil {
				b.Fatal(err)
			}
			var size int64
			for _, name := range file.DirNames(b, dir) {
				if info, err := os.Stat(filepath.Join(dir, name)); err == nil {
					size += info.Size()
				}
			}
			b.Logf("%s: %d cells, %.0f MB on disk", name, n, float64(size)/1e6)
			for b.Loop() {
				eng, err := file.Open(b.Context(), dir, o)
				if err != nil {
					b.Fatal(err)
				}
				if got := file.Cells(eng); got != n {
					b.Fatalf("%d cells reopened, want %d", got, n)
				}
				if err := errors.Join(eng.Data.Close(), eng.Log.Close()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
