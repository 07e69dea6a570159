package tq_test

import (
	"strconv"
	"sync"
	"testing"

	"github.com/tqgo/tqgo/tq"
)

// BenchmarkClaimAck is the claim and ack of a 512-row step on the memory
// engine, beside BenchmarkClaimAckList, a List of the same rows.
func BenchmarkClaimAck(b *testing.B) { benchStep(b, false) }

func BenchmarkClaimAckList(b *testing.B) { benchStep(b, true) }

func benchStep(b *testing.B, list bool) {
	ctx := b.Context()
	c, err := tq.Open(ctx, "memory://")
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	const n = 512
	keys := make([]string, n)
	ids := make([]int64, n)
	for i := range keys {
		keys[i] = "r" + strconv.Itoa(i)
	}
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		p := "step" + strconv.Itoa(i)
		if err := c.BatchPut(ctx, p, keys, tq.Batch{"id": tq.Stacked(ids, n)}, nil); err != nil {
			b.Fatal(err)
		}
		task, err := c.Task(p, "t", []string{"id"})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if list {
			if _, err := c.List(ctx, p); err != nil {
				b.Fatal(err)
			}
		} else {
			l, err := task.Claim(ctx, n)
			if err != nil || l.Len() != n {
				b.Fatal(err, l.Len())
			}
			if err := l.Ack(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		_ = c.ClearPartition(ctx, p)
		b.StartTimer()
	}
}

// BenchmarkContention is 8 consumers of one task claiming and acking 8
// rows at a time from a 2048-row partition; ns/op is per claim.
func BenchmarkContention(b *testing.B) {
	ctx := b.Context()
	c, err := tq.Open(ctx, "memory://")
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	const n = 2048
	keys := make([]string, n)
	ids := make([]int64, n)
	for i := range keys {
		keys[i] = "r" + strconv.Itoa(i)
	}
	claims := 0
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		p := "contend" + strconv.Itoa(i)
		if err := c.BatchPut(ctx, p, keys, tq.Batch{"id": tq.Stacked(ids, n)}, nil); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		var wg sync.WaitGroup
		var mu sync.Mutex
		for range 8 {
			task, _ := c.Task(p, "t", []string{"id"})
			wg.Go(func() {
				for {
					l, err := task.Claim(ctx, 8)
					if err != nil || l.Len() == 0 {
						return
					}
					_ = l.Ack(ctx)
					mu.Lock()
					claims++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		b.StopTimer()
		_ = c.ClearPartition(ctx, p)
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(claims), "ns/claim")
}
