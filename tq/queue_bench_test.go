package tq_test

import (
	"strconv"
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
