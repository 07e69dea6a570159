package tqtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tqgo/tqgo/tq"
)

// capacityCases: a partition's Capacity, on every engine.
func capacityCases() []testCase {
	return []testCase{
		{"Capacity/Refuse", capacityRefuse},
		{"Capacity/Bytes", capacityBytes},
		{"Capacity/BlockUntilCleared", capacityBlock},
		{"Capacity/RaiseWakes", capacityRaise},
		{"Capacity/FastProducer", capacityFastProducer},
		{"Capacity/ClearOnSet", capacityClearOnSet},
		{"Capacity/Invalid", capacityInvalid},
	}
}

func mustSetCapacity(t *testing.T, c *tq.Client, partition string, cp tq.Capacity) {
	t.Helper()
	if err := c.SetCapacity(t.Context(), partition, cp); err != nil {
		t.Fatalf("SetCapacity(%q, %+v): %v", partition, cp, err)
	}
}

func mustStatusOf(t *testing.T, c *tq.Client, partition string) *tq.Status {
	t.Helper()
	st, err := c.Status(t.Context(), partition)
	if err != nil {
		t.Fatalf("Status(%q): %v", partition, err)
	}
	return st
}

func oneRow(i int) tq.Batch {
	return tq.Batch{"x": tq.JaggedOf([][]float32{{float32(i), 1}})}
}

