package tq_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tqgo/tqgo/tq"
)

func openMemory(t *testing.T) *tq.Client {
	t.Helper()
	c, err := tq.Open(t.Context(), "memory://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func putA(t *testing.T, c *tq.Client, p string, keys []string) {
	t.Helper()
	rows := make([][]float32, len(keys))
	for i := range rows {
		rows[i] = []float32{1}
	}
	if err := c.BatchPut(t.Context(), p, keys, tq.Batch{"a": tq.JaggedOf(rows)}, nil); err != nil {
		t.Fatal(err)
	}
}

func task(t *testing.T, c *tq.Client, p, name string, opts ...tq.TaskOption) *tq.Task {
	t.Helper()
	tk, err := c.Task(p, name, []string{"a"}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// A rank that acks its share before the other rank claims leaves the
// other rank's share whole: the batch is split as it was selected.
func TestRankSharesAfterAnEarlierAck(t *testing.T) {
	ctx := t.Context()
	c := openMemory(t)
	var keys []string
	for i := range 4 {
		keys = append(keys, fmt.Sprintf("k%d", i))
	}
	putA(t, c, "p", keys)
	r0, r1 := task(t, c, "p", "train", tq.Ranks(2, 0, "")), task(t, c, "p", "train", tq.Ranks(2, 1, ""))
	l0, err := r0.Claim(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := l0.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	l1, err := r1.Claim(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	if l0.Len() != 2 || l1.Len() != 2 {
		t.Fatalf("shares of %d and %d rows of a batch of 4", l0.Len(), l1.Len())
	}
	if err := l1.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := r1.Status(ctx); st.Acked != 4 || st.Leased != 0 {
		t.Fatalf("status after both shares were acked: %+v", st)
	}
}

// Extend and Until are safe together (go test -race).
func TestLeaseExtendConcurrent(t *testing.T) {
	ctx := t.Context()
	c := openMemory(t)
	putA(t, c, "p", []string{"a", "b"})
	l, err := task(t, c, "p", "t").Claim(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	before := l.Until()
	var wg sync.WaitGroup
	for _, k := range l.Keys() {
		wg.Go(func() {
			if err := l.Extend(ctx, time.Hour, k); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() { _ = l.Until() })
	}
	wg.Wait()
	if !l.Until().After(before) {
		t.Fatalf("Until %v after extending a lease that ended at %v", l.Until(), before)
	}
}

// A group task's n and m count whole groups: Wait(6) with groups of 4
// returns one group; n smaller than a group is invalid.
func TestGroupsWholeGroups(t *testing.T) {
	ctx := t.Context()
	c := openMemory(t)
	var keys []string
	for g := range 4 {
		for j := range 4 {
			keys = append(keys, fmt.Sprintf("g%d/%d", g, j))
		}
	}
	putA(t, c, "p", keys)
	tk := task(t, c, "p", "t", tq.WithGroups(tq.GroupKeyPrefix("/"), 4))
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l, err := tk.Wait(wctx, 6)
	if err != nil || l.Len() != 4 {
		t.Fatalf("Wait(6) in groups of 4: %v rows, %v; want one group", l, err)
	}
	if _, err := tk.Claim(ctx, 3); !errors.Is(err, tq.ErrInvalid) {
		t.Fatalf("Claim(3) in groups of 4: %v, want ErrInvalid", err)
	}
	if l, err := tk.Claim(ctx, 8, tq.AtLeast(5)); err != nil || l.Len() != 8 {
		t.Fatalf("Claim(8, AtLeast(5)) in groups of 4: %v, %v; want two groups", l, err)
	}
}

// A rank's Wait returns its share of each batch, empty too, so ranks in
// lockstep see every batch: with one row for two ranks, rank 1's share
// is empty, and its next Wait is its share of the next batch.
func TestRankWaitEmptyShare(t *testing.T) {
	ctx := t.Context()
	c := openMemory(t)
	putA(t, c, "p", []string{"a"})
	r0, r1 := task(t, c, "p", "train", tq.Ranks(2, 0, "")), task(t, c, "p", "train", tq.Ranks(2, 1, ""))
	l0, err := r0.Wait(ctx, 1)
	if err != nil || l0.Len() != 1 {
		t.Fatalf("rank 0: %v, %v", l0, err)
	}
	l1, err := r1.Wait(ctx, 1)
	if err != nil || l1.Len() != 0 {
		t.Fatalf("rank 1's share of a one-row batch: %v, %v; want it empty", l1, err)
	}
	if err := l1.Ack(ctx); err != nil {
		t.Fatalf("ack of an empty share: %v", err)
	}
	putA(t, c, "p", []string{"b", "c"})
	l1, err = r1.Wait(ctx, 2, tq.AtLeast(2))
	if err != nil || l1.Len() != 1 {
		t.Fatalf("rank 1 after two more rows: %v, %v; want its share of one", l1, err)
	}
}

// Close ends a waiting Wait (with ErrClosed) rather than wait for it.
func TestCloseEndsWait(t *testing.T) {
	c, err := tq.Open(t.Context(), "memory://")
	if err != nil {
		t.Fatal(err)
	}
	tk := task(t, c, "p", "t")
	errc := make(chan error, 1)
	go func() { _, err := tk.Wait(context.Background(), 1); errc <- err }()
	time.Sleep(50 * time.Millisecond)
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close blocked behind a waiting Wait")
	}
	if err := <-errc; !errors.Is(err, tq.ErrClosed) {
		t.Fatalf("Wait ended by Close: %v, want ErrClosed", err)
	}
}

// TestSamplerAskedForN: a claim of n rows asks its sampler for n, so that
// a sampler offers candidates for n (and a margin), not the partition's
// every ready row: on a server engine each candidate travels with the
// claim and is looked up there. The default sampler offers 2n+16.
func TestSamplerAskedForN(t *testing.T) {
	c := openMemory(t)
	keys := make([]string, 200)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
	}
	putA(t, c, "p", keys)
	var mu sync.Mutex
	var asked []int
	var offered int
	seq := tq.Sequential()
	tk := task(t, c, "p", "t", tq.WithSampler(tq.SamplerFunc(func(ready []tq.Candidate, n int) ([][]int, []int) {
		units, drop := seq.Sample(ready, n)
		mu.Lock()
		asked = append(asked, n)
		offered = len(units)
		mu.Unlock()
		return units, drop
	})))
	l, err := tk.Claim(t.Context(), 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Keys()) != 5 {
		t.Fatalf("claimed %d rows, want 5", len(l.Keys()))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) == 0 || asked[len(asked)-1] != 5 {
		t.Fatalf("the sampler was asked for %v, want 5", asked)
	}
	if offered != 2*5+16 {
		t.Errorf("the default sampler offered %d units for 5 of 200 rows, want %d", offered, 2*5+16)
	}
}
