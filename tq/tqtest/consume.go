package tqtest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/tq"
)

func consumeCases() []testCase {
	return []testCase{
		{"Consume/ExactlyOnce", consumeExactlyOnce},
		{"Consume/FieldsReady", consumeFieldsReady},
		{"Consume/Groups", consumeGroups},
		{"Consume/Ranks", consumeRanks},
		{"Consume/Staleness", consumeStaleness},
		{"Consume/Redelivery", consumeRedelivery},
		{"Consume/Dead", consumeDead},
		{"Consume/WaitContext", consumeWaitContext},
		{"Consume/Invalid", consumeInvalid},
		{"Consume/WithData", consumeWithData},
		{"Consume/StatusAndClear", consumeStatusAndClear},
		{"Consume/StatusHistory", consumeStatusHistory},
		{"Consume/Reset", consumeReset},
		{"Consume/ResetThenWait", consumeResetThenWait},
		{"Consume/RanksClearedRow", consumeRanksClearedRow},
		{"Consume/SequentialAfterCommit", consumeSequentialAfterCommit},
		{"Consume/ConsumptionAfterNack", consumeConsumptionAfterNack},
		{"Consume/TokenBudget", consumeTokenBudget},
		{"Consume/Handler", consumeHandler},
		{"Consume/Pace", consumePace},
	}
}

// consumePace: a producer's Pace waits, across clients, while the task
// has rows of a version older than the bound to consume, and returns once
// they are acknowledged; with none, at once; when ctx ends, with its error.
func consumePace(t *testing.T, e Engine) {
	prod, cons := e.Open(t), e.Open(t)
	p := "pace"
	putRows(t, prod, p, []string{"v1a", "v1b", "v2a", "x"}, []tq.Tag{{"ver": int64(1)}, {"ver": int64(1)}, {"ver": int64(2)}, {"other": "no version"}}, "x")
	ctx := t.Context()
	if err := prod.Pace(ctx, p, "ver", 2, 1, "train"); err != nil {
		t.Fatalf("Pace within the bound: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err := prod.Pace(short, p, "ver", 3, 1, "train")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Pace past the bound with its context ending: %v, want DeadlineExceeded", err)
	}
	task := mustTask(t, cons, p, "train", []string{"x"})
	var acked atomic.Bool
	done := make(chan error, 1)
	go func() { done <- prod.Pace(ctx, p, "ver", 3, 1, "train") }()
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Pace returned %v with version-1 rows unconsumed", err)
	default:
	}
	l := mustClaim(t, task, 2)
	if !slices.Equal(l.Keys(), []string{"v1a", "v1b"}) {
		t.Fatalf("claim: %q", l.Keys())
	}
	acked.Store(true)
	mustAck(t, l)
	select {
	case err := <-done:
		if err != nil || !acked.Load() {
			t.Fatalf("Pace after the ack: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Pace did not return once the old rows were acknowledged")
	}
	if err := prod.Pace(ctx, p, "", 3, 1, "train"); !errors.Is(err, tq.ErrInvalid) {
		t.Errorf("Pace by no tag: %v", err)
	}
}

// consumeTokenBudget: claims of a TokenBudget task lease rows up to the
// budget's total length (the first whatever its length), across clients,
// each row once; Status names each lease's holder.
func consumeTokenBudget(t *testing.T, e Engine) {
	a, b := e.Open(t), e.Open(t)
	p := "budget"
	keys := []string{"r0", "r1", "r2", "r3", "r4"}
	tags := []tq.Tag{{"len": int64(5)}, {"len": int64(5)}, {"len": int64(5)}, {"len": int64(5)}, {"len": int64(50)}}
	putRows(t, a, p, keys, tags, "x")
	ta := mustTask(t, a, p, "train", []string{"x"}, tq.TokenBudget("len", 12), tq.ConsumerName("A"))
	tb := mustTask(t, b, p, "train", []string{"x"}, tq.TokenBudget("len", 12), tq.ConsumerName("B"))
	la, lb := mustClaim(t, ta, 10), mustClaim(t, tb, 10)
	lc := mustClaim(t, ta, 10)
	for _, c := range []struct {
		l    *tq.Lease
		want []string
	}{{la, keys[0:2]}, {lb, keys[2:4]}, {lc, keys[4:5]}} {
		if !slices.Equal(c.l.Keys(), c.want) {
			t.Errorf("claims within 12 tokens: %q, want %q", c.l.Keys(), c.want)
		}
	}
	st := mustStatus(t, ta)
	holders := map[string]int{}
	for _, l := range st.Leases {
		holders[l.Holder] += l.Rows
	}
	if st.Leased != 5 || holders["A"] != 3 || holders["B"] != 2 {
		t.Errorf("status: %+v, want 3 rows held by A and 2 by B", st)
	}
}

