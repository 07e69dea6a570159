package redis_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/internal/redistest"
)

// The Log's behaviours (backends.Log, backends.LogCells), each run on a
// standalone server, on the cluster-safe path of a standalone server, and
// on a three-master Cluster.

// logEnv is a server and how to open Logs on it.
type logEnv struct {
	name    string
	url     string // without parameters
	opts    []redis.Option
	cluster bool // the Cluster path (no LogCells)
}

// open returns a Log under prefix, closed with t, and its Store.
func (e *logEnv) open(t testing.TB, prefix string, opts ...redis.Option) (backends.Log, *redis.Store) {
	t.Helper()
	return openLog(t, e.url+"?prefix="+prefix, append(slices.Clone(e.opts), opts...)...)
}

// openLog opens a Store at url and takes its Log, all closed with t.
func openLog(t testing.TB, url string, opts ...redis.Option) (backends.Log, *redis.Store) {
	t.Helper()
	s, err := redis.OpenURL(context.Background(), url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	l := s.Log()
	t.Cleanup(func() {
		l.Close()
		s.Close()
		s.Log().Close()
	})
	return l, s
}

// logKey is the key of partition p's stream (or snapshot, suffix "snap")
// under prefix, as LAYOUT.md section 9 names it.
func logKey(prefix, p, suffix string) string {
	return prefix + ":{" + prefix + ":" + p + "}:" + suffix
}

// rec is a record of random ID with data and indexes.
func rec(data string, indexes uint64) backends.Record {
	return backends.Record{ID: rand.Uint64() | 1, Indexes: indexes, Data: []byte(data)}
}

// wantEntries checks that got are entries n, n+1, ... holding recs (Data
// nil when own: the caller's own appended records).
func wantEntries(t *testing.T, what string, got []backends.Entry, n uint64, recs []backends.Record, own bool) {
	t.Helper()
	if len(got) != len(recs) {
		t.Fatalf("%s: %d entries, want %d", what, len(got), len(recs))
	}
	for i, e := range got {
		if e.N != n+uint64(i) || e.ID != recs[i].ID {
			t.Fatalf("%s: entry %d is (%d, %x), want (%d, %x)", what, i, e.N, e.ID, n+uint64(i), recs[i].ID)
		}
		switch {
		case own && e.Data != nil:
			t.Errorf("%s: own entry %d has data %q, want nil", what, e.N, e.Data)
		case !own && !bytes.Equal(e.Data, recs[i].Data):
			t.Errorf("%s: entry %d has data %q, want %q", what, e.N, e.Data, recs[i].Data)
		}
		if now := time.Now().UnixMicro(); e.Time < now-60e6 || e.Time > now+1e6 {
			t.Errorf("%s: entry %d stamped %d, now is %d", what, e.N, e.Time, now)
		}
	}
}

// appendOK appends recs and fails t on an error.
func appendOK(t *testing.T, l backends.Log, p string, from backends.Pos, recs ...backends.Record) backends.Tail {
	t.Helper()
	tail, err := l.Append(t.Context(), p, from, recs)
	if err != nil {
		t.Fatalf("Append(%s, %v): %v", p, from, err)
	}
	return tail
}

// endOf is t.End(from), of a t that is not addressable.
func endOf(t backends.Tail, from backends.Pos) backends.Pos { return t.End(from) }

func readOK(t *testing.T, l backends.Log, p string, from backends.Pos) backends.Tail {
	t.Helper()
	tail, err := l.Read(t.Context(), p, from, 0)
	if err != nil {
		t.Fatalf("Read(%s, %v): %v", p, from, err)
	}
	return tail
}

// logEnvs starts the server kinds a Log runs on: a standalone server
// (with and without the engine's direct connections, and taking the
// Cluster path) and, unless -short, a Cluster.
func logEnvs(t *testing.T) []*logEnv {
	srv := redistest.Start(t)
	envs := []*logEnv{
		{name: "standalone", url: srv.URL()},
		{name: "standalone goredis", url: srv.URL(), opts: []redis.Option{redis.WithDirectConnections(false)}},
		{name: "cluster path", url: srv.URL(), opts: []redis.Option{redis.WithClusterSafe()}, cluster: true},
	}
	if !testing.Short() {
		c := redistest.StartCluster(t)
		envs = append(envs, &logEnv{name: "cluster", url: c.URL(), cluster: true})
	}
	return envs
}

// TestLogBehaviours runs the table of Log behaviours on each server kind.
func TestLogBehaviours(t *testing.T) {
	envs := logEnvs(t)
	n := 0
	for _, e := range envs {
		t.Run(e.name, func(t *testing.T) {
			for _, b := range logBehaviours {
				t.Run(b.name, func(t *testing.T) {
					n++
					b.run(t, e, fmt.Sprintf("lb%d", n))
				})
			}
		})
	}
}

var logBehaviours = []struct {
	name string
	run  func(t *testing.T, e *logEnv, prefix string)
}{
	{"Numbering", testLogNumbering},
	{"AppendAfterOthers", testLogAppendAfterOthers},
	{"TailCases", testLogTailCases},
	{"Compaction", testLogCompaction},
	{"Emptied", testLogEmptied},
	{"Indexes", testLogIndexes},
	{"Resend", testLogResend},
	{"Partitions", testLogPartitions},
	{"TimeOffset", testLogTimeOffset},
	{"WrongType", testLogWrongType},
	{"Invalid", testLogInvalid},
	{"Concurrent", testLogConcurrent},
	{"WaitWakes", testLogWaitWakes},
	{"WaitTimesOut", testLogWaitTimesOut},
	{"WaitFromNothing", testLogWaitFromNothing},
	{"WaitRestart", testLogWaitRestart},
	{"CloseEndsWait", testLogCloseEndsWait},
	{"ContextEndsWait", testLogContextEndsWait},
	{"RoundTrips", testLogRoundTrips},
	{"Cells", testLogCells},
	{"Layout", testLogLayout},
	{"ScriptsFlushed", testLogScriptsFlushed},
}

// Numbering: entries are numbered from 1, densely, the appended ones
// come last with Data nil, and a Read gives them with their data.
func testLogNumbering(t *testing.T, e *logEnv, prefix string) {
	l, _ := e.open(t, prefix)
	recs := []backends.Record{rec("a", 0), rec("bb", 0), rec("", 0)}
	tail := appendOK(t, l, "p", backends.Pos{}, recs...)
	if tail.Restart {
		t.Fatalf("Append from the start of a new log: Restart")
	}
	wantEntries(t, "append", tail.Entries, 1, recs, true)
	at := tail.Entries[0].Time
	for _, x := range tail.Entries {
		if x.Time != at {
			t.Errorf("entries of one Append stamped %d and %d", at, x.Time)
		}
	}
	got := readOK(t, l, "p", backends.Pos{})
	wantEntries(t, "read", got.Entries, 1, recs, false)
	if got.Entries[2].Data == nil {
		t.Errorf("an empty record reads as nil data, want empty")
	}
	for i := range got.Entries {
		if got.Entries[i].Time != tail.Entries[i].Time {
			t.Errorf("entry %d: Append said time %d, Read says %d", i+1, tail.Entries[i].Time, got.Entries[i].Time)
		}
	}
	more := []backends.Record{rec("d", 0)}
	tail = appendOK(t, l, "p", tail.End(backends.Pos{}), more...)
	wantEntries(t, "second append", tail.Entries, 4, more, true)
	if tail.Entries[0].Time < at {
		t.Errorf("a later append stamped %d, before %d", tail.Entries[0].Time, at)
	}
}

// AppendAfterOthers: an Append from an old position returns what others
// appended since, then its own entries.
func testLogAppendAfterOthers(t *testing.T, e *logEnv, prefix string) {
	a, _ := e.open(t, prefix)
	b, _ := e.open(t, prefix)
	first := []backends.Record{rec("a1", 0), rec("a2", 0)}
	appendOK(t, a, "p", backends.Pos{}, first...)
	mine := []backends.Record{rec("b1", 0)}
	tail := appendOK(t, b, "p", backends.Pos{}, mine...)
	if tail.Restart {
		t.Fatal("Restart reading from the start of a log that holds its first entry")
	}
	wantEntries(t, "others", tail.Entries[:2], 1, first, false)
	wantEntries(t, "own", tail.Entries[2:], 3, mine, true)
	p1 := backends.Pos{N: 1, ID: first[0].ID}
	tail = appendOK(t, a, "p", p1, rec("a3", 0))
	if len(tail.Entries) != 3 || tail.Entries[0].N != 2 || tail.Entries[2].N != 4 {
		t.Fatalf("append from entry 1: entries %v, want 2..4", tail.Entries)
	}
}

// TailCases: what a Read returns from each kind of position.
func testLogTailCases(t *testing.T, e *logEnv, prefix string) {
	l, _ := e.open(t, prefix)
	// No log at all.
	if got := readOK(t, l, "none", backends.Pos{}); got.Restart || len(got.Entries) != 0 {
		t.Errorf("no log from the start: %+v, want an empty tail", got)
	}
	got := readOK(t, l, "none", backends.Pos{N: 3, ID: 7})
	if !got.Restart || got.Snapshot != nil || got.Start != (backends.Pos{}) || len(got.Entries) != 0 {
		t.Errorf("no log from entry 3: %+v, want a Restart to the empty state", got)
	}
	recs := []backends.Record{rec("a", 0), rec("b", 0), rec("c", 0)}
	tail := appendOK(t, l, "p", backends.Pos{}, recs...)
	end := tail.End(backends.Pos{})
	if got := readOK(t, l, "p", end); got.Restart || len(got.Entries) != 0 {
		t.Errorf("from the end: %+v, want an empty tail", got)
	}
	got = readOK(t, l, "p", backends.Pos{N: 2, ID: recs[1].ID})
	if got.Restart {
		t.Fatal("from entry 2: Restart")
	}
	wantEntries(t, "from entry 2", got.Entries, 3, recs[2:], false)
	for _, from := range []backends.Pos{
		{N: 2, ID: recs[1].ID + 2}, // another record at that number
		{N: 9, ID: recs[1].ID},     // past the end
		{N: 3, ID: 0},
	} {
		got := readOK(t, l, "p", from)
		if !got.Restart || got.Snapshot != nil || got.Start != (backends.Pos{}) {
			t.Errorf("from %v: %+v, want a Restart from the empty state", from, got)
			continue
		}
		wantEntries(t, fmt.Sprintf("restart from %v", from), got.Entries, 1, recs, false)
		if got.End(from) != end {
			t.Errorf("restart from %v ends at %v, want %v", from, got.End(from), end)
		}
	}
}

// Compaction: a snapshot replaces the entries before its position, which
// stays; readers behind it restart from the snapshot; an older or equal
// snapshot, or one at a position the log does not hold, changes nothing.
func testLogCompaction(t *testing.T, e *logEnv, prefix string) {
	l, s := e.open(t, prefix)
	ctx := t.Context()
	var recs []backends.Record
	for i := range 6 {
		recs = append(recs, rec("r"+strconv.Itoa(i), 0))
	}
	appendOK(t, l, "p", backends.Pos{}, recs...)
	pos := func(n int) backends.Pos { return backends.Pos{N: uint64(n), ID: recs[n-1].ID} }
	if err := l.Compact(ctx, "p", pos(3), []byte("state@3")); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Client().XLen(ctx, logKey(prefix, "p", "log")).Result(); err != nil || n != 4 {
		t.Fatalf("stream after compacting at 3: %d entries (%v), want 4 (3 to 6)", n, err)
	}
	for _, from := range []backends.Pos{{}, pos(2), {N: 3, ID: 1}} {
		got := readOK(t, l, "p", from)
		if !got.Restart || string(got.Snapshot) != "state@3" || got.Start != pos(3) {
			t.Fatalf("from %v after compaction: restart %v snapshot %q start %v, want the snapshot at 3", from, got.Restart, got.Snapshot, got.Start)
		}
		wantEntries(t, "after the snapshot", got.Entries, 4, recs[3:], false)
	}
	got := readOK(t, l, "p", pos(3))
	if got.Restart {
		t.Fatal("from the snapshot's own position: Restart")
	}
	wantEntries(t, "from 3", got.Entries, 4, recs[3:], false)
	// Changes nothing: an older snapshot, the same position again, a
	// position the log does not hold, a position trimmed away.
	for _, c := range []struct {
		at   backends.Pos
		snap string
	}{{pos(2), "older"}, {pos(3), "again"}, {backends.Pos{N: 5, ID: 1}, "other"}, {backends.Pos{N: 9, ID: 1}, "past"}, {backends.Pos{}, "start"}} {
		if err := l.Compact(ctx, "p", c.at, []byte(c.snap)); err != nil {
			t.Fatal(err)
		}
	}
	if got := readOK(t, l, "p", backends.Pos{}); string(got.Snapshot) != "state@3" || len(got.Entries) != 3 {
		t.Fatalf("after compactions that change nothing: snapshot %q and %d entries, want state@3 and 3", got.Snapshot, len(got.Entries))
	}
	// A newer one, at the last entry: the stream keeps that entry alone.
	if err := l.Compact(ctx, "p", pos(6), []byte{}); err != nil {
		t.Fatal(err)
	}
	got = readOK(t, l, "p", pos(1))
	if !got.Restart || got.Snapshot == nil || len(got.Snapshot) != 0 || got.Start != pos(6) || len(got.Entries) != 0 {
		t.Fatalf("after an empty snapshot at 6: %+v, want a Restart to an empty (not nil) snapshot at 6", got)
	}
	tail := appendOK(t, l, "p", pos(6), rec("r7", 0))
	if len(tail.Entries) != 1 || tail.Entries[0].N != 7 {
		t.Fatalf("append after compaction: %+v, want entry 7", tail.Entries)
	}
}

// Emptied: a nil snapshot empties the log if the position is its last
// entry: the keys stay an hour (expiring), the partition leaves the
// registry, readers elsewhere restart from the empty state there, and
// numbering goes on; an append makes the keys persist and registers it.
func testLogEmptied(t *testing.T, e *logEnv, prefix string) {
	l, s := e.open(t, prefix)
	ctx := t.Context()
	recs := []backends.Record{rec("a", 0), rec("b", 0)}
	appendOK(t, l, "p", backends.Pos{}, recs...)
	if err := l.Compact(ctx, "p", backends.Pos{N: 1, ID: recs[0].ID}, nil); err != nil {
		t.Fatal(err)
	}
	if err := l.Compact(ctx, "p", backends.Pos{N: 2, ID: recs[0].ID}, nil); err != nil {
		t.Fatal(err)
	}
	if got := readOK(t, l, "p", backends.Pos{}); len(got.Entries) != 2 {
		t.Fatalf("an empty at a position that is not the last emptied the log: %+v", got)
	}
	if err := l.Compact(ctx, "p", backends.Pos{N: 1, ID: recs[0].ID}, []byte("s1")); err != nil {
		t.Fatal(err)
	}
	last := backends.Pos{N: 2, ID: recs[1].ID}
	if err := l.Compact(ctx, "p", last, nil); err != nil {
		t.Fatal(err)
	}
	keys := []string{logKey(prefix, "p", "log"), logKey(prefix, "p", "snap")}
	for _, k := range keys {
		if ttl, err := s.Client().PTTL(ctx, k).Result(); err != nil || ttl <= 0 || ttl > time.Hour {
			t.Fatalf("after emptying, %s expires in %v (%v), want within an hour", k, ttl, err)
		}
	}
	if parts, err := l.Partitions(ctx); err != nil || slices.Contains(parts, "p") {
		t.Fatalf("Partitions after emptying: %q, %v", parts, err)
	}
	if got := readOK(t, l, "p", last); got.Restart || len(got.Entries) != 0 {
		t.Fatalf("from the emptied log's end: %+v, want nothing new", got)
	}
	got := readOK(t, l, "p", backends.Pos{})
	if !got.Restart || got.Snapshot != nil || got.Start != last || len(got.Entries) != 0 {
		t.Fatalf("from the start of the emptied log: %+v, want a Restart to the empty state at %v", got, last)
	}
	tail := appendOK(t, l, "p", last, rec("new", 0))
	if tail.Restart || len(tail.Entries) != 1 || tail.Entries[0].N != 3 {
		t.Fatalf("append from the emptied log's end: %+v, want entry 3", tail)
	}
	for _, k := range keys {
		if ttl, err := s.Client().PTTL(ctx, k).Result(); err != nil || ttl != -1 {
			t.Fatalf("after an append to the emptied log, %s expires in %v (%v), want never", k, ttl, err)
		}
	}
	if parts, err := l.Partitions(ctx); err != nil || !slices.Contains(parts, "p") {
		t.Fatalf("Partitions after the append: %q, %v", parts, err)
	}
	// Emptying a partition that has no log does nothing.
	if err := l.Compact(ctx, "none", backends.Pos{}, nil); err != nil {
		t.Fatal(err)
	}
}

// Indexes: each record with Indexes gets its base from the global
// counter, shared by every partition (on a Cluster, in other slots);
// bases of one Append are consecutive; no index is handed out twice.
func testLogIndexes(t *testing.T, e *logEnv, prefix string) {
	l, s := e.open(t, prefix)
	ctx := t.Context()
	recs := []backends.Record{rec("x", 3), rec("none", 0), rec("y", 2)}
	tail := appendOK(t, l, "p", backends.Pos{}, recs...)
	if b := tail.Entries; b[0].Base != 0 || b[1].Base != 0 || b[2].Base != 3 {
		t.Fatalf("bases %d, %d, %d, want 0, -, 3", b[0].Base, b[1].Base, b[2].Base)
	}
	got := readOK(t, l, "p", backends.Pos{})
	for i := range got.Entries {
		if got.Entries[i].Base != tail.Entries[i].Base {
			t.Errorf("entry %d: Append said base %d, Read says %d", i+1, tail.Entries[i].Base, got.Entries[i].Base)
		}
	}
	// Across partitions, side by side: the ranges never overlap.
	type span struct{ lo, hi uint64 }
	var mu sync.Mutex
	spans := []span{{0, 5}}
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			p := "part" + strconv.Itoa(w)
			var from backends.Pos
			for i := range 5 {
				r := rec("r", uint64(1+(w+i)%4))
				tail, err := l.Append(ctx, p, from, []backends.Record{r})
				if err != nil {
					t.Error(err)
					return
				}
				from = tail.End(from)
				x := tail.Entries[len(tail.Entries)-1]
				mu.Lock()
				spans = append(spans, span{x.Base, x.Base + r.Indexes})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.SortFunc(spans, func(a, b span) int { return int(a.lo) - int(b.lo) })
	for i := 1; i < len(spans); i++ {
		if spans[i].lo < spans[i-1].hi {
			t.Fatalf("index ranges %v and %v overlap", spans[i-1], spans[i])
		}
	}
	next, _ := s.Client().Get(ctx, prefix+":{"+prefix+"}:next").Uint64()
	if top := spans[len(spans)-1].hi; next < top {
		t.Fatalf("counter %d below the last index handed out %d", next, top-1)
	}
}

// Resend: an Append sent again with the same records (a lost reply's
// resend) appends nothing and replies as the first did.
func testLogResend(t *testing.T, e *logEnv, prefix string) {
	l, s := e.open(t, prefix)
	recs := []backends.Record{rec("a", 2), rec("b", 1)}
	first := appendOK(t, l, "p", backends.Pos{}, recs...)
	again := appendOK(t, l, "p", backends.Pos{}, recs...)
	if len(again.Entries) != 2 {
		t.Fatalf("resend: %d entries, want the 2 of the first send", len(again.Entries))
	}
	for i := range again.Entries {
		a, f := again.Entries[i], first.Entries[i]
		if a.N != f.N || a.ID != f.ID || a.Time != f.Time || a.Base != f.Base || a.Data != nil {
			t.Errorf("resend: entry %+v, the first send said %+v", again.Entries[i], first.Entries[i])
		}
	}
	// From an older position, with someone's entry after ours.
	other := appendOK(t, l, "p", first.End(backends.Pos{}), rec("c", 0))
	again = appendOK(t, l, "p", backends.Pos{}, recs...)
	if len(again.Entries) != 2 || again.Entries[1].N != 2 {
		t.Fatalf("resend after another append: %+v, want the tail up to its own entries", again.Entries)
	}
	if n, _ := s.Client().XLen(t.Context(), logKey(prefix, "p", "log")).Result(); n != 3 {
		t.Fatalf("stream holds %d entries after resends, want 3", n)
	}
	_ = other
}

// Partitions: every partition with a log, sorted.
func testLogPartitions(t *testing.T, e *logEnv, prefix string) {
	l, _ := e.open(t, prefix)
	ctx := t.Context()
	names := []string{"b", "a{x}", "c%", ""}
	for _, p := range names {
		appendOK(t, l, p, backends.Pos{}, rec("r", 0))
	}
	got, err := l.Partitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Sorted(slices.Values(names))
	if !slices.Equal(got, want) {
		t.Fatalf("Partitions = %q, want %q", got, want)
	}
	// A second Log of the same prefix, which never registered them,
	// appends to a known partition from a position.
	l2, _ := e.open(t, prefix)
	tail := appendOK(t, l2, "a{x}", backends.Pos{}, rec("r2", 1))
	if len(tail.Entries) != 2 {
		t.Fatalf("append of a second Log: %+v", tail.Entries)
	}
}

// TimeOffset: WithTimeOffset moves the stamps.
func testLogTimeOffset(t *testing.T, e *logEnv, prefix string) {
	var offset time.Duration
	var mu sync.Mutex
	l, _ := e.open(t, prefix, redis.WithTimeOffset(func() time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return offset
	}))
	t0 := appendOK(t, l, "p", backends.Pos{}, rec("a", 0)).Entries[0].Time
	mu.Lock()
	offset = time.Hour
	mu.Unlock()
	t1 := appendOK(t, l, "p", backends.Pos{}, rec("b", 0)).Entries[1].Time
	if d := time.Duration(t1-t0) * time.Microsecond; d < time.Hour || d > time.Hour+time.Minute {
		t.Fatalf("an hour's offset moved the stamp by %v", d)
	}
}

// WrongType: a key of the wrong type fails the call, definitely, and
// changes nothing.
func testLogWrongType(t *testing.T, e *logEnv, prefix string) {
	l, s := e.open(t, prefix)
	ctx := t.Context()
	if err := s.Client().Set(ctx, logKey(prefix, "p", "log"), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := l.Append(ctx, "p", backends.Pos{}, []backends.Record{rec("a", 5)})
	if err == nil || errors.Is(err, backends.ErrOutcomeUnknown) {
		t.Fatalf("Append onto a string: %v, want a definite error", err)
	}
	if _, err := l.Read(ctx, "p", backends.Pos{}, 0); err == nil {
		t.Fatal("Read of a string: no error")
	}
	if v, _ := s.Client().Get(ctx, logKey(prefix, "p", "log")).Result(); v != "x" {
		t.Fatalf("the key became %q", v)
	}
	if e.cluster {
		return // the indexes were drawn before the script
	}
	if n, err := s.Client().Exists(ctx, prefix+":{"+prefix+"}:next").Result(); err != nil || n != 0 {
		t.Fatalf("a failed append drew indexes (%d, %v)", n, err)
	}
}

// Invalid: a record of ID 0 is backends.ErrInvalid; an empty Append reads.
func testLogInvalid(t *testing.T, e *logEnv, prefix string) {
	l, _ := e.open(t, prefix)
	ctx := t.Context()
	if _, err := l.Append(ctx, "p", backends.Pos{}, []backends.Record{{ID: 0}}); !errors.Is(err, backends.ErrInvalid) {
		t.Fatalf("record ID 0: %v, want ErrInvalid", err)
	}
	if _, err := l.Append(ctx, "p", backends.Pos{}, []backends.Record{{ID: 1, Indexes: 1 << 53}}); !errors.Is(err, backends.ErrInvalid) {
		t.Fatalf("2^53 indexes: %v, want ErrInvalid", err)
	}
	r := rec("a", 0)
	appendOK(t, l, "p", backends.Pos{}, r)
	tail := appendOK(t, l, "p", backends.Pos{})
	wantEntries(t, "empty append", tail.Entries, 1, []backends.Record{r}, false)
}

// Concurrent: writers appending side by side each get their entries last
// and together, and the log holds each record once, densely numbered.
func testLogConcurrent(t *testing.T, e *logEnv, prefix string) {
	ctx := t.Context()
	const writers, appends = 4, 15
	var wg sync.WaitGroup
	var mu sync.Mutex
	all := map[uint64]bool{}
	for w := range writers {
		l, _ := e.open(t, prefix)
		wg.Go(func() {
			var from backends.Pos
			for i := range appends {
				recs := []backends.Record{rec(fmt.Sprint(w, i), 0)}
				if i%3 == 0 {
					recs = append(recs, rec("second", 1))
				}
				tail, err := l.Append(ctx, "p", from, recs)
				if err != nil {
					t.Error(err)
					return
				}
				if tail.Restart {
					t.Errorf("writer %d: Restart", w)
					return
				}
				own := tail.Entries[len(tail.Entries)-len(recs):]
				for j := range own {
					if own[j].ID != recs[j].ID || own[j].Data != nil {
						t.Errorf("writer %d: own entries %+v", w, own)
						return
					}
				}
				from = tail.End(from)
				mu.Lock()
				for _, r := range recs {
					all[r.ID] = true
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	l, _ := e.open(t, prefix)
	got := readOK(t, l, "p", backends.Pos{})
	seen := map[uint64]bool{}
	for i, x := range got.Entries {
		if x.N != uint64(i+1) || seen[x.ID] || !all[x.ID] {
			t.Fatalf("entry %d: %+v (seen %v, appended %v)", i+1, x, seen[x.ID], all[x.ID])
		}
		seen[x.ID] = true
	}
	if len(seen) != len(all) {
		t.Fatalf("log holds %d records, %d were appended", len(seen), len(all))
	}
}

// WaitWakes: a waiting Read returns the entry another client appends,
// with its data, promptly.
func testLogWaitWakes(t *testing.T, e *logEnv, prefix string) {
	l, _ := e.open(t, prefix)
	w, _ := e.open(t, prefix)
	first := rec("a", 0)
	end := endOf(appendOK(t, l, "p", backends.Pos{}, first), backends.Pos{})
	for round := range 3 {
		next := rec("b"+strconv.Itoa(round), 0)
		var appended time.Time
		wrote := make(chan error, 1)
		go func() {
			time.Sleep(150 * time.Millisecond)
			appended = time.Now()
			_, err := w.Append(context.Background(), "p", end, []backends.Record{next})
			wrote <- err
		}()
		start := time.Now()
		got, err := l.Read(t.Context(), "p", end, 10*time.Second)
		woke := time.Now()
		if werr := <-wrote; werr != nil {
			t.Fatal(werr)
		}
		if err != nil {
			t.Fatal(err)
		}
		wantEntries(t, "woken", got.Entries, end.N+1, []backends.Record{next}, false)
		if d := woke.Sub(start); d < 100*time.Millisecond {
			t.Errorf("Read returned after %v, before the append", d)
		}
		late := woke.Sub(appended)
		t.Logf("round %d: woke %v after the append began", round, late)
		if late > time.Second {
			t.Errorf("woke %v after the append", late)
		}
		end = got.End(end)
	}
}

// WaitTimesOut: with nothing appended, a waiting Read returns an empty
// tail after its wait.
func testLogWaitTimesOut(t *testing.T, e *logEnv, prefix string) {
	defer redis.SetLogRecheck(200 * time.Millisecond)()
	l, _ := e.open(t, prefix)
	end := endOf(appendOK(t, l, "p", backends.Pos{}, rec("a", 0)), backends.Pos{})
	start := time.Now()
	got, err := l.Read(t.Context(), "p", end, 500*time.Millisecond)
	d := time.Since(start)
	if err != nil || got.Restart || len(got.Entries) != 0 {
		t.Fatalf("Read with nothing to wait for: %+v, %v", got, err)
	}
	if d < 490*time.Millisecond || d > 3*time.Second {
		t.Fatalf("a wait of 500ms took %v", d)
	}
}

// WaitFromNothing: a Read from the start of a partition without a log
// waits for the first append.
func testLogWaitFromNothing(t *testing.T, e *logEnv, prefix string) {
	l, _ := e.open(t, prefix)
	w, _ := e.open(t, prefix)
	r := rec("first", 0)
	wrote := make(chan error, 1)
	go func() {
		time.Sleep(100 * time.Millisecond)
		_, err := w.Append(context.Background(), "fresh", backends.Pos{}, []backends.Record{r})
		wrote <- err
	}()
	got, err := l.Read(t.Context(), "fresh", backends.Pos{}, 10*time.Second)
	if werr := <-wrote; werr != nil {
		t.Fatal(werr)
	}
	if err != nil {
		t.Fatal(err)
	}
	wantEntries(t, "first entry", got.Entries, 1, []backends.Record{r}, false)
}

// WaitRestart: a log deleted and begun anew under a waiting reader (whose
// numbers do not pass its position) ends its wait within a round, with a
// Restart.
func testLogWaitRestart(t *testing.T, e *logEnv, prefix string) {
	defer redis.SetLogRecheck(200 * time.Millisecond)()
	l, s := e.open(t, prefix)
	w, _ := e.open(t, prefix)
	recs := []backends.Record{rec("a", 0), rec("b", 0), rec("c", 0)}
	end := endOf(appendOK(t, l, "p", backends.Pos{}, recs...), backends.Pos{})
	wrote := make(chan error, 1)
	go func() {
		time.Sleep(100 * time.Millisecond)
		ctx := context.Background()
		// As an emptied log's keys expire: the next log begins at 1.
		err := s.Client().Del(ctx, logKey(prefix, "p", "log"), logKey(prefix, "p", "snap")).Err()
		if err == nil {
			_, err = w.Append(ctx, "p", backends.Pos{}, []backends.Record{rec("new", 0)})
		}
		wrote <- err
	}()
	start := time.Now()
	got, err := l.Read(t.Context(), "p", end, 10*time.Second)
	if werr := <-wrote; werr != nil {
		t.Fatal(werr)
	}
	if err != nil {
		t.Fatal(err)
	}
	if got.Restart && len(got.Entries) == 0 {
		// The recheck fell between the delete and the append (a loaded
		// machine): an empty log, begun anew; the entry follows.
		if got, err = l.Read(t.Context(), "p", backends.Pos{}, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		got.Restart = true
	}
	if !got.Restart || len(got.Entries) != 1 || got.Entries[0].N != 1 {
		t.Fatalf("wait across a delete: %+v, want a Restart with the new entry 1", got)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the restart came after %v", d)
	}
}

// waitingRead starts a Read that waits up to a minute on an idle log,
// and returns its outcome's channel once it is waiting.
func waitingRead(t *testing.T, ctx context.Context, l backends.Log) <-chan error {
	end := endOf(appendOK(t, l, "p", backends.Pos{}, rec("a", 0)), backends.Pos{})
	done := make(chan error, 1)
	go func() {
		_, err := l.Read(ctx, "p", end, time.Minute)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("Read returned before anything ended it: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	return done
}

// CloseEndsWait: Close ends a waiting Read at once with ErrClosed.
func testLogCloseEndsWait(t *testing.T, e *logEnv, prefix string) {
	l, _ := e.open(t, prefix)
	done := waitingRead(t, t.Context(), l)
	start := time.Now()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, backends.ErrClosed) {
			t.Fatalf("Read after Close: %v, want ErrClosed", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not end the waiting Read")
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("Close and the Read's end took %v", d)
	}
	if _, err := l.Read(t.Context(), "p", backends.Pos{}, 0); !errors.Is(err, backends.ErrClosed) {
		t.Fatalf("Read on a closed Log: %v", err)
	}
}

// ContextEndsWait: a context cancelled ends a waiting Read at once.
func testLogContextEndsWait(t *testing.T, e *logEnv, prefix string) {
	l, _ := e.open(t, prefix)
	ctx, cancel := context.WithCancel(t.Context())
	done := waitingRead(t, ctx, l)
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Read after cancel: %v, want context.Canceled", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("cancel did not end the waiting Read")
	}
	if d := time.Since(start); d > 200*time.Millisecond {
		t.Errorf("cancel took %v to end the Read", d)
	}
	// A deadline too.
	dctx, dcancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer dcancel()
	start = time.Now()
	_, err := l.Read(dctx, "p", backends.Pos{N: 1, ID: 0}, time.Minute)
	// From a position the log does not hold: a Restart at once.
	if err != nil {
		t.Fatalf("Read from a position not held: %v", err)
	}
	end := endOf(readOK(t, l, "p", backends.Pos{}), backends.Pos{})
	_, err = l.Read(dctx, "p", end, time.Minute)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Read past its context's deadline: %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("a deadline of 300ms ended the Read after %v", d)
	}
}

// RoundTrips: the requests each call waits on.
func testLogRoundTrips(t *testing.T, e *logEnv, prefix string) {
	l, _ := e.open(t, prefix)
	count := func(f func(ctx context.Context)) int64 {
		var rt backends.RoundTrips
		f(rt.Attach(t.Context()))
		return rt.Load()
	}
	var tail backends.Tail
	var from backends.Pos
	appendRT := func(r backends.Record) int64 {
		return count(func(ctx context.Context) {
			var err error
			if tail, err = l.Append(ctx, "p", from, []backends.Record{r}); err != nil {
				t.Fatal(err)
			}
			from = tail.End(from)
		})
	}
	// A new server lacks the scripts, a new client its connections.
	_ = appendRT(rec("load the script", 0))
	readOK(t, l, "p", backends.Pos{})
	first := appendRT(rec("a", 0))
	plain := appendRT(rec("b", 0))
	indexed := appendRT(rec("c", 4))
	read := count(func(ctx context.Context) {
		if _, err := l.Read(ctx, "p", from, 0); err != nil {
			t.Fatal(err)
		}
	})
	create := count(func(ctx context.Context) {
		if _, err := l.Append(ctx, "q", backends.Pos{}, []backends.Record{rec("new log", 0)}); err != nil {
			t.Fatal(err)
		}
	})
	l2, _ := e.open(t, prefix)
	readOK(t, l2, "p", backends.Pos{})
	appendOK(t, l2, "warm", backends.Pos{}, rec("w", 1)) // and its pipelines' connections
	unknown := count(func(ctx context.Context) {
		if _, err := l2.Append(ctx, "p", from, []backends.Record{rec("another Log", 0)}); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("round trips: append %d (first by this Log %d, with indexes %d, creating the log %d, of a partition this Log has not registered %d), read %d",
		plain, first, indexed, create, unknown, read)
	want := []int64{1, 1, 1, 1, 1}
	if e.cluster {
		want = []int64{1, 2, 3, 2, 1}
	}
	if got := []int64{plain, indexed, create, unknown, read}; !slices.Equal(got, want) {
		t.Errorf("round trips (append, with indexes, creating, unregistered, read) %v, want %v", got, want)
	}
}

// Cells (standalone): AppendCells writes cells with the records that name
// them, ReadCells reads them with the log, each in one round trip; a
// Cluster's Log does not implement backends.LogCells.
func testLogCells(t *testing.T, e *logEnv, prefix string) {
	l, s := e.open(t, prefix)
	lc, ok := l.(backends.LogCells)
	if e.cluster {
		if ok {
			t.Fatal("a Cluster's Log implements LogCells")
		}
		return
	}
	if !ok {
		t.Fatal("a standalone server's Log does not implement LogCells")
	}
	ctx := t.Context()
	cells := []backends.Cell{
		{Key: "1@x", Head: []byte("h"), Body: bytes.Repeat([]byte("x"), 2000)},
		{Key: "2@x", Body: []byte("y")},
	}
	var rt backends.RoundTrips
	recs := []backends.Record{rec("names 1@x and 2@x", 2)}
	// Load the scripts and open the connections the counted calls use.
	_, _ = lc.AppendCells(ctx, "warm", backends.Pos{}, []backends.Cell{{Key: "w", Body: []byte("w")}}, []backends.Record{rec("w", 0)})
	_, _ = lc.ReadCells(ctx, "warm", backends.Pos{}, []backends.ReadCell{{Key: "w"}})
	tail, err := lc.AppendCells(rt.Attach(ctx), "p", backends.Pos{}, cells, recs)
	if err != nil {
		t.Fatal(err)
	}
	wantEntries(t, "append cells", tail.Entries, 1, recs, true)
	appendRT := rt.Load()
	got, err := getVals(ctx, s, []string{"1@x", "2@x"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got[0]) != 2001 || string(got[1]) != "y" {
		t.Fatalf("cells after AppendCells: %q", got)
	}
	later := rec("later", 0)
	appendOK(t, l, "p", tail.End(backends.Pos{}), later)
	body := make([]byte, 2000)
	rc := []backends.ReadCell{{Key: "1@x", Head: make([]byte, 1), Body: body}, {Key: "2@x"}, {Key: "missing"}}
	rt = backends.RoundTrips{}
	read, err := lc.ReadCells(rt.Attach(ctx), "p", tail.End(backends.Pos{}), rc)
	if err != nil {
		t.Fatal(err)
	}
	readRT := rt.Load()
	wantEntries(t, "read cells", read.Entries, 2, []backends.Record{later}, false)
	if !rc[0].Found || rc[0].Value != nil || string(rc[0].Head) != "h" || !bytes.Equal(body, cells[0].Body) {
		t.Fatalf("cell 1@x read %v %q %q", rc[0].Found, rc[0].Head, rc[0].Value)
	}
	if !rc[1].Found || string(rc[1].Value) != "y" || rc[2].Found {
		t.Fatalf("cells read %+v %+v", rc[1], rc[2])
	}
	t.Logf("round trips: AppendCells %d, ReadCells %d", appendRT, readRT)
	wantAppend := int64(1)
	if own, _ := redis.DirectConnections(s); !own {
		wantAppend = 2 // Write, then Append
	}
	if appendRT != wantAppend || readRT != 1 {
		t.Errorf("round trips: AppendCells %d, ReadCells %d; want %d and 1", appendRT, readRT, wantAppend)
	}
	// Restart and many rounds.
	var many []backends.ReadCell
	for range 3000 {
		many = append(many, backends.ReadCell{Key: "2@x"})
	}
	read, err = lc.ReadCells(ctx, "p", backends.Pos{N: 7, ID: 7}, many)
	if err != nil {
		t.Fatal(err)
	}
	if !read.Restart || len(read.Entries) != 2 || !many[2999].Found || string(many[2999].Value) != "y" {
		t.Fatalf("ReadCells from a position not held: %+v, last cell %+v", read, many[2999])
	}
	// Cells whose write rounds are several: the earlier go first.
	big := make([]backends.Cell, 40)
	for i := range big {
		big[i] = backends.Cell{Key: "big" + strconv.Itoa(i), Body: bytes.Repeat([]byte{byte(i)}, 64<<10)}
	}
	if _, err := lc.AppendCells(ctx, "p", backends.Pos{}, big, []backends.Record{rec("big", 0)}); err != nil {
		t.Fatal(err)
	}
	for i := range big {
		v, err := getVals(ctx, s, []string{big[i].Key})
		if err != nil || !bytes.Equal(v[0], big[i].Body) {
			t.Fatalf("cell %s after AppendCells of several rounds: %d bytes, %v", big[i].Key, len(v[0]), err)
		}
	}
}

// Layout: the keys and fields are LAYOUT.md section 9's, so that another
// program reads what the Log appends, and the Log reads what another
// program appends by the same rules.
func testLogLayout(t *testing.T, e *logEnv, prefix string) {
	l, s := e.open(t, prefix)
	ctx := t.Context()
	c := s.Client()
	recs := []backends.Record{rec("data", 2), rec("", 0)}
	tail := appendOK(t, l, "p", backends.Pos{}, recs...)
	xs, err := c.XRange(ctx, logKey(prefix, "p", "log"), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(xs) != 2 {
		t.Fatalf("stream holds %d entries", len(xs))
	}
	want := []map[string]any{
		{"i": strconv.FormatUint(recs[0].ID, 10), "t": strconv.FormatInt(tail.Entries[0].Time, 10), "b": strconv.FormatUint(tail.Entries[0].Base, 10), "d": "data"},
		{"i": strconv.FormatUint(recs[1].ID, 10), "t": strconv.FormatInt(tail.Entries[0].Time, 10), "d": ""},
	}
	for i, x := range xs {
		if x.ID != strconv.Itoa(i+1)+"-0" || fmt.Sprint(x.Values) != fmt.Sprint(want[i]) {
			t.Errorf("stream entry %s %v, want %d-0 %v", x.ID, x.Values, i+1, want[i])
		}
	}
	if err := l.Compact(ctx, "p", tail.Entries[0].Pos(), []byte("snap")); err != nil {
		t.Fatal(err)
	}
	snap, err := c.HGetAll(ctx, logKey(prefix, "p", "snap")).Result()
	if err != nil {
		t.Fatal(err)
	}
	if snap["n"] != "1" || snap["i"] != strconv.FormatUint(recs[0].ID, 10) || snap["d"] != "snap" || len(snap) != 3 {
		t.Fatalf("snapshot hash %v", snap)
	}
	parts, _ := c.SMembers(ctx, prefix+":{"+prefix+"}:parts").Result()
	if !slices.Contains(parts, "p") {
		t.Fatalf("registry %q lacks p", parts)
	}
	// A foreign writer: entry 3 by the rules, with its own index.
	base, err := c.IncrBy(ctx, prefix+":{"+prefix+"}:next", 5).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.XAdd(ctx, &goredis.XAddArgs{Stream: logKey(prefix, "p", "log"), ID: "3-0",
		Values: []any{"i", "99", "t", "1700000000000000", "b", strconv.FormatInt(base-5, 10), "d", "foreign"}}).Err(); err != nil {
		t.Fatal(err)
	}
	got := readOK(t, l, "p", tail.End(backends.Pos{}))
	if len(got.Entries) != 1 {
		t.Fatalf("read of the foreign entry: %+v", got)
	}
	if x := got.Entries[0]; x.N != 3 || x.ID != 99 || x.Time != 1700000000000000 || x.Base != uint64(base-5) || string(x.Data) != "foreign" {
		t.Fatalf("foreign entry read as %+v", x)
	}
	next := appendOK(t, l, "p", got.End(tail.End(backends.Pos{})), rec("after", 0))
	if next.Entries[0].N != 4 {
		t.Fatalf("append after the foreign entry numbered %d", next.Entries[0].N)
	}
}

// ScriptsFlushed: every call works on a server that lacks the scripts (a
// restart, a failover to a server that never ran them), and AppendCells
// leaves no marker behind.
func testLogScriptsFlushed(t *testing.T, e *logEnv, prefix string) {
	l, s := e.open(t, prefix)
	ctx := t.Context()
	c := s.Client()
	flush := func() {
		t.Helper()
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	flush()
	r := rec("a", 1)
	lc, cells := l.(backends.LogCells)
	var tail backends.Tail
	var err error
	if cells {
		tail, err = lc.AppendCells(ctx, "p", backends.Pos{}, []backends.Cell{{Key: "k", Body: []byte("v")}}, []backends.Record{r})
	} else {
		tail, err = l.Append(ctx, "p", backends.Pos{}, []backends.Record{r})
	}
	if err != nil {
		t.Fatal(err)
	}
	wantEntries(t, "append", tail.Entries, 1, []backends.Record{r}, true)
	if cells {
		keys, err := c.Keys(ctx, prefix+":d:!*").Result()
		if err != nil || len(keys) != 0 {
			t.Fatalf("markers left: %q (%v)", keys, err)
		}
		flush()
		rc := []backends.ReadCell{{Key: "k"}}
		got, err := lc.ReadCells(ctx, "p", backends.Pos{}, rc)
		if err != nil || len(got.Entries) != 1 || string(rc[0].Value) != "v" {
			t.Fatalf("ReadCells: %+v %+v %v", got, rc[0], err)
		}
	}
	flush()
	if err := l.Compact(ctx, "p", tail.Entries[0].Pos(), []byte("s")); err != nil {
		t.Fatal(err)
	}
	// A waiting Read whose round finds the script gone.
	end := tail.End(backends.Pos{})
	next := rec("b", 0)
	wrote := make(chan error, 1)
	go func() {
		time.Sleep(100 * time.Millisecond)
		// While the Read waits: its round's read script finds no
		// script once the XREAD returns.
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			wrote <- err
			return
		}
		_, err := l.Append(context.Background(), "p", end, []backends.Record{next})
		wrote <- err
	}()
	got, err := l.Read(ctx, "p", end, 10*time.Second)
	if werr := <-wrote; werr != nil {
		t.Fatal(werr)
	}
	if err != nil {
		t.Fatal(err)
	}
	wantEntries(t, "woken", got.Entries, 2, []backends.Record{next}, false)
}

// TestLogHooks: hooks given with WithHooks see the Log's traffic: its
// scripts, the MULTI/EXEC of AppendCells and ReadCells on the direct
// connections, and a waiting Read's XREAD.
func TestLogHooks(t *testing.T) {
	srv := redistest.Start(t)
	h := &cmdHook{names: map[string]int{}}
	l, _ := openLog(t, srv.URL()+"?prefix=hooks", redis.WithHooks(h))
	lc := l.(backends.LogCells)
	ctx := t.Context()
	tail, err := lc.AppendCells(ctx, "p", backends.Pos{}, []backends.Cell{{Key: "k", Body: []byte("v")}}, []backends.Record{rec("a", 1)})
	if err != nil {
		t.Fatal(err)
	}
	end := tail.End(backends.Pos{})
	if _, err := lc.ReadCells(ctx, "p", end, []backends.ReadCell{{Key: "k"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Read(ctx, "p", end, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, name := range []string{"multi", "mset", "pexpire", "evalsha", "exec", "mget", "xread"} {
		if h.names[name] == 0 {
			t.Errorf("hooks saw no %s (saw %v)", name, h.names)
		}
	}
}

// TestLogLayoutScripts: LAYOUT.md section 9 holds the log scripts' exact
// source.
func TestLogLayoutScripts(t *testing.T) {
	raw, err := os.ReadFile("LAYOUT.md")
	if err != nil {
		t.Fatal(err)
	}
	for name, src := range redis.LogScripts() {
		_, block, ok := strings.Cut(string(raw), "<!-- "+name+" -->\n```\n")
		got, _, ok2 := strings.Cut(block, "```")
		if !ok || !ok2 {
			t.Fatalf("LAYOUT.md has no block %q", name)
		}
		if got != strings.TrimPrefix(src, "\n") {
			t.Errorf("LAYOUT.md block %q differs from the script; the script is:\n%s", name, src)
		}
	}
}

// TestLogLifetime: a Store's Log is one Log; an owned client stays open
// while the Log is, and closes with the last of Store and Log; a Log
// taken after the Store closed is closed.
func TestLogLifetime(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	s, err := redis.OpenURL(ctx, srv.URL()+"?prefix=life")
	if err != nil {
		t.Fatal(err)
	}
	l := s.Log()
	if s.Log() != l {
		t.Fatal("Store.Log returned two Logs")
	}
	s.Close()
	appendOK(t, l, "p", backends.Pos{}, rec("a", 0))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Client().Ping(ctx).Err(); err == nil {
		t.Fatal("the owned client is open after Store and Log closed")
	}
	if _, err := l.Read(ctx, "p", backends.Pos{}, 0); !errors.Is(err, backends.ErrClosed) {
		t.Fatalf("Read on a closed Log: %v", err)
	}

	s2, err := redis.OpenURL(ctx, srv.URL()+"?prefix=life")
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()
	late := s2.Log()
	if _, err := late.Append(ctx, "p", backends.Pos{}, []backends.Record{rec("b", 0)}); !errors.Is(err, backends.ErrClosed) {
		t.Fatalf("Append on a Log taken after its Store closed: %v", err)
	}
	if err := late.Close(); err != nil {
		t.Fatal(err)
	}
}
