package redis_test

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/tq"
)

// rewind is a way for a partition's metadata to go back to an earlier
// state while clients have replayed past it: a failover to a replica that
// lagged, or a log put back by hand.
type rewind struct {
	url string // the clients' URL, prefix rewindPrefix
	// mark is called once the partition holds its first rows: the state
	// rewind goes back to.
	mark func(t *testing.T)
	// back puts the state marked back; clients keep their views.
	back func(t *testing.T)
	// server is a client of the server the clients use now.
	server func(t *testing.T) goredis.Cmdable
}

const (
	rewindPrefix = "rw"
	rewindPart   = "p"
	rewindLog    = rewindPrefix + ":{" + rewindPrefix + ":" + rewindPart + "}:log"
)

// logEnd returns how many entries the partition's log stream holds and
// the record ID of its last: logs of the same length hold other records
// when their last record IDs differ.
func logEnd(t *testing.T, c goredis.Cmdable) (int64, string) {
	t.Helper()
	ctx := t.Context()
	n, err := c.XLen(ctx, rewindLog).Result()
	must(t, "XLEN", err)
	last, err := c.XRevRangeN(ctx, rewindLog, "+", "-", 1).Result()
	must(t, "XREVRANGE", err)
	if len(last) == 0 {
		return n, ""
	}
	return n, fmt.Sprint(last[0].Values["i"])
}

// must fails t on err.
func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// listing is a client's List of the partition, a line per row: key,
// index and fields.
func listing(t *testing.T, c *tq.Client, who string) []string {
	t.Helper()
	m, err := c.List(t.Context(), rewindPart)
	must(t, who+": List", err)
	out := make([]string, len(m.Rows))
	for i, r := range m.Rows {
		out[i] = fmt.Sprintf("%s@%d%v", r.Key, r.Index, slices.Sorted(maps.Keys(r.Fields)))
	}
	return out
}

// listedKeys returns the keys of listing's lines.
func listedKeys(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i], _, _ = strings.Cut(l, "@")
	}
	return out
}

// wantValues checks that c reads keys[from:to] with the values that
// rollout(keys, seed) gives them.
func wantValues(t *testing.T, c *tq.Client, who string, keys []string, from, to, seed int) {
	t.Helper()
	b, err := c.BatchGet(t.Context(), rewindPart, keys[from:to])
	must(t, fmt.Sprintf("%s: BatchGet %v", who, keys[from:to]), err)
	rows := make([]int, 0, to-from)
	for i := from; i < to; i++ {
		rows = append(rows, i)
	}
	checkRollout(t, b, keys, seed, rows)
}

// wantNotFound checks that c's read of keys finds no such keys.
func wantNotFound(t *testing.T, c *tq.Client, who string, keys []string) {
	t.Helper()
	if _, err := c.BatchGet(t.Context(), rewindPart, keys); !errors.Is(err, tq.ErrNotFound) {
		t.Fatalf("%s: BatchGet %v of keys the log lacks: %v, want ErrNotFound", who, keys, err)
	}
}

// put writes rollout(keys, seed) and fails t if c does not return nil.
func put(t *testing.T, c *tq.Client, who string, keys []string, seed int) {
	t.Helper()
	must(t, fmt.Sprintf("%s: BatchPut %v", who, keys), c.BatchPut(t.Context(), rewindPart, keys, rollout(keys, seed), nil))
}