// consumeHandler: Consume on two clients, two workers each, hands every
// row to a handler; a row whose handler failed once comes back and is
// handled again; every row ends acknowledged.
func consumeHandler(t *testing.T, e Engine) {
	a, b := e.Open(t), e.Open(t)
	p := "handler"
	keys := make([]string, 24)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%02d", i)
	}
	putRows(t, a, p, keys, nil, "x")
	var mu sync.Mutex
	handled := map[string]int{}
	var failed []string // the lease whose handler failed: back, handled again
	h := func(ctx context.Context, l *tq.Lease) error {
		mu.Lock()
		defer mu.Unlock()
		for _, k := range l.Keys() {
			handled[k]++
		}
		if slices.Contains(l.Keys(), "k07") && handled["k07"] == 1 {
			failed = l.Keys()
			return errors.New("the first try fails")
		}
		return nil
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 2)
	for _, c := range []*tq.Client{a, b} {
		task := mustTask(t, c, p, "work", []string{"x"})
		go func() {
			done <- task.Consume(ctx, 3, h, tq.Workers(2), tq.Backoff(10*time.Millisecond, 10*time.Millisecond))
		}()
	}
	check := mustTask(t, a, p, "work", []string{"x"})
	deadline := time.Now().Add(20 * time.Second)
	for mustStatus(t, check).Acked != len(keys) {
		if time.Now().After(deadline) {
			t.Fatalf("not every row acked in time: %+v", mustStatus(t, check))
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	for range 2 {
		if err := <-done; err != nil {
			t.Errorf("Consume: %v", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, k := range keys {
		want := 1
		if slices.Contains(failed, k) {
			want = 2
		}
		if handled[k] != want {
			t.Errorf("%s handled %d times, want %d", k, handled[k], want)
		}
	}
}

// putRows writes keys with field f (a float32 row each) and tags.
func putRows(t *testing.T, c *tq.Client, partition string, keys []string, tags []tq.Tag, fields ...string) {
	t.Helper()
	b := tq.Batch{}
	for _, f := range fields {
		rows := make([][]float32, len(keys))
		for i := range rows {
			rows[i] = []float32{float32(i), 1}
		}
		b[f] = tq.JaggedOf(rows)
	}
	if err := c.BatchPut(t.Context(), partition, keys, b, tags); err != nil {
		t.Fatalf("BatchPut(%q, %d keys): %v", partition, len(keys), err)
	}
}

func mustTask(t *testing.T, c *tq.Client, partition, name string, fields []string, opts ...tq.TaskOption) *tq.Task {
	t.Helper()
	task, err := c.Task(partition, name, fields, opts...)
	if err != nil {
		t.Fatalf("Task(%q, %q, %q): %v", partition, name, fields, err)
	}
	return task
}

func mustClaim(t *testing.T, task *tq.Task, n int, opts ...tq.ClaimOption) *tq.Lease {
	t.Helper()
	l, err := task.Claim(t.Context(), n, opts...)
	if err != nil {
		t.Fatalf("Claim(%d): %v", n, err)
	}
	return l
}

func mustAck(t *testing.T, l *tq.Lease, keys ...string) {
	t.Helper()
	if err := l.Ack(t.Context(), keys...); err != nil {
		t.Fatalf("Ack: %v", err)
	}
}

func mustStatus(t *testing.T, task *tq.Task) tq.TaskStatus {
	t.Helper()
	st, err := task.Status(t.Context())
	if err != nil {
		t.Fatalf("Task.Status: %v", err)
	}
	return st
}

// consumeExactlyOnce: consumers on clients of their own, waiting while a
// producer writes, receive every row once before any ack.
func consumeExactlyOnce(t *testing.T, e Engine) {
	const rows, batch, consumers = 96, 8, 4
	p := "once"
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	got := map[string]int{}
	total := 0
	var wg sync.WaitGroup
	errs := make(chan error, consumers+1)
	for w := range consumers {
		c := e.Open(t)
		task := mustTask(t, c, p, "reader", []string{"a"})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				l, err := task.Wait(ctx, 5, tq.AtLeast(1))
				if err != nil {
					errs <- fmt.Errorf("consumer %d: %w", w, err)
					return
				}
				mu.Lock()
				for _, k := range l.Keys() {
					got[k]++
				}
				total += l.Len()
				done := total >= rows
				mu.Unlock()
				if done {
					cancel() // every row seen: wake the others
					return
				}
			}
		}()
	}
	producer := e.Open(t)
	for i := 0; i < rows; i += batch {
		keys := make([]string, batch)
		for j := range keys {
			keys[j] = fmt.Sprintf("r%03d", i+j)
		}
		putRows(t, producer, p, keys, nil, "a")
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	}
	if len(got) != rows {
		t.Fatalf("consumers received %d distinct rows of %d", len(got), rows)
	}
	for k, n := range got {
		if n != 1 {
			t.Fatalf("row %s received %d times before any ack", k, n)
		}
	}
}

func consumeFieldsReady(t *testing.T, e Engine) {
	c := e.Open(t)
	p := "fields"
	keys := keysN(4)
	putRows(t, c, p, keys, nil, "a")
	task := mustTask(t, c, p, "needs-ab", []string{"a", "b"})
	if l := mustClaim(t, task, 4); l.Len() != 0 {
		t.Fatalf("rows without field b were claimed: %q", l.Keys())
	}
	if st := mustStatus(t, task); st.Waiting != 4 || st.Ready != 0 {
		t.Fatalf("status before b: %+v, want 4 waiting", st)
	}
	putRows(t, c, p, keys[:2], nil, "b")
	l := mustClaim(t, task, 4)
	if !slices.Equal(l.Keys(), keys[:2]) {
		t.Fatalf("claim after b on two rows: %q, want %q", l.Keys(), keys[:2])
	}
	mustAck(t, l)
	if st := mustStatus(t, task); st.Acked != 2 || st.Waiting != 2 {
		t.Fatalf("status after ack: %+v", st)
	}
}

// consumeGroups: while producers write the rows of groups one by one,
// interleaved, a group claim never returns part of a group.
func consumeGroups(t *testing.T, e Engine) {
	const groups, size = 12, 4
	p := "groups"
	c := e.Open(t)
	task := mustTask(t, c, p, "adv", []string{"a"}, tq.WithGroups(tq.GroupTag("uid"), size))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	perUID := map[int64]int{}
	done := make(chan error, 1)
	go func() {
		seen := 0
		for seen < groups*size {
			l, err := task.Wait(ctx, 2*size, tq.AtLeast(size))
			if err != nil {
				done <- err
				return
			}
			leased := map[int64]int{}
			for _, r := range l.Meta.Rows {
				leased[r.Tag["uid"].(int64)]++
			}
			for uid, n := range leased {
				if n != size {
					done <- fmt.Errorf("a lease held %d rows of group %d, want %d", n, uid, size)
					return
				}
				perUID[uid] += n
			}
			seen += l.Len()
			if err := l.Ack(ctx); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	producer := e.Open(t)
	for j := range size {
		for g := range groups {
			key := fmt.Sprintf("g%02d/%d", g, j)
			putRows(t, producer, p, []string{key}, []tq.Tag{{"uid": g}}, "a")
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(perUID) != groups {
		t.Fatalf("claimed %d groups, want %d", len(perUID), groups)
	}
}

// consumeRanks: two ranks on clients of their own share each batch:
// disjoint, covering, groups whole, token counts balanced within the
// largest group's weight (what largest differencing guarantees for two).
func consumeRanks(t *testing.T, e Engine) {
	const groups, size = 8, 2
	p := "ranks"
	producer := e.Open(t)
	var keys []string
	var tags []tq.Tag
	weight := map[string]float64{}
	for g := range groups {
		for j := range size {
			k := fmt.Sprintf("g%d/%d", g, j)
			n := int64(10 + 37*g%23 + 5*j)
			keys = append(keys, k)
			tags = append(tags, tq.Tag{"uid": g, "len": n})
			weight[k] = float64(n)
		}
	}
	putRows(t, producer, p, keys, tags, "a")
	var shares [2]*tq.Lease
	for r := range 2 {
		c := e.Open(t)
		task := mustTask(t, c, p, "train", []string{"a"}, tq.WithGroups(tq.GroupTag("uid"), size), tq.Ranks(2, r, "len"))
		l, err := task.Wait(t.Context(), len(keys))
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		shares[r] = l
	}
	seen := map[string]int{}
	var sums [2]float64
	maxGroup := 0.0
	for g := range groups {
		maxGroup = math.Max(maxGroup, weight[fmt.Sprintf("g%d/0", g)]+weight[fmt.Sprintf("g%d/1", g)])
	}
	for r, l := range shares {
		group := map[int64]int{}
		for _, row := range l.Meta.Rows {
			seen[row.Key]++
			sums[r] += weight[row.Key]
			group[row.Tag["uid"].(int64)]++
		}
		for uid, n := range group {
			if n != size {
				t.Fatalf("rank %d holds %d rows of group %d", r, n, uid)
			}
		}
	}
	if len(seen) != len(keys) {
		t.Fatalf("the shares cover %d rows of %d", len(seen), len(keys))
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("row %s is in %d shares", k, n)
		}
	}
	if d := math.Abs(sums[0] - sums[1]); d > maxGroup {
		t.Fatalf("shares weigh %v and %v: apart by more than the largest group (%v)", sums[0], sums[1], maxGroup)
	}
	for _, l := range shares {
		mustAck(t, l)
	}
}

func consumeStaleness(t *testing.T, e Engine) {
	c := e.Open(t)
	p := "stale"
	keys := keysN(8)
	tags := make([]tq.Tag, len(keys))
	for i := range tags {
		tags[i] = tq.Tag{"version": i / 2} // versions 0 0 1 1 2 2 3 3
	}
	putRows(t, c, p, keys, tags, "a")
	skip := mustTask(t, c, p, "skipper", []string{"a"}, tq.Staleness("version", 1, false))
	skip.SetVersion(3)
	l := mustClaim(t, skip, 8)
	if !slices.Equal(l.Keys(), keys[4:]) {
		t.Fatalf("claim at version 3, bound 1: %q, want %q", l.Keys(), keys[4:])
	}
	if st := skip.Stats(); st.Skipped != 4 || st.Dropped != 0 {
		t.Fatalf("stats %+v, want 4 skipped", st)
	}
	if st := mustStatus(t, skip); st.Ready != 4 || st.Dropped != 0 {
		t.Fatalf("skipped rows: %+v, want 4 still ready", st)
	}
	drop := mustTask(t, c, p, "dropper", []string{"a"}, tq.Staleness("version", 1, true))
	drop.SetVersion(3)
	l = mustClaim(t, drop, 8)
	if l.Len() != 4 {
		t.Fatalf("claim dropping stale rows leased %d, want 4", l.Len())
	}
	if st := drop.Stats(); st.Dropped != 4 {
		t.Fatalf("stats %+v, want 4 dropped", st)
	}
	if st := mustStatus(t, drop); st.Dropped != 4 || st.Leased != 4 {
		t.Fatalf("status after drops: %+v", st)
	}
	// A newer version makes no dropped row come back.
	drop.SetVersion(0)
	if l := mustClaim(t, drop, 8); l.Len() != 0 {
		t.Fatalf("dropped rows delivered: %q", l.Keys())
	}
}

func consumeRedelivery(t *testing.T, e Engine) {
	c := e.Open(t)
	p := "redeliver"
	keys := keysN(3)
	putRows(t, c, p, keys, nil, "a")
	task := mustTask(t, c, p, "w", []string{"a"}, tq.LeaseFor(300*time.Millisecond))
	l := mustClaim(t, task, 3)
	if err := l.Nack(t.Context(), 0, keys[0]); err != nil {
		t.Fatal(err)
	}
	again := mustClaim(t, task, 1)
	if !slices.Equal(again.Keys(), keys[:1]) || again.Deliveries[0] != 2 {
		t.Fatalf("after a nack: %q deliveries %v, want [%s] delivered twice", again.Keys(), again.Deliveries, keys[0])
	}
	mustAck(t, again)
	if err := l.Extend(t.Context(), time.Minute, keys[1]); err != nil {
		t.Fatal(err)
	}
	// keys[2]'s lease ends and another consumer gets it; the first
	// consumer's late ack is then lost.
	var next *tq.Lease
	deadline := time.Now().Add(10 * time.Second)
	for next == nil || next.Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("an expired lease was not delivered again")
		}
		time.Sleep(50 * time.Millisecond)
		next = mustClaim(t, task, 3)
	}
	if !slices.Equal(next.Keys(), keys[2:]) {
		t.Fatalf("after expiry: %q, want %q (keys[1] was extended)", next.Keys(), keys[2:])
	}
	err := l.Ack(t.Context())
	var lost *tq.LeaseLostError
	if !errors.As(err, &lost) || !errors.Is(err, tq.ErrLeaseLost) {
		t.Fatalf("late ack: %v, want a LeaseLostError", err)
	}
	slices.Sort(lost.Keys)
	if !slices.Equal(lost.Keys, []string{keys[0], keys[2]}) {
		t.Fatalf("late ack lost %q, want %q", lost.Keys, []string{keys[0], keys[2]})
	}
	if err := l.Ack(t.Context(), "not-leased"); !errors.Is(err, tq.ErrInvalid) {
		t.Fatalf("ack of a key not in the lease: %v, want ErrInvalid", err)
	}
	mustAck(t, next)
	if st := mustStatus(t, task); st.Acked != 3 {
		t.Fatalf("status %+v, want 3 acked", st)
	}
}

func consumeDead(t *testing.T, e Engine) {
	c := e.Open(t)
	p := "dead"
	keys := keysN(2)
	putRows(t, c, p, keys, nil, "a")
	task := mustTask(t, c, p, "w", []string{"a"}, tq.MaxDeliveries(1))
	l := mustClaim(t, task, 2)
	if err := l.Nack(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
	dead, err := task.Dead(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 2 || dead[0].Key != keys[0] || dead[0].Deliveries != 1 {
		t.Fatalf("dead rows %+v", dead)
	}
	if st := mustStatus(t, task); st.Dead != 2 {
		t.Fatalf("status %+v, want 2 dead", st)
	}
	if err := task.Retry(t.Context(), keys[0]); err != nil {
		t.Fatal(err)
	}
	if err := task.Drop(t.Context(), keys[1]); err != nil {
		t.Fatal(err)
	}
	if err := task.Retry(t.Context(), keys[1]); !errors.Is(err, tq.ErrLeaseLost) {
		t.Fatalf("retry of a dropped row: %v, want it named", err)
	}
	if err := task.Retry(t.Context(), "unknown"); !errors.Is(err, tq.ErrNotFound) {
		t.Fatalf("retry of an unknown key: %v, want ErrNotFound", err)
	}
	got := mustClaim(t, task, 2)
	if !slices.Equal(got.Keys(), keys[:1]) {
		t.Fatalf("claim after retry: %q", got.Keys())
	}
}

func consumeWaitContext(t *testing.T, e Engine) {
	c := e.Open(t)
	task := mustTask(t, c, "wait", "w", []string{"a"})
	// The Waits run under a label of their own, which the goroutines
	// they start inherit: those are counted, not the goroutines of tests
	// running beside this one.
	label := fmt.Sprintf("tqtest-wait-context-%p", task)
	pprof.Do(t.Context(), pprof.Labels("tqtest", label), func(ctx context.Context) {
		for range 3 {
			wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			_, err := task.Wait(wctx, 1)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Wait on an empty partition: %v, want the context's deadline", err)
			}
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, stacks := labelled(label)
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines the Waits started still run after them:\n%s", n, stacks)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// labelled counts the goroutines whose pprof labels hold label, and
// returns their stacks.
func labelled(label string) (int, string) {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
	n := 0
	var stacks strings.Builder
	for _, rec := range strings.Split(b.String(), "\n\n") {
		if !strings.Contains(rec, label) {
			continue
		}
		k := 1
		for _, line := range strings.Split(rec, "\n") {
			if _, err := fmt.Sscanf(line, "%d @", &k); err == nil {
				break
			}
		}
		n += k
		stacks.WriteString(rec + "\n\n")
	}
	return n, stacks.String()
}

func consumeInvalid(t *testing.T, e Engine) {
	c := e.Open(t)
	p := "invalid"
	putRows(t, c, p, keysN(2), nil, "a")
	bad := []struct {
		name   string
		fields []string
		opts   []tq.TaskOption
	}{
		{"", []string{"a"}, nil},
		{"w", nil, nil},
		{"w", []string{""}, nil},
		{"w", []string{"a"}, []tq.TaskOption{tq.LeaseFor(0)}},
		{"w", []string{"a"}, []tq.TaskOption{tq.LeaseFor(-time.Second)}},
		{"w", []string{"a"}, []tq.TaskOption{tq.MaxDeliveries(0)}},
		{"w", []string{"a"}, []tq.TaskOption{tq.WithGroups(tq.GroupBy{}, 2)}},
		{"w", []string{"a"}, []tq.TaskOption{tq.WithGroups(tq.GroupTag("uid"), 0)}},
		{"w", []string{"a"}, []tq.TaskOption{tq.Ranks(2, 2, "")}},
		{"w", []string{"a"}, []tq.TaskOption{tq.Staleness("", 1, false)}},
		{"w", []string{"a"}, []tq.TaskOption{tq.WithSampler(nil)}},
		{"w", []string{"a"}, []tq.TaskOption{nil}},
	}
	for _, b := range bad {
		if _, err := c.Task(p, b.name, b.fields, b.opts...); !errors.Is(err, tq.ErrInvalid) {
			t.Fatalf("Task(%q, %q, %d options): %v, want ErrInvalid", b.name, b.fields, len(b.opts), err)
		}
	}
	task := mustTask(t, c, p, "w", []string{"a"})
	for _, call := range []struct {
		n    int
		opts []tq.ClaimOption
	}{{0, nil}, {-1, nil}, {2, []tq.ClaimOption{tq.AtLeast(0)}}, {2, []tq.ClaimOption{tq.AtLeast(3)}}, {2, []tq.ClaimOption{nil}}} {
		if _, err := task.Claim(t.Context(), call.n, call.opts...); !errors.Is(err, tq.ErrInvalid) {
			t.Fatalf("Claim(%d, %d options): %v, want ErrInvalid", call.n, len(call.opts), err)
		}
		if _, err := task.Wait(t.Context(), call.n, call.opts...); !errors.Is(err, tq.ErrInvalid) {
			t.Fatalf("Wait(%d, %d options): %v, want ErrInvalid", call.n, len(call.opts), err)
		}
	}
	if err := c.ResetConsumption(t.Context(), p, ""); !errors.Is(err, tq.ErrInvalid) {
		t.Fatalf("ResetConsumption of an empty task: %v, want ErrInvalid", err)
	}
	st, err := c.Status(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Tasks) != 0 {
		t.Fatalf("invalid calls left consumption state: %+v", st.Tasks)
	}
	l := mustClaim(t, task, 2)
	if err := l.Nack(t.Context(), -time.Second); !errors.Is(err, tq.ErrInvalid) {
		t.Fatalf("Nack with a negative delay: %v", err)
	}
	if err := l.Extend(t.Context(), 0); !errors.Is(err, tq.ErrInvalid) {
		t.Fatalf("Extend by 0: %v", err)
	}
	if st := mustStatus(t, task); st.Leased != 2 {
		t.Fatalf("invalid settles changed the lease: %+v", st)
	}
}

func consumeWithData(t *testing.T, e Engine) {
	c := e.Open(t)
	p := "data"
	keys := keysN(3)
	putRows(t, c, p, keys, nil, "a", "b")
	task := mustTask(t, c, p, "w", []string{"a"})
	l := mustClaim(t, task, 3, tq.WithData("a", "b"))
	for _, f := range []string{"a", "b"} {
		rows, err := tq.RowsAs[float32](l.Data[f])
		if err != nil {
			t.Fatalf("field %s: %v", f, err)
		}
		for i, r := range rows {
			if !slices.Equal(r, []float32{float32(i), 1}) {
				t.Fatalf("field %s row %d: %v", f, i, r)
			}
		}
	}
	byMeta, err := c.BatchGetByMeta(t.Context(), l.Meta, "a")
	if err != nil {
		t.Fatal(err)
	}
	if byMeta.Len() != 3 {
		t.Fatalf("BatchGetByMeta of a lease read %d rows", byMeta.Len())
	}
	mustAck(t, l)
}

func consumeStatusAndClear(t *testing.T, e Engine) {
	c := e.Open(t)
	p := "status"
	keys := keysN(4)
	putRows(t, c, p, keys, nil, "a")
	putRows(t, c, p, keys[:1], nil, "b")
	task := mustTask(t, c, p, "w", []string{"a"})
	l := mustClaim(t, task, 2)
	mustAck(t, l, keys[0])
	st, err := c.Status(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows != 4 || st.Fields["a"] != 4 || st.Fields["b"] != 1 {
		t.Fatalf("production: %+v", st)
	}
	if ts := st.Tasks["w"]; ts.Acked != 1 || ts.Leased != 1 || ts.Ready != 2 {
		t.Fatalf("consumption: %+v", ts)
	}
	if err := c.Clear(t.Context(), p, keys[1:2]); err != nil {
		t.Fatal(err)
	}
	if ts := mustStatus(t, task); ts.Leased != 0 || ts.Acked != 1 || ts.Ready != 2 {
		t.Fatalf("after clearing the leased row: %+v", ts)
	}
	if err := l.Ack(t.Context(), keys[1]); !errors.Is(err, tq.ErrLeaseLost) {
		t.Fatalf("ack of a cleared row: %v, want ErrLeaseLost", err)
	}
	if err := c.ClearPartition(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	st, err = c.Status(t.Context(), p)
	if err != nil || st.Rows != 0 || len(st.Tasks) != 0 {
		t.Fatalf("after ClearPartition: %+v, %v", st, err)
	}
}

func consumeReset(t *testing.T, e Engine) {
	c := e.Open(t)
	p := "reset"
	keys := keysN(3)
	putRows(t, c, p, keys, nil, "a")
	task := mustTask(t, c, p, "w", []string{"a"})
	mustAck(t, mustClaim(t, task, 3))
	if err := c.ResetConsumption(t.Context(), p, "w", keys[1]); err != nil {
		t.Fatal(err)
	}
	if l := mustClaim(t, task, 3); !slices.Equal(l.Keys(), keys[1:2]) || l.Deliveries[0] != 1 {
		t.Fatalf("claim after a reset of one key: %q %v", l.Keys(), l.Deliveries)
	}
	if err := c.ResetConsumption(t.Context(), p, "w", "unknown"); !errors.Is(err, tq.ErrNotFound) {
		t.Fatalf("reset of an unknown key: %v, want ErrNotFound", err)
	}
	if err := c.ResetConsumption(t.Context(), p, "w"); err != nil {
		t.Fatal(err)
	}
	if l := mustClaim(t, task, 3); !slices.Equal(l.Keys(), keys) {
		t.Fatalf("claim after a reset of the task: %q", l.Keys())
	}
}

// consumeResetThenWait: a consumer holds a lease when another client
// resets the task; its Ack reports every row lost, and since every row is
// ready again, its next Wait leases them at once.
func consumeResetThenWait(t *testing.T, e Engine) {
	p := "reset-wait"
	other, mine := e.Open(t), e.Open(t)
	keys := keysN(3)
	putRows(t, other, p, keys, nil, "a")
	task := mustTask(t, mine, p, "w", []string{"a"})
	l := mustClaim(t, task, 3)
	if !slices.Equal(l.Keys(), keys) {
		t.Fatalf("claim: %q, want %q", l.Keys(), keys)
	}
	if err := other.ResetConsumption(t.Context(), p, "w"); err != nil {
		t.Fatal(err)
	}
	err := l.Ack(t.Context())
	var lost *tq.LeaseLostError
	if !errors.As(err, &lost) {
		t.Fatalf("ack after another client reset the task: %v, want a LeaseLostError", err)
	}
	if got := slices.Sorted(slices.Values(lost.Keys)); !slices.Equal(got, keys) {
		t.Fatalf("ack after a reset lost %q, want %q", got, keys)
	}
	if st := mustStatus(t, task); st.Ready != 3 {
		t.Fatalf("status after the reset: %+v, want 3 ready", st)
	}
	// Every row is ready: the Wait must not block (the engine's idle
	// re-check, once a second, must not be what ends it either).
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	start := time.Now()
	l, err = task.Wait(ctx, 3)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("Wait(3) with 3 rows ready, after a reset: %v after %v", err, took.Round(time.Millisecond))
	}
	if !slices.Equal(l.Keys(), keys) || !slices.Equal(l.Deliveries, []int{1, 1, 1}) {
		t.Fatalf("Wait after a reset: %q deliveries %v, want %q delivered once", l.Keys(), l.Deliveries, keys)
	}
	if took > 900*time.Millisecond {
		t.Fatalf("Wait(3) with 3 rows ready returned after %v, not at once", took.Round(time.Millisecond))
	}
	mustAck(t, l)
}

// consumeRanksClearedRow: rank 0 takes its share of a batch; a row of the
// batch is cleared (one of rank 0's, or one of the rows left for rank 1);
// rank 1's share is then disjoint from rank 0's, and the two with the
// cleared row cover the batch.
func consumeRanksClearedRow(t *testing.T, e Engine) {
	for _, whose := range []int{0, 1} {
		p := fmt.Sprintf("ranks-cleared-%d", whose)
		producer := e.Open(t)
		batch := keysN(4)
		putRows(t, producer, p, batch, nil, "a")
		var ranks [2]*tq.Task
		for r := range ranks {
			ranks[r] = mustTask(t, e.Open(t), p, "train", []string{"a"}, tq.Ranks(2, r, ""))
		}
		s0 := mustClaim(t, ranks[0], len(batch)).Keys()
		if len(s0) != 2 {
			t.Fatalf("rank 0's share of a batch of 4: %q", s0)
		}
		var rest []string
		for _, k := range batch {
			if !slices.Contains(s0, k) {
				rest = append(rest, k)
			}
		}
		cleared := s0[0]
		if whose == 1 {
			cleared = rest[0]
		}
		if err := producer.Clear(t.Context(), p, []string{cleared}); err != nil {
			t.Fatal(err)
		}
		s1 := mustClaim(t, ranks[1], len(batch)).Keys()
		want := slices.DeleteFunc(slices.Clone(rest), func(k string) bool { return k == cleared })
		if got := slices.Sorted(slices.Values(s1)); !slices.Equal(got, want) {
			t.Fatalf("a row of rank %d's share cleared: rank 0 took %q, rank 1 got %q, want %q (the batch %q less rank 0's share and %s)",
				whose, s0, s1, want, batch, cleared)
		}
	}
}

// consumeSequentialAfterCommit: client B looked at the partition before
// client A's commits (its BatchPuts returned); B's Sequential claims then
// lease the oldest ready row first, and a claim of 3 with 2 rows ready
// leases both. B looks at an empty partition, at one that holds a row
// already, and at one whose oldest row lacks the task's field until A
// commits it.
func consumeSequentialAfterCommit(t *testing.T, e Engine) {
	a, b := e.Open(t), e.Open(t)
	p := "after-commit"
	task := mustTask(t, b, p, "w", []string{"a"})
	if l := mustClaim(t, task, 1); l.Len() != 0 {
		t.Fatalf("claim of an empty partition: %q", l.Keys())
	}
	mustList(t, b, p)
	putRows(t, a, p, []string{"r0"}, nil, "a")
	putRows(t, a, p, []string{"r1"}, nil, "a")
	if l := mustClaim(t, task, 1); !slices.Equal(l.Keys(), []string{"r0"}) {
		t.Fatalf("claim of 1 with r0 and r1 ready (put in that order): %q, want the oldest, r0", l.Keys())
	}
	if l := mustClaim(t, task, 3); !slices.Equal(l.Keys(), []string{"r1"}) {
		t.Fatalf("claim of 3 with r1 ready: %q, want r1", l.Keys())
	}

	p = "after-commit-2"
	task = mustTask(t, b, p, "w", []string{"a"})
	putRows(t, a, p, []string{"r0"}, nil, "a")
	if rows := mustList(t, b, p).Keys(); !slices.Equal(rows, []string{"r0"}) {
		t.Fatalf("B lists %q, want r0", rows)
	}
	putRows(t, a, p, []string{"r1"}, nil, "a")
	if l := mustClaim(t, task, 3); !slices.Equal(l.Keys(), []string{"r0", "r1"}) {
		t.Fatalf("claim of 3 with r0 and r1 ready, r1 put after B listed r0: %q, want both", l.Keys())
	}

	// r0 becomes ready (A commits its field a) after B saw it without.
	p = "after-commit-3"
	task = mustTask(t, b, p, "w", []string{"a"})
	putRows(t, a, p, []string{"r0"}, nil, "b")
	putRows(t, a, p, []string{"r1"}, nil, "a")
	if rows := mustList(t, b, p).Keys(); !slices.Equal(rows, []string{"r0", "r1"}) {
		t.Fatalf("B lists %q, want r0 and r1", rows)
	}
	putRows(t, a, p, []string{"r0"}, nil, "a")
	if l := mustClaim(t, task, 1); !slices.Equal(l.Keys(), []string{"r0"}) {
		t.Fatalf("claim of 1 with r0 and r1 ready, r0's field put after B listed it: %q, want the oldest, r0", l.Keys())
	}
}

// consumeConsumptionAfterNack: the engine's Consumption (and Status)
// report rows a Nack returned (ready, their delivery count kept, the
// token that returned them named, a delayed one's Until set) and rows
// that went dead.
func consumeConsumptionAfterNack(t *testing.T, e Engine) {
	if e.Meta == nil {
		t.Skip("the engine gives no MetaStore to ask")
	}
	c := e.Open(t)
	p := "nack-consumption"
	keys := keysN(3)
	putRows(t, c, p, keys, nil, "a")
	task := mustTask(t, c, p, "w", []string{"a"}, tq.MaxDeliveries(2))
	l := mustClaim(t, task, 3)
	index := map[uint64]string{}
	for _, r := range l.Meta.Rows {
		index[r.Index] = r.Key
	}
	deliveries := func() map[string]metadata.Delivery {
		t.Helper()
		cons, err := e.Meta.Consumption(t.Context(), p, "w")
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]metadata.Delivery{}
		for _, d := range cons["w"] {
			out[index[d.Index]] = d
		}
		return out
	}
	held := deliveries()
	token := held[keys[0]].Lease
	for _, k := range keys {
		if d := held[k]; d.State != metadata.Leased || d.Lease == "" || d.Lease != token || d.Deliveries != 1 {
			t.Fatalf("%s while leased: %+v, want leased once to one token", k, d)
		}
	}
	before := time.Now()
	if err := l.Nack(t.Context(), time.Hour, keys[0]); err != nil {
		t.Fatal(err)
	}
	if err := l.Nack(t.Context(), 0, keys[1]); err != nil {
		t.Fatal(err)
	}
	ds := deliveries()
	if d := ds[keys[0]]; d.State != metadata.Ready || d.Deliveries != 1 || d.Lease != token ||
		d.Until.Before(before.Add(59*time.Minute)) || d.Until.After(time.Now().Add(61*time.Minute)) {
		t.Fatalf("%s after Nack(1h): %+v, want ready, delivered once, returned by %s, until in an hour", keys[0], d, token)
	}
	if d := ds[keys[1]]; d.State != metadata.Ready || d.Deliveries != 1 || d.Lease != token || !d.Until.IsZero() {
		t.Fatalf("%s after Nack(0): %+v, want ready, delivered once, returned by %s, no until", keys[1], d, token)
	}
	if d := ds[keys[2]]; d.State != metadata.Leased || d.Lease != token {
		t.Fatalf("%s, not nacked: %+v, want still leased to %s", keys[2], d, token)
	}
	if st := mustStatus(t, task); st.Ready != 2 || st.Leased != 1 {
		t.Fatalf("status after two nacks: %+v, want 2 ready and 1 leased", st)
	}
	// keys[1] again (keys[0] waits out its delay): its second delivery,
	// returned, makes it dead.
	again := mustClaim(t, task, 3)
	if !slices.Equal(again.Keys(), keys[1:2]) || again.Deliveries[0] != 2 {
		t.Fatalf("claim after the nacks: %q deliveries %v, want [%s] delivered twice", again.Keys(), again.Deliveries, keys[1])
	}
	token2 := deliveries()[keys[1]].Lease
	if err := again.Nack(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
	ds = deliveries()
	if d := ds[keys[1]]; d.State != metadata.Dead || d.Deliveries != 2 || d.Lease == "" || d.Lease != token2 {
		t.Fatalf("%s nacked at its MaxDeliveries: %+v, want dead, delivered twice, returned by %s", keys[1], d, token2)
	}
	st, err := c.Status(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	if ts := st.Tasks["w"]; ts.Ready != 1 || ts.Dead != 1 || ts.Leased != 1 {
		t.Fatalf("Status after a row went dead: %+v, want 1 ready, 1 dead, 1 leased", ts)
	}
	dead, err := task.Dead(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0].Key != keys[1] || dead[0].Deliveries != 2 {
		t.Fatalf("dead rows %+v, want %s delivered twice", dead, keys[1])
	}
}