// capacityRefuse: with Fail, a put of new rows past the row bound fails
// with a *FullError naming the partition and the counts, and writes
// nothing; a rewrite of held rows needs no room; a put that could never
// fit fails at once even with Block; the bound is the partition's, for
// every client.
func capacityRefuse(t *testing.T, e Engine) {
	a, b := e.Open(t), e.Open(t)
	p := "cap-refuse"
	mustSetCapacity(t, a, p, tq.Capacity{Rows: 3})
	putRows(t, a, p, []string{"k0", "k1", "k2"}, nil, "x")
	ctx := tq.WhenFull(t.Context(), tq.Fail)
	err := b.BatchPut(ctx, p, []string{"k3"}, oneRow(3), nil)
	var full *tq.FullError
	if !errors.Is(err, tq.ErrFull) || !errors.As(err, &full) {
		t.Fatalf("put past the bound: %v, want a *FullError", err)
	}
	if full.Partition != p || full.Used.Rows != 3 || full.Asked.Rows != 1 || full.Capacity.Rows != 3 || full.Never() {
		t.Errorf("FullError: %+v", full)
	}
	if got := mustList(t, b, p).Keys(); !slices.Equal(got, []string{"k0", "k1", "k2"}) {
		t.Errorf("rows after a refused put: %q", got)
	}
	if _, err := b.BatchGet(t.Context(), p, []string{"k3"}, "x"); !errors.Is(err, tq.ErrNotFound) {
		t.Errorf("refused key read back: %v, want ErrNotFound", err)
	}
	// Rewriting held rows, and adding a field to them, needs no new row.
	if err := b.BatchPut(ctx, p, []string{"k1"}, tq.Batch{"x": tq.JaggedOf([][]float32{{9, 9}}), "y": tq.Values([]any{"more"})}, nil); err != nil {
		t.Fatalf("rewrite within the bound: %v", err)
	}
	// Four rows can never fit three: no wait, even with Block.
	done := make(chan error, 1)
	go func() {
		done <- a.BatchPut(t.Context(), p, []string{"n0", "n1", "n2", "n3"}, tq.Batch{"x": tq.JaggedOf(make([][]float32, 4))}, nil)
	}()
	select {
	case err := <-done:
		if !errors.As(err, &full) || !full.Never() {
			t.Errorf("a put larger than the capacity: %v, want a *FullError that never fits", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a put that can never fit blocked")
	}
	st := mustStatusOf(t, a, p)
	if st.Capacity.Rows != 3 || st.Used.Rows != 3 || st.Used.Bytes <= 0 {
		t.Errorf("Status: capacity %+v used %+v", st.Capacity, st.Used)
	}
	// Lifting the bound lets the put through.
	mustSetCapacity(t, b, p, tq.Capacity{})
	if err := a.BatchPut(ctx, p, []string{"k3"}, oneRow(3), nil); err != nil {
		t.Fatalf("put once the bound is lifted: %v", err)
	}
}

// capacityBytes: the byte bound counts each cell's newest write; a put
// growing the partition past it is refused, a smaller rewrite is not.
func capacityBytes(t *testing.T, e Engine) {
	c := e.Open(t)
	p := "cap-bytes"
	row := func(n int) tq.Batch { return tq.Batch{"x": tq.Stacked(make([]float32, n), 1, n)} }
	if err := c.BatchPut(t.Context(), p, []string{"a"}, row(256), nil); err != nil {
		t.Fatal(err)
	}
	one := mustStatusOf(t, c, p).Used.Bytes
	if one < 1024 {
		t.Fatalf("a row of 256 float32 counts %d bytes", one)
	}
	mustSetCapacity(t, c, p, tq.Capacity{Bytes: 2*one + one/2})
	ctx := tq.WhenFull(t.Context(), tq.Fail)
	if err := c.BatchPut(ctx, p, []string{"b"}, row(256), nil); err != nil {
		t.Fatalf("second row within the bytes: %v", err)
	}
	err := c.BatchPut(ctx, p, []string{"c"}, row(256), nil)
	var full *tq.FullError
	if !errors.As(err, &full) || full.Asked.Bytes != one || full.Used.Bytes != 2*one {
		t.Fatalf("third row past the bytes: %v (%+v), want a *FullError asking %d over %d", err, full, one, 2*one)
	}
	// Rewriting a row smaller frees bytes; then the third fits.
	if err := c.BatchPut(ctx, p, []string{"b"}, row(16), nil); err != nil {
		t.Fatalf("smaller rewrite: %v", err)
	}
	if err := c.BatchPut(ctx, p, []string{"c"}, row(128), nil); err != nil {
		t.Fatalf("third row after a smaller rewrite: %v", err)
	}
	if got := mustStatusOf(t, c, p).Used.Bytes; got > 2*one+one/2 {
		t.Errorf("bytes used %d past the capacity %d", got, 2*one+one/2)
	}
}

// capacityBlock: a put with no room blocks (across clients) until a
// consumer's acks clear rows (ClearAcked), then completes; cleared rows
// and their cells are gone. A blocked put whose ctx ends returns its
// error, having written nothing.
func capacityBlock(t *testing.T, e Engine) {
	prod, cons := e.Open(t), e.Open(t)
	p := "cap-block"
	mustSetCapacity(t, prod, p, tq.Capacity{Rows: 2, ClearAcked: []string{"train"}})
	putRows(t, prod, p, []string{"k0", "k1"}, nil, "x")
	short, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	err := prod.BatchPut(short, p, []string{"k2"}, oneRow(2), nil)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("blocked put whose ctx ends: %v, want DeadlineExceeded", err)
	}
	done := make(chan error, 1)
	go func() { done <- prod.BatchPut(t.Context(), p, []string{"k2"}, oneRow(2), nil) }()
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("put returned %v with the partition full", err)
	default:
	}
	task := mustTask(t, cons, p, "train", []string{"x"})
	l := mustClaim(t, task, 1)
	if !slices.Equal(l.Keys(), []string{"k0"}) {
		t.Fatalf("claim: %q", l.Keys())
	}
	mustAck(t, l)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("blocked put after room was made: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("blocked put did not resume once an ack cleared a row")
	}
	if got := mustList(t, cons, p).Keys(); !slices.Equal(got, []string{"k1", "k2"}) {
		t.Errorf("rows: %q, want k1 k2 (k0 cleared by its ack)", got)
	}
	if _, err := cons.BatchGet(t.Context(), p, []string{"k0"}, "x"); !errors.Is(err, tq.ErrNotFound) {
		t.Errorf("cleared row read: %v, want ErrNotFound", err)
	}
}