// testRewind runs clients through a partition whose metadata rw puts
// back to an earlier state while some of them have replayed past it:
//
//  1. a writes k000-k019; b, c, e, g and h read them; rw.mark.
//  2. a overwrites k000-k009, adds n000-n009 and clears k019 (seven
//     records the marked state lacks); c, e, g and h read that: their
//     views and a's are ahead of the marked state.
//  3. rw.back.
//  4. c's next call, a List, shows exactly the marked rows: its view is
//     longer than the log. h's, a read of n005-n009 (which its view
//     holds, answered from that view if the log check let it), finds no
//     such keys.
//  5. b, whose view is the marked state, adds m000-m009 in two puts and
//     clears k018, then Reclaims until the log is as long as a's and e's
//     views again, with other records: only the records' IDs tell them
//     apart.
//  6. e's next call, a List, shows what b's shows; g's, a read of
//     n005-n009, finds no such keys (the log gave m005-m009 the indexes
//     g's view has for them: a read from that view reads m's values).
//     a's next call, a put over k000-k004 against its stale view,
//     succeeds, and every client reads its values; a also puts n000-n004
//     again (rows its stale view has at indexes the log never gave them).
//  7. every client puts rows of its own from several goroutines at once:
//     none may fail (no contention error either).
//  8. every client, and a fresh one, lists the same rows and reads the
//     values last put: nothing of step 2 but what was put again.
//
// Every other call must return nil: none needs to fail, so any error
// fails the test, as does a put against a stale view that returns nil
// and loses its value (seen in step 8).
func testRewind(t *testing.T, rw rewind) {
	ctx := t.Context()
	open := func() *tq.Client { return openTQ(t, rw.url) }
	a, b, c, e, g, h := open(), open(), open(), open(), open(), open()
	ks := keyRange("k", 20)
	ns := keyRange("n", 10)
	ms := keyRange("m", 10)

	// 1.
	put(t, a, "a", ks, 1)
	marked := listing(t, a, "a")
	for who, cl := range map[string]*tq.Client{"b": b, "c": c, "e": e, "g": g, "h": h} {
		if got := listing(t, cl, who); !slices.Equal(got, marked) {
			t.Fatalf("before the rewind, %s lists %v, a %v", who, got, marked)
		}
	}
	rw.mark(t)

	// 2.
	put(t, a, "a", ks[:10], 2)
	put(t, a, "a", ns, 2)
	must(t, "a: Clear", a.Clear(ctx, rewindPart, ks[19:]))
	ahead := listing(t, a, "a")
	if len(ahead) != len(ks)+len(ns)-1 {
		t.Fatalf("a lists %d rows before the rewind, want %d", len(ahead), len(ks)+len(ns)-1)
	}
	for who, cl := range map[string]*tq.Client{"c": c, "e": e, "g": g, "h": h} {
		if got := listing(t, cl, who); !slices.Equal(got, ahead) {
			t.Fatalf("before the rewind, %s lists %v, a %v", who, got, ahead)
		}
		wantValues(t, cl, who, ns, 5, 10, 2)
	}
	aheadLen, aheadHead := logEnd(t, rw.server(t))

	// 3.
	rw.back(t)
	if n, _ := logEnd(t, rw.server(t)); n >= aheadLen {
		t.Fatalf("after the rewind the log holds %d entries, want fewer than %d", n, aheadLen)
	}

	// 4.
	if got := listing(t, c, "c"); !slices.Equal(got, marked) {
		t.Fatalf("after the rewind, c (view ahead, log shorter) lists\n%v\nthe log holds\n%v", got, marked)
	}

	wantNotFound(t, h, "h", ns[5:])

	// 5.
	put(t, b, "b", ms[:5], 5)
	put(t, b, "b", ms[5:], 6)
	must(t, "b: Clear", b.Clear(ctx, rewindPart, ks[18:19]))
	// Records that change nothing (aborts that find nothing to abort), so
	// that b's entries are as many as a's.
	n, head := logEnd(t, rw.server(t))
	for ; n < aheadLen; n, head = logEnd(t, rw.server(t)) {
		if _, err := b.Reclaim(ctx, rewindPart, time.Hour); err != nil {
			t.Fatalf("b: Reclaim: %v", err)
		}
		if m, _ := logEnd(t, rw.server(t)); m == n {
			t.Fatalf("test setup: a Reclaim appended nothing to a log of %d entries", n)
		}
	}
	if n != aheadLen || head == aheadHead {
		t.Fatalf("test setup: log of %d entries, last %s after b's writes; want %d entries (as a's view) and another last than %s", n, head, aheadLen, aheadHead)
	}
	now := listing(t, b, "b")

	// 6.
	if got := listing(t, e, "e"); !slices.Equal(got, now) {
		t.Fatalf("after the rewind, e (view ahead, log as long) lists\n%v\nb lists\n%v", got, now)
	}
	wantNotFound(t, g, "g", ns[5:])
	put(t, a, "a", ks[:5], 3)
	for who, cl := range map[string]*tq.Client{"a": a, "b": b, "c": c, "e": e, "g": g, "h": h} {
		wantValues(t, cl, who, ks[:5], 0, 5, 3)
	}
	put(t, a, "a", ns[:5], 4)

	// 7.
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	own := map[string][]string{}
	for who, cl := range map[string]*tq.Client{"a": a, "b": b, "c": c, "e": e} {
		for n := range 2 {
			keys := keyRange(fmt.Sprintf("x%s%d-", who, n), 4)
			own[who+fmt.Sprint(n)] = keys
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range keys {
					if err := cl.BatchPut(ctx, rewindPart, keys[i:i+1], rollout(keys[i:i+1], 7), nil); err != nil {
						errs <- fmt.Errorf("%s: BatchPut %v: %w", who, keys[i:i+1], err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, "concurrent puts", err)
	}

	// 8.
	want := slices.Concat(ks[:18], ks[19:], ns[:5], ms)
	for _, keys := range own {
		want = append(want, keys...)
	}
	slices.Sort(want)
	f := open()
	final := listing(t, f, "fresh")
	if got := slices.Sorted(slices.Values(listedKeys(final))); !slices.Equal(got, want) {
		t.Fatalf("a fresh client lists keys %v, want %v", got, want)
	}
	for who, cl := range map[string]*tq.Client{"a": a, "b": b, "c": c, "e": e, "g": g, "h": h, "fresh": f} {
		if got := listing(t, cl, who); !slices.Equal(got, final) {
			t.Fatalf("%s lists\n%v\na fresh client\n%v", who, got, final)
		}
		wantValues(t, cl, who, ks[:5], 0, 5, 3)
		wantValues(t, cl, who, ks, 5, 18, 1)
		wantValues(t, cl, who, ks, 19, 20, 1)
		wantValues(t, cl, who, ns[:5], 0, 5, 4)
		wantValues(t, cl, who, ms[:5], 0, 5, 5)
		wantValues(t, cl, who, ms[5:], 0, 5, 6)
		for _, keys := range own {
			for i := range keys {
				wantValues(t, cl, who, keys[i:i+1], 0, 1, 7)
			}
		}
	}
}
