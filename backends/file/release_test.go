package file_test

import (
	"slices"
	"testing"
	"time"

	"github.com/tqgo/tqgo/tq"
)

// Reopening a directory ends the claims its former process held (its
// lock proves that process gone): rows claimed and never acked are
// claimable at once, their deliveries counted on, not after their
// leases of an hour; rows acked stay acked.
func TestReopenReleasesClaims(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	c, err := tq.Open(ctx, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"a", "b", "c", "d"}
	if err := c.BatchPut(ctx, "p", keys, killBatch(keys), nil); err != nil {
		t.Fatal(err)
	}
	task, err := c.Task("p", "train", killFields, tq.LeaseFor(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	held, err := task.Claim(ctx, 2)
	if err != nil || held.Len() != 2 {
		t.Fatalf("claim: %v, %v", held, err)
	}
	acked, err := task.Claim(ctx, 1)
	if err != nil || acked.Len() != 1 {
		t.Fatalf("claim: %v, %v", acked, err)
	}
	if err := acked.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	c, err = tq.Open(ctx, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	task, err = c.Task("p", "train", killFields, tq.LeaseFor(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	again, err := task.Claim(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	got := again.Keys()
	slices.Sort(got)
	want := slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return k == acked.Keys()[0] })
	if !slices.Equal(got, want) {
		t.Fatalf("claimed after the reopen: %v, want %v (the rows held by the closed process and the one never claimed)", got, want)
	}
	for i, k := range again.Keys() {
		wantN := 1
		if slices.Contains(held.Keys(), k) {
			wantN = 2
		}
		if again.Deliveries[i] != wantN {
			t.Errorf("row %s: delivery %d, want %d", k, again.Deliveries[i], wantN)
		}
	}
}