// capacityFastProducer: a producer much faster than its consumer stays
// within the bound, blocking and resuming, and loses nothing: every row is
// consumed once.
func capacityFastProducer(t *testing.T, e Engine) {
	prod, cons := e.Open(t), e.Open(t)
	p := "cap-fast"
	const bound, total = 4, 24
	mustSetCapacity(t, prod, p, tq.Capacity{Rows: bound, ClearAcked: []string{"train"}})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	var perr error
	go func() {
		defer wg.Done()
		for i := range total {
			if err := prod.BatchPut(ctx, p, []string{fmt.Sprintf("k%02d", i)}, oneRow(i), nil); err != nil {
				perr = fmt.Errorf("put %d: %w", i, err)
				return
			}
		}
	}()
	task := mustTask(t, cons, p, "train", []string{"x"})
	var got []string
	for len(got) < total {
		st := mustStatusOf(t, cons, p)
		if st.Used.Rows > bound || st.Rows > bound {
			t.Fatalf("partition holds %d rows (%d counted), bound %d", st.Rows, st.Used.Rows, bound)
		}
		l, err := task.Wait(ctx, 2)
		if err != nil {
			t.Fatalf("Wait after %d rows: %v", len(got), err)
		}
		got = append(got, l.Keys()...)
		time.Sleep(5 * time.Millisecond) // a slow consumer
		mustAck(t, l)
	}
	wg.Wait()
	if perr != nil {
		t.Fatal(perr)
	}
	want := make([]string, total)
	for i := range want {
		want[i] = fmt.Sprintf("k%02d", i)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("consumed %q, want each of %d rows once", got, total)
	}
	if rows := mustList(t, cons, p).Keys(); len(rows) != 0 {
		t.Errorf("rows left after every ack: %q", rows)
	}
}

// capacityClearOnSet: setting ClearAcked clears the rows the named tasks
// have all consumed already, and only those.
func capacityClearOnSet(t *testing.T, e Engine) {
	c := e.Open(t)
	p := "cap-onset"
	putRows(t, c, p, []string{"a", "b", "c"}, nil, "x")
	t1, t2 := mustTask(t, c, p, "t1", []string{"x"}), mustTask(t, c, p, "t2", []string{"x"})
	mustAck(t, mustClaim(t, t1, 2))
	mustAck(t, mustClaim(t, t2, 1))
	mustSetCapacity(t, c, p, tq.Capacity{ClearAcked: []string{"t1", "t2"}})
	if got := mustList(t, c, p).Keys(); !slices.Equal(got, []string{"b", "c"}) {
		t.Errorf("rows after SetCapacity: %q, want b c (a consumed by both)", got)
	}
	mustAck(t, mustClaim(t, t2, 1))
	if got := mustList(t, c, p).Keys(); !slices.Equal(got, []string{"c"}) {
		t.Errorf("rows after t2's ack of b: %q, want c", got)
	}
}

// capacityInvalid: a malformed capacity is refused, changing nothing.
func capacityInvalid(t *testing.T, e Engine) {
	c := e.Open(t)
	p := "cap-bad"
	for _, cp := range []tq.Capacity{{Rows: -1}, {Bytes: -5}, {ClearAcked: []string{""}}, {ClearAcked: []string{"a", "a"}}} {
		if err := c.SetCapacity(t.Context(), p, cp); !errors.Is(err, tq.ErrInvalid) {
			t.Errorf("SetCapacity(%+v): %v, want ErrInvalid", cp, err)
		}
	}
	if st := mustStatusOf(t, c, p); st.Capacity.Bounded() || len(st.Capacity.ClearAcked) > 0 {
		t.Errorf("capacity after refusals: %+v", st.Capacity)
	}
}

// capacityRaise: a put blocked on a full partition goes through as soon
// as the bound is raised, woken by the change.
func capacityRaise(t *testing.T, e Engine) {
	prod, op := e.Open(t), e.Open(t)
	p := "cap-raise"
	mustSetCapacity(t, op, p, tq.Capacity{Rows: 1})
	putRows(t, prod, p, []string{"k0"}, nil, "x")
	done := make(chan error, 1)
	go func() { done <- prod.BatchPut(t.Context(), p, []string{"k1"}, oneRow(1), nil) }()
	select {
	case err := <-done:
		t.Fatalf("put returned %v with the partition full", err)
	case <-time.After(50 * time.Millisecond):
	}
	mustSetCapacity(t, op, p, tq.Capacity{Rows: 2})
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("blocked put after the bound was raised: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("raising the bound did not wake the blocked put")
	}
}
