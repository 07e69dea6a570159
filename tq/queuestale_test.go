package tq_test

import (
	"context"
	"testing"
	"time"

	"github.com/tqgo/tqgo/tq"
)

// A Wait whose claims drop stale rows and lease nothing, then wait on,
// counts those drops in Stats, as a Claim does.
func TestWaitCountsStaleDrops(t *testing.T) {
	ctx := context.Background()
	c, err := tq.Open(ctx, "memory://")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	task, err := c.Task("p", "train", []string{"x"}, tq.Staleness("version", 1, true))
	if err != nil {
		t.Fatal(err)
	}
	task.SetVersion(5)
	put := func(keys []string, version int64) {
		t.Helper()
		tags := make([]tq.Tag, len(keys))
		xs := make([]int64, len(keys))
		for i := range tags {
			tags[i] = tq.Tag{"version": version}
		}
		if err := c.BatchPut(ctx, "p", keys, tq.Batch{"x": tq.Stacked(xs)}, tags); err != nil {
			t.Fatal(err)
		}
	}
	put([]string{"old0", "old1", "old2"}, 3) // 3 < 5-1: stale

	got := make(chan *tq.Lease, 1)
	errc := make(chan error, 1)
	go func() {
		l, err := task.Wait(ctx, 2)
		got <- l
		errc <- err
	}()
	// The waiter's first claim drops the stale rows; only then do fresh
	// ones arrive.
	deadline := time.Now().Add(30 * time.Second)
	for task.Stats().Dropped < 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	put([]string{"new0", "new1"}, 4)
	l, err := <-got, <-errc
	if err != nil {
		t.Fatal(err)
	}
	if keys := l.Keys(); len(keys) != 2 || keys[0] != "new0" || keys[1] != "new1" {
		t.Errorf("leased %v, want the fresh rows", keys)
	}
	if st := task.Stats(); st.Dropped != 3 || st.Skipped != 3 {
		t.Errorf("stats %+v, want 3 dropped and 3 skipped", st)
	}
	ts, err := task.Status(ctx)
	if err != nil || ts.Dropped != 3 || ts.Leased != 2 {
		t.Errorf("status %+v, %v: want 3 dropped, 2 leased", ts, err)
	}
}
