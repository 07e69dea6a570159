package file_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/tqgo/tqgo/backends/file"
	"github.com/tqgo/tqgo/tq"
)

// A partition's capacity is a record of its log: it survives a reopen,
// from the log alone and from a checkpoint (whose snapshot holds it).
func TestCapacitySurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	url := "file://" + dir + "?checkpoint=1KiB"
	c, err := tq.Open(ctx, url, tq.WithFullPolicy(tq.Fail))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetCapacity(ctx, "p", tq.Capacity{Rows: 3}); err != nil {
		t.Fatal(err)
	}
	if err := c.SetCapacity(ctx, "q", tq.Capacity{Rows: 2}); err != nil {
		t.Fatal(err)
	}
	full := func(c *tq.Client, partition string, n int, when string) {
		t.Helper()
		st, err := c.Status(ctx, partition)
		if err != nil {
			t.Fatal(err)
		}
		if st.Capacity.Rows != int64(n) {
			t.Fatalf("%s: partition %s's capacity %+v, want %d rows", when, partition, st.Capacity, n)
		}
		key := fmt.Sprintf("over-%s-%d", partition, st.Used.Rows)
		keys := []string{key}
		for i := st.Used.Rows; i < int64(n); i++ {
			keys = append(keys, fmt.Sprintf("fill-%s-%d", partition, i))
		}
		err = c.BatchPut(ctx, partition, keys, killBatch(keys), nil)
		if !errors.Is(err, tq.ErrFull) {
			t.Fatalf("%s: a put past partition %s's capacity: %v, want ErrFull", when, partition, err)
		}
	}
	full(c, "p", 3, "before the reopen")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	c, err = tq.Open(ctx, url, tq.WithFullPolicy(tq.Fail))
	if err != nil {
		t.Fatal(err)
	}
	full(c, "p", 3, "reopened from the log")
	// Enough writes to q for checkpoints, then reopen from one.
	eng, err := file.Open(ctx, dir, file.Options{CheckpointMin: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; file.Checkpoints(eng) < 2; i++ {
		if i == 500 {
			t.Fatal("no checkpoint")
		}
		keys := []string{fmt.Sprintf("k%d", i)}
		if err := c.BatchPut(ctx, "q", keys, killBatch(keys), nil); err != nil {
			t.Fatal(err)
		}
		if err := c.Clear(ctx, "q", keys); err != nil {
			t.Fatal(err)
		}
		file.WaitCheckpointIdle(eng)
	}
	_ = eng.Data.Close()
	_ = eng.Log.Close()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c, err = tq.Open(ctx, url, tq.WithFullPolicy(tq.Fail))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	full(c, "p", 3, "reopened from a checkpoint")
	full(c, "q", 2, "reopened from a checkpoint")
}
