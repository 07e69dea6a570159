package backendtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
)

// RunLog checks that the logs of a shared engine keep the log contract of
// backends.Log (see the package doc), one subtest per rule.
//
// Each subtest calls newServer once and calls the open it returns for each
// client it needs: every call of open returns a new client (a backends.Log,
// as one process would hold) of one server, so that what one client
// appends, the others read. newServer registers with t.Cleanup the closing
// of every client open returns; the Closed and Wait subtests close some
// first, so that cleanup must tolerate a client already closed. Closing a
// client must leave the server and its other clients working.
//
// The server need not be empty, nor differ between subtests or runs:
// every partition a subtest names begins with a prefix unique to the
// subtest and the RunLog call, and Partitions is checked only on the names
// with that prefix. The server's clock must be within a minute of the
// test's.
func RunLog(t *testing.T, newServer func(t *testing.T) (open func() backends.Log)) {
	t.Helper()
	nonce := newNonce()
	for _, tc := range logTests {
		t.Run(tc.name, func(t *testing.T) {
			open := newServer(t)
			if open == nil {
				t.Fatal("newServer returned a nil open")
			}
			tc.fn(&lt{t: t, ctx: t.Context(), open: open, prefix: prefix(nonce, t), began: time.Now()})
		})
	}
}

var logTests = []struct {
	name string
	fn   func(*lt)
}{
	{"Numbering", testLogNumbering},
	{"Time", testLogTime},
	{"AppendTail", testAppendTail},
	{"AppendEmpty", testAppendEmpty},
	{"FailedAppend", testFailedAppend},
	{"Indexes", testLogIndexes},
	{"ReadAfter", testReadAfter},
	{"ReadMissing", testLogReadMissing},
	{"RestartOtherID", testRestartOtherID},
	{"RestartPastEnd", testRestartPastEnd},
	{"CompactRead", testCompactRead},
	{"CompactLast", testCompactLast},
	{"CompactNoop", testCompactNoop},
	{"Emptied", testLogEmptied},
	{"WaitAppend", testWaitAppend},
	{"WaitElapses", testWaitElapses},
	{"WaitContext", testWaitContext},
	{"WaitClose", testWaitClose},
	{"Closed", testLogClosed},
	{"Partitions", testLogPartitions},
	{"Concurrent", testLogConcurrent},
	{"LargeRecords", testLargeRecords},
	{"RecordValues", testRecordValues},
	{"PartitionNames", testPartitionNames},
}

// prompt bounds how long a waiting Read may take to return once what it
// waits for happened: generous, for a loaded 2-core machine; it checks that
// the Read was woken, not how fast.
const prompt = 500 * time.Millisecond

// lt is one log subtest: its server's opener and its partition prefix.
type lt struct {
	t      *testing.T
	ctx    context.Context
	open   func() backends.Log
	prefix string
	began  time.Time
}

// client returns a new client of the subtest's server.
func (x *lt) client() backends.Log {
	x.t.Helper()
	l := x.open()
	if l == nil {
		x.t.Fatal("open returned a nil Log")
	}
	return l
}

// part returns the partition called name in this subtest.
func (x *lt) part(name string) string { return x.prefix + name }

// newID returns a random nonzero record ID.
func newID() uint64 {
	for {
		if id := rand.Uint64(); id != 0 {
			return id
		}
	}
}

// otherID returns a nonzero ID other than id.
func otherID(id uint64) uint64 {
	for {
		if o := newID(); o != id {
			return o
		}
	}
}

// logRecs returns n records with random IDs and data naming them.
func logRecs(name string, n int) []backends.Record {
	out := make([]backends.Record, n)
	for i := range out {
		out[i] = backends.Record{ID: newID(), Data: fmt.Appendf(nil, "%s/%d", name, i)}
	}
	return out
}

// posOf returns the position of rs[i] in a log that holds rs from number 1.
func posOf(rs []backends.Record, i int) backends.Pos {
	return backends.Pos{N: uint64(i) + 1, ID: rs[i].ID}
}

func (x *lt) append(l backends.Log, p string, from backends.Pos, rs []backends.Record) backends.Tail {
	x.t.Helper()
	tail, err := l.Append(x.ctx, p, from, rs)
	if err != nil {
		x.t.Fatalf("Append of %d records to %q after %v: %v", len(rs), p, from, err)
	}
	return tail
}

func (x *lt) read(l backends.Log, p string, from backends.Pos) backends.Tail {
	x.t.Helper()
	tail, err := l.Read(x.ctx, p, from, 0)
	if err != nil {
		x.t.Fatalf("Read of %q after %v: %v", p, from, err)
	}
	return tail
}

// end returns the position of p's last entry.
func (x *lt) end(l backends.Log, p string) backends.Pos {
	x.t.Helper()
	tail := x.read(l, p, backends.Pos{})
	return tail.End(backends.Pos{})
}

func (x *lt) compact(l backends.Log, p string, at backends.Pos, snapshot []byte) {
	x.t.Helper()
	if err := l.Compact(x.ctx, p, at, snapshot); err != nil {
		x.t.Fatalf("Compact of %q at %v (snapshot of %d bytes, nil: %t): %v", p, at, len(snapshot), snapshot == nil, err)
	}
}

// partitions returns the subtest's partitions that l lists, checking that
// the whole list is sorted.
func (x *lt) partitions(l backends.Log) []string {
	x.t.Helper()
	names, err := l.Partitions(x.ctx)
	if err != nil {
		x.t.Fatalf("Partitions: %v", err)
	}
	if !slices.IsSorted(names) {
		x.t.Fatalf("Partitions returned %q, not sorted", names)
	}
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, x.prefix) {
			out = append(out, n)
		}
	}
	return out
}

// plausible reports whether a server's stamp is within a minute of the
// test's clock while the subtest ran.
func (x *lt) plausible(us int64) bool {
	return x.began.Add(-time.Minute).UnixMicro() <= us && us <= time.Now().Add(time.Minute).UnixMicro()
}

// checkEntries checks that got are want, numbered from first, the last own
// of them (Append's own) with Data nil and the others with want's Data,
// each with a plausible Time.
func (x *lt) checkEntries(got []backends.Entry, first uint64, want []backends.Record, own int) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d entries %s, want %d numbered from %d", len(got), describe(got), len(want), first)
	}
	for i, e := range got {
		switch {
		case e.N != first+uint64(i) || e.ID != want[i].ID:
			return fmt.Errorf("entry %d is {N:%d ID:%#x}, want {N:%d ID:%#x} (entries %s)", i, e.N, e.ID, first+uint64(i), want[i].ID, describe(got))
		case i >= len(got)-own && e.Data != nil:
			return fmt.Errorf("entry %d (N %d), appended by this Append: Data of %d bytes, want nil", i, e.N, len(e.Data))
		case i < len(got)-own && !bytes.Equal(e.Data, want[i].Data):
			return fmt.Errorf("entry %d (N %d): Data %s, want %s", i, e.N, short(e.Data), short(want[i].Data))
		case !x.plausible(e.Time):
			return fmt.Errorf("entry %d (N %d): Time %d, not microseconds within a minute of now (%d)", i, e.N, e.Time, time.Now().UnixMicro())
		}
	}
	return nil
}

// checkTail checks that tail, the log after from, is no Restart and holds
// want (see checkEntries).
func (x *lt) checkTail(what string, tail backends.Tail, from backends.Pos, want []backends.Record, own int) {
	x.t.Helper()
	if tail.Restart {
		x.t.Fatalf("%s after %v: Restart (snapshot of %d bytes at %v, entries %s), want the entries after it", what, from, len(tail.Snapshot), tail.Start, describe(tail.Entries))
	}
	if err := x.checkEntries(tail.Entries, from.N+1, want, own); err != nil {
		x.t.Fatalf("%s after %v: %v", what, from, err)
	}
}

// checkRestart checks that tail is a Restart from snapshot (nil: none) at
// start, followed by want (see checkEntries).
func (x *lt) checkRestart(what string, tail backends.Tail, snapshot []byte, start backends.Pos, want []backends.Record, own int) {
	x.t.Helper()
	switch {
	case !tail.Restart:
		x.t.Fatalf("%s: no Restart (entries %s), want a Restart from %v", what, describe(tail.Entries), start)
	case snapshot == nil && tail.Snapshot != nil:
		x.t.Fatalf("%s: Restart with a snapshot of %d bytes, want nil (the empty state)", what, len(tail.Snapshot))
	case snapshot != nil && !bytes.Equal(tail.Snapshot, snapshot):
		x.t.Fatalf("%s: Restart with snapshot %s, want %s", what, short(tail.Snapshot), short(snapshot))
	case tail.Start != start:
		x.t.Fatalf("%s: Restart at %v, want at %v", what, tail.Start, start)
	}
	if err := x.checkEntries(tail.Entries, start.N+1, want, own); err != nil {
		x.t.Fatalf("%s: Restart at %v: %v", what, start, err)
	}
}

// checkEmpty checks that tail is empty: no Restart, no entries.
func (x *lt) checkEmpty(what string, tail backends.Tail) {
	x.t.Helper()
	if tail.Restart || len(tail.Entries) > 0 {
		x.t.Fatalf("%s: Restart %t (at %v), entries %s; want an empty Tail", what, tail.Restart, tail.Start, describe(tail.Entries))
	}
}

// describe lists entries as N:ID, shortened.
func describe(es []backends.Entry) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, e := range es {
		if i == 8 && len(es) > 10 {
			fmt.Fprintf(&b, " ...%d more", len(es)-i)
			break
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d:%#x", e.N, e.ID)
	}
	return b.String() + "]"
}

// short quotes b, or its length when long.
func short(b []byte) string {
	if len(b) > 40 {
		return fmt.Sprintf("(%d bytes)", len(b))
	}
	return fmt.Sprintf("%q", b)
}

// Numbering: each partition's log is numbered densely from 1, in the
// order of the Appends, one Append's records in their order.
func testLogNumbering(x *lt) {
	l := x.client()
	a, b := x.part("a"), x.part("b")
	ra, rb := logRecs("a", 4), logRecs("b", 2)
	x.checkTail("first Append", x.append(l, a, backends.Pos{}, ra[:1]), backends.Pos{}, ra[:1], 1)
	x.checkTail("second Append", x.append(l, a, posOf(ra, 0), ra[1:3]), posOf(ra, 0), ra[1:3], 2)
	x.checkTail("Append to another partition", x.append(l, b, backends.Pos{}, rb), backends.Pos{}, rb, 2)
	x.checkTail("third Append", x.append(l, a, posOf(ra, 2), ra[3:]), posOf(ra, 2), ra[3:], 1)
	x.checkTail("Read", x.read(l, a, backends.Pos{}), backends.Pos{}, ra, 0)
	x.checkTail("Read of the other partition", x.read(l, b, backends.Pos{}), backends.Pos{}, rb, 0)
}

// Time: each entry carries the server's time of its Append, in
// microseconds since the epoch, and reads return that stamp.
func testLogTime(x *lt) {
	l, other := x.client(), x.client()
	p := x.part("p")
	rs := logRecs("p", 3)
	x.append(l, p, backends.Pos{}, rs[:2])
	appended := x.append(l, p, posOf(rs, 1), rs[2:])
	all := x.read(other, p, backends.Pos{})
	x.checkTail("Read", all, backends.Pos{}, rs, 0) // plausible stamps
	if got, want := all.Entries[2].Time, appended.Entries[0].Time; got != want {
		x.t.Fatalf("entry 3: Read gives Time %d, its Append gave %d", got, want)
	}
	again := x.read(l, p, backends.Pos{})
	for i := range all.Entries {
		if again.Entries[i].Time != all.Entries[i].Time {
			x.t.Fatalf("entry %d: Time %d, then %d on a second Read", i+1, all.Entries[i].Time, again.Entries[i].Time)
		}
	}
}

// AppendTail: Append returns the log after from, others' entries with
// their Data, then its own, last, with Data nil.
func testAppendTail(x *lt) {
	c1, c2 := x.client(), x.client()
	p := x.part("p")
	r1, r2, r3, r4 := logRecs("1", 2), logRecs("2", 3), logRecs("3", 1), logRecs("4", 2)
	x.checkTail("c1's Append", x.append(c1, p, backends.Pos{}, r1), backends.Pos{}, r1, 2)
	x.checkTail("c2's Append", x.append(c2, p, backends.Pos{}, r2), backends.Pos{}, slices.Concat(r1, r2), 3)
	all := slices.Concat(r1, r2)
	x.checkTail("c1's second Append", x.append(c1, p, posOf(all, 1), r3), posOf(all, 1), slices.Concat(r2, r3), 1)
	all = slices.Concat(all, r3)
	x.checkTail("c2's Append from the middle", x.append(c2, p, posOf(all, 2), r4), posOf(all, 2), slices.Concat(all[3:], r4), 2)
	all = slices.Concat(all, r4)
	x.checkTail("Read", x.read(c1, p, backends.Pos{}), backends.Pos{}, all, 0)
}

// AppendEmpty: an Append of no records appends nothing, and creates no
// log. What it returns is not checked beyond being empty or the log after
// from: an engine may answer it without asking its server.
func testAppendEmpty(x *lt) {
	c1, c2 := x.client(), x.client()
	missing, p := x.part("missing"), x.part("p")
	for _, empty := range [][]backends.Record{nil, {}} {
		x.checkEmpty("Append of no records to a partition with no log", x.append(c1, missing, backends.Pos{}, empty))
	}
	rs := logRecs("p", 3)
	x.append(c2, p, backends.Pos{}, rs[:2])
	for _, empty := range [][]backends.Record{nil, {}} {
		tail := x.append(c1, p, backends.Pos{}, empty)
		if tail.Restart || len(tail.Entries) > 0 {
			x.checkTail("Append of no records", tail, backends.Pos{}, rs[:2], 0)
		}
	}
	x.checkTail("Append after the empty ones", x.append(c1, p, posOf(rs, 1), rs[2:]), posOf(rs, 1), rs[2:], 1)
	x.checkTail("Read", x.read(c2, p, backends.Pos{}), backends.Pos{}, rs, 0)
	x.checkEmpty("Read of the partition only empty Appends named", x.read(c2, missing, backends.Pos{}))
	if names := x.partitions(c2); !slices.Equal(names, []string{p}) {
		x.t.Fatalf("Partitions lists %q, want only %q (an empty Append creates no log)", names, p)
	}
}

// FailedAppend: an Append that fails with an error not matching
// ErrOutcomeUnknown appended nothing. Provoked with a cancelled context;
// an engine that appends anyway must report success.
func testFailedAppend(x *lt) {
	c1, c2 := x.client(), x.client()
	p := x.part("p")
	rs := logRecs("p", 3)
	x.append(c1, p, backends.Pos{}, rs[:1])
	ctx, cancel := context.WithCancel(x.ctx)
	cancel()
	_, err := c1.Append(ctx, p, posOf(rs, 0), rs[1:2])
	got := x.read(c2, p, backends.Pos{})
	switch {
	case err == nil:
		x.checkTail("Read after an Append with a cancelled context that succeeded", got, backends.Pos{}, rs[:2], 0)
	case errors.Is(err, backends.ErrOutcomeUnknown):
		if len(got.Entries) != 1 {
			x.checkTail("Read after an Append of unknown outcome", got, backends.Pos{}, rs[:2], 0)
		}
	default:
		x.checkTail(fmt.Sprintf("Read after an Append that failed (%v)", err), got, backends.Pos{}, rs[:1], 0)
	}
	end := got.End(backends.Pos{})
	x.append(c1, p, end, rs[2:])
	x.checkTail("Read", x.read(c2, p, end), end, rs[2:], 0)
}

// span is a range of global indexes an entry was given.
type span struct {
	base, n, id uint64
	partition   string
}

// Indexes: the ranges of global indexes the entries are given never
// overlap, whatever the partition and the client, and a log deleted and
// begun anew gets new ones too; reads give each entry its Base.
func testLogIndexes(x *lt) {
	clients := []backends.Log{x.client(), x.client()}
	parts := []string{x.part("a"), x.part("b"), x.part("c")}
	sizes := []uint64{1, 0, 3, 1, 1000, 2, 1 << 20}
	const workers, appends = 4, 12
	var mu sync.Mutex
	var spans []span
	byID := map[uint64]span{}
	keep := func(tail backends.Tail, p string, rs []backends.Record) error {
		own := tail.Entries[len(tail.Entries)-len(rs):]
		mu.Lock()
		defer mu.Unlock()
		for i, e := range own {
			if e.ID != rs[i].ID {
				return fmt.Errorf("Append's entry %d has ID %#x, want %#x", i, e.ID, rs[i].ID)
			}
			s := span{base: e.Base, n: rs[i].Indexes, id: e.ID, partition: p}
			byID[e.ID] = s
			if s.n > 0 {
				spans = append(spans, s)
			}
		}
		return nil
	}
	runWorkers(x.t, workers, func(w int) error {
		c := clients[w%2]
		pos := map[string]backends.Pos{}
		for i := range appends {
			p := parts[(w+i)%len(parts)]
			rs := logRecs(fmt.Sprintf("w%d/%d", w, i), 1+(w+i)%3)
			for j := range rs {
				rs[j].Indexes = sizes[(w+i+j)%len(sizes)]
			}
			tail, err := c.Append(x.ctx, p, pos[p], rs)
			if err != nil {
				return err
			}
			if tail.Restart || len(tail.Entries) < len(rs) {
				return fmt.Errorf("Append of %d records after %v: Restart %t, entries %s", len(rs), pos[p], tail.Restart, describe(tail.Entries))
			}
			if err := keep(tail, p, rs); err != nil {
				return err
			}
			pos[p] = tail.End(pos[p])
		}
		return nil
	})
	if x.t.Failed() {
		return
	}
	// Empty the first partition's log and append to it again.
	end := x.end(clients[0], parts[0])
	x.compact(clients[0], parts[0], end, nil)
	rs := logRecs("anew", 2)
	rs[0].Indexes, rs[1].Indexes = 5, 1
	tail := x.append(clients[1], parts[0], end, rs)
	x.checkTail("Append to an emptied log", tail, end, rs, 2)
	if err := keep(tail, parts[0], rs); err != nil {
		x.t.Fatal(err)
	}
	for _, p := range parts {
		for _, e := range x.read(clients[1], p, backends.Pos{}).Entries {
			if s, ok := byID[e.ID]; ok && s.n > 0 && e.Base != s.base {
				x.t.Fatalf("partition %q, entry %d: Read gives Base %d, its Append gave %d", p, e.N, e.Base, s.base)
			}
		}
	}
	slices.SortFunc(spans, func(a, b span) int { return cmpUint(a.base, b.base) })
	for i, s := range spans {
		if s.base > math.MaxUint64-s.n {
			x.t.Fatalf("entry %#x of %q: %d indexes from %d overflow", s.id, s.partition, s.n, s.base)
		}
		if i > 0 {
			if prev := spans[i-1]; prev.base+prev.n > s.base {
				x.t.Fatalf("global indexes overlap: entry %#x of %q has %d from %d, entry %#x of %q has %d from %d",
					prev.id, prev.partition, prev.n, prev.base, s.id, s.partition, s.n, s.base)
			}
		}
	}
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// ReadAfter: Read returns the entries after the position it is given, with
// their Data; at the end, an empty Tail.
func testReadAfter(x *lt) {
	c1, c2 := x.client(), x.client()
	p := x.part("p")
	rs := logRecs("p", 5)
	x.append(c1, p, backends.Pos{}, rs[:2])
	x.append(c1, p, posOf(rs, 1), rs[2:])
	x.checkTail("Read from the start", x.read(c2, p, backends.Pos{}), backends.Pos{}, rs, 0)
	for i := range rs {
		from := posOf(rs, i)
		x.checkTail("Read", x.read(c2, p, from), from, rs[i+1:], 0)
	}
	x.checkEmpty("Read at the end", x.read(c1, p, posOf(rs, 4)))
}

// ReadMissing: a partition with no log reads as an empty log: the zero Pos
// gets an empty Tail, another Pos a Restart with no snapshot and no
// entries.
func testLogReadMissing(x *lt) {
	l := x.client()
	p := x.part("never")
	x.checkEmpty("Read of a partition with no log", x.read(l, p, backends.Pos{}))
	from := backends.Pos{N: 3, ID: newID()}
	x.checkRestart("Read of a partition with no log after "+fmt.Sprint(from), x.read(l, p, from), nil, backends.Pos{}, nil, 0)
}

// RestartOtherID: a position whose number the log holds with another
// record ID (a log begun anew, a failover) is not held: Read and Append
// after it Restart from the snapshot (none here) at its position.
func testRestartOtherID(x *lt) {
	c1, c2 := x.client(), x.client()
	p := x.part("p")
	rs := logRecs("p", 3)
	x.append(c1, p, backends.Pos{}, rs)
	for _, i := range []int{0, 1, 2} {
		from := backends.Pos{N: uint64(i) + 1, ID: otherID(rs[i].ID)}
		x.checkRestart(fmt.Sprintf("Read after %v (entry %d has ID %#x)", from, i+1, rs[i].ID), x.read(c2, p, from), nil, backends.Pos{}, rs, 0)
	}
	more := logRecs("more", 1)
	from := backends.Pos{N: 3, ID: otherID(rs[2].ID)}
	x.checkRestart(fmt.Sprintf("Append after %v", from), x.append(c2, p, from, more), nil, backends.Pos{}, slices.Concat(rs, more), 1)
}

// RestartPastEnd: a position past the log's end is not held: Read and
// Append after it Restart.
func testRestartPastEnd(x *lt) {
	c1, c2 := x.client(), x.client()
	p := x.part("p")
	rs := logRecs("p", 3)
	x.append(c1, p, backends.Pos{}, rs)
	for _, n := range []uint64{4, 1000} {
		from := backends.Pos{N: n, ID: newID()}
		x.checkRestart(fmt.Sprintf("Read after %v, past the end", from), x.read(c2, p, from), nil, backends.Pos{}, rs, 0)
	}
	more := logRecs("more", 2)
	from := backends.Pos{N: 7, ID: newID()}
	x.checkRestart(fmt.Sprintf("Append after %v, past the end", from), x.append(c2, p, from, more), nil, backends.Pos{}, slices.Concat(rs, more), 2)
}

// CompactRead: after Compact at an entry, a reader before it (or at a
// position not held) gets a Restart from the snapshot at that entry, then
// the entries after it; a reader at it or after it goes on.
func testCompactRead(x *lt) {
	c1, c2 := x.client(), x.client()
	p := x.part("p")
	rs := logRecs("p", 10)
	x.append(c1, p, backends.Pos{}, rs[:6])
	x.append(c1, p, posOf(rs, 5), rs[6:])
	at, snap := posOf(rs, 4), []byte("state after 5")
	x.compact(c1, p, at, snap)
	for _, from := range []backends.Pos{{}, posOf(rs, 0), posOf(rs, 2), posOf(rs, 3), {N: 5, ID: otherID(rs[4].ID)}, {N: 11, ID: newID()}} {
		x.checkRestart(fmt.Sprintf("Read after %v", from), x.read(c2, p, from), snap, at, rs[5:], 0)
	}
	for _, i := range []int{4, 6, 9} {
		from := posOf(rs, i)
		x.checkTail("Read", x.read(c2, p, from), from, rs[i+1:], 0)
	}
	more := logRecs("more", 1)
	x.checkRestart("Append after "+fmt.Sprint(posOf(rs, 1)), x.append(c2, p, posOf(rs, 1), more), snap, at, slices.Concat(rs[5:], more), 1)
	x.checkRestart("Read from the start", x.read(c1, p, backends.Pos{}), snap, at, slices.Concat(rs[5:], more), 0)
}

// CompactLast: Compact at the last entry leaves a log of only a snapshot;
// its numbering goes on.
func testCompactLast(x *lt) {
	c1, c2 := x.client(), x.client()
	p := x.part("p")
	rs := logRecs("p", 4)
	x.append(c1, p, backends.Pos{}, rs[:3])
	at, snap := posOf(rs, 2), []byte("state after 3")
	x.compact(c2, p, at, snap)
	x.checkRestart("Read from the start", x.read(c2, p, backends.Pos{}), snap, at, nil, 0)
	x.checkEmpty("Read at the snapshot", x.read(c2, p, at))
	x.checkTail("Append at the snapshot", x.append(c1, p, at, rs[3:]), at, rs[3:], 1)
	x.checkRestart("Read from the start", x.read(c2, p, backends.Pos{}), snap, at, rs[3:], 0)
	if names := x.partitions(c2); !slices.Equal(names, []string{p}) {
		x.t.Fatalf("Partitions lists %q, want %q", names, []string{p})
	}
}

// CompactNoop: Compact does nothing, and returns no error, when the log no
// longer holds at (dropped, another ID, past the end, no log) or already
// has a snapshot at or after it.
func testCompactNoop(x *lt) {
	c1, c2 := x.client(), x.client()
	p := x.part("p")
	rs := logRecs("p", 10)
	x.append(c1, p, backends.Pos{}, rs)
	at, snap := posOf(rs, 4), []byte("state after 5")
	x.compact(c1, p, backends.Pos{N: 5, ID: otherID(rs[4].ID)}, []byte("at another ID"))
	x.compact(c1, p, backends.Pos{N: 11, ID: newID()}, []byte("past the end"))
	x.checkTail("Read after Compacts at positions not held", x.read(c2, p, backends.Pos{}), backends.Pos{}, rs, 0)
	x.compact(c1, p, at, snap)
	x.compact(c2, p, posOf(rs, 2), []byte("older, dropped"))
	x.compact(c2, p, at, []byte("as old"))
	x.checkRestart("Read after Compacts no newer than the snapshot", x.read(c2, p, backends.Pos{}), snap, at, rs[5:], 0)
	at8, snap8 := posOf(rs, 7), []byte("state after 8")
	x.compact(c2, p, at8, snap8)
	x.compact(c1, p, at, []byte("older, held no more"))
	for _, from := range []backends.Pos{{}, at} {
		x.checkRestart(fmt.Sprintf("Read after %v", from), x.read(c1, p, from), snap8, at8, rs[8:], 0)
	}
	missing := x.part("missing")
	x.compact(c1, missing, backends.Pos{N: 1, ID: newID()}, []byte("no log"))
	x.compact(c1, missing, backends.Pos{}, []byte("no log"))
	x.checkEmpty("Read of a partition only Compact named", x.read(c2, missing, backends.Pos{}))
	if names := x.partitions(c2); !slices.Equal(names, []string{p}) {
		x.t.Fatalf("Partitions lists %q, want only %q (a Compact with no log creates none)", names, p)
	}
}

// Emptied: Compact with a nil snapshot at the last entry empties the log:
// a reader anywhere else restarts from the empty state at that entry, a
// reader there goes on, numbering goes on, and a reader blocked there
// wakes on the next Append; at any other position it does nothing.
func testLogEmptied(x *lt) {
	c1, c2 := x.client(), x.client()
	p := x.part("p")
	rs := logRecs("p", 3)
	x.append(c1, p, backends.Pos{}, rs)
	x.compact(c2, p, posOf(rs, 1), nil)
	x.compact(c2, p, backends.Pos{N: 3, ID: otherID(rs[2].ID)}, nil)
	x.compact(c2, p, backends.Pos{N: 4, ID: newID()}, nil)
	x.checkTail("Read after empties at positions other than the last", x.read(c1, p, backends.Pos{}), backends.Pos{}, rs, 0)

	end := posOf(rs, 2)
	x.compact(c2, p, end, nil)
	x.checkRestart("Read of an emptied log from the start", x.read(c1, p, backends.Pos{}), nil, end, nil, 0)
	x.checkRestart("Read of an emptied log from before its end", x.read(c1, p, posOf(rs, 0)), nil, end, nil, 0)
	x.checkTail("Read of an emptied log from its end", x.read(c1, p, end), end, nil, 0)
	waiting := readAsync(x.ctx, c1, p, end, 5*time.Second)
	x.waiting("a Read waiting at an emptied log's end", waiting)
	anew := logRecs("anew", 2)
	tail := x.append(c2, p, end, anew[:1])
	x.checkTail("Append to an emptied log", tail, end, anew[:1], 1)
	if tail.Entries[0].N != end.N+1 {
		x.t.Fatalf("Append to an emptied log numbered %d, want %d: numbering goes on", tail.Entries[0].N, end.N+1)
	}
	got := x.returned("a Read waiting at an emptied log's end", waiting)
	if got.err != nil || len(got.tail.Entries) != 1 || got.tail.Entries[0].ID != anew[0].ID {
		x.t.Fatalf("a Read waiting at an emptied log's end returned %s, %v; want the new entry", describe(got.tail.Entries), got.err)
	}
	x.checkRestart("Append after the old log's first entry", x.append(c1, p, posOf(rs, 0), anew[1:]), nil, end, anew, 1)

	// A log of only a snapshot is emptied at its snapshot's entry.
	at := x.end(c1, p)
	x.compact(c1, p, at, []byte("state after 5"))
	x.compact(c2, p, at, nil)
	x.checkRestart("Read of a compacted log emptied", x.read(c1, p, backends.Pos{}), nil, at, nil, 0)
	x.checkTail("Read of a compacted log emptied, at its snapshot", x.read(c1, p, at), at, nil, 0)
}

// result is what a Read in a goroutine returned, and when.
type result struct {
	tail backends.Tail
	err  error
	at   time.Time
}

// readAsync runs Read in a goroutine.
func readAsync(ctx context.Context, l backends.Log, p string, from backends.Pos, wait time.Duration) <-chan result {
	ch := make(chan result, 1)
	go func() {
		tail, err := l.Read(ctx, p, from, wait)
		ch <- result{tail, err, time.Now()}
	}()
	return ch
}

// waiting checks that the Read of ch has not returned after a while.
func (x *lt) waiting(what string, ch <-chan result) {
	x.t.Helper()
	select {
	case r := <-ch:
		x.t.Fatalf("%s returned before anything happened: Restart %t, entries %s, error %v", what, r.tail.Restart, describe(r.tail.Entries), r.err)
	case <-time.After(50 * time.Millisecond):
	}
}

// returned returns the result of ch, failing if it takes longer than
// prompt from now.
func (x *lt) returned(what string, ch <-chan result) result {
	x.t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(prompt):
		x.t.Fatalf("%s: no return within %v", what, prompt)
		return result{}
	}
}

// WaitAppend: a Read with a wait, at the end of a log or of a partition
// with no log, returns once another client appends, with the entries.
func testWaitAppend(x *lt) {
	reader, writer := x.client(), x.client()
	p, fresh := x.part("p"), x.part("fresh")
	rs := logRecs("p", 3)
	x.append(writer, p, backends.Pos{}, rs[:1])
	for _, c := range []struct {
		what string
		p    string
		from backends.Pos
		rs   []backends.Record
	}{
		{"Read waiting at the end of a log", p, posOf(rs, 0), rs[1:]},
		{"Read waiting on a partition with no log", fresh, backends.Pos{}, logRecs("fresh", 1)},
	} {
		ch := readAsync(x.ctx, reader, c.p, c.from, 10*time.Second)
		x.waiting(c.what, ch)
		x.append(writer, c.p, c.from, c.rs)
		r := x.returned(c.what+", after another client's Append", ch)
		if r.err != nil {
			x.t.Fatalf("%s: %v", c.what, r.err)
		}
		x.checkTail(c.what, r.tail, c.from, c.rs, 0)
	}
}

// WaitElapses: a Read with a wait that nothing answers returns an empty
// Tail once the wait has passed.
func testWaitElapses(x *lt) {
	l := x.client()
	p := x.part("p")
	rs := logRecs("p", 1)
	x.append(l, p, backends.Pos{}, rs)
	const wait = 200 * time.Millisecond
	for _, c := range []struct {
		what string
		p    string
		from backends.Pos
	}{
		{"Read waiting at the end of a log", p, posOf(rs, 0)},
		{"Read waiting on a partition with no log", x.part("never"), backends.Pos{}},
	} {
		start := time.Now()
		tail, err := l.Read(x.ctx, c.p, c.from, wait)
		elapsed := time.Since(start)
		if err != nil {
			x.t.Fatalf("%s: %v", c.what, err)
		}
		x.checkEmpty(c.what, tail)
		// A little early is allowed, for a server's clock of milliseconds.
		if elapsed < wait*3/4 || elapsed > wait+2*time.Second {
			x.t.Fatalf("%s for %v returned after %v", c.what, wait, elapsed)
		}
	}
}

// WaitContext: a Read waiting returns its context's error when the
// context ends first.
func testWaitContext(x *lt) {
	l := x.client()
	p := x.part("p")
	rs := logRecs("p", 1)
	x.append(l, p, backends.Pos{}, rs)
	ctx, cancel := context.WithCancel(x.ctx)
	defer cancel()
	ch := readAsync(ctx, l, p, posOf(rs, 0), 10*time.Second)
	x.waiting("Read waiting", ch)
	cancel()
	r := x.returned("Read waiting, after its context was cancelled", ch)
	if !errors.Is(r.err, context.Canceled) {
		x.t.Fatalf("Read waiting when its context was cancelled: error %v, Restart %t, entries %s; want context.Canceled", r.err, r.tail.Restart, describe(r.tail.Entries))
	}
}

// WaitClose: a Read waiting returns ErrClosed at once when its client is
// closed.
func testWaitClose(x *lt) {
	l, other := x.client(), x.client()
	p := x.part("p")
	rs := logRecs("p", 1)
	x.append(l, p, backends.Pos{}, rs)
	ch := readAsync(x.ctx, l, p, posOf(rs, 0), 10*time.Second)
	x.waiting("Read waiting", ch)
	start := time.Now()
	if err := l.Close(); err != nil {
		x.t.Fatalf("Close: %v", err)
	}
	r := x.returned("Read waiting, after Close", ch)
	if elapsed := r.at.Sub(start); elapsed > prompt {
		x.t.Fatalf("Read waiting returned %v after Close began", elapsed)
	}
	if !errors.Is(r.err, backends.ErrClosed) {
		x.t.Fatalf("Read waiting when its client closed: error %v, want ErrClosed", r.err)
	}
	x.checkTail("another client's Read", x.read(other, p, backends.Pos{}), backends.Pos{}, rs, 0)
}

// Closed: after Close every call returns ErrClosed and does nothing; the
// server's other clients go on.
func testLogClosed(x *lt) {
	l, other := x.client(), x.client()
	p := x.part("p")
	rs := logRecs("p", 3)
	x.append(l, p, backends.Pos{}, rs[:2])
	if err := l.Close(); err != nil {
		x.t.Fatalf("Close: %v", err)
	}
	check := func(call string, err error) {
		x.t.Helper()
		if !errors.Is(err, backends.ErrClosed) {
			x.t.Fatalf("%s after Close: error %v, want ErrClosed", call, err)
		}
	}
	_, err := l.Append(x.ctx, p, posOf(rs, 1), rs[2:])
	check("Append", err)
	_, err = l.Read(x.ctx, p, backends.Pos{}, 0)
	check("Read", err)
	start := time.Now()
	_, err = l.Read(x.ctx, p, posOf(rs, 1), 10*time.Second)
	check("Read with a wait", err)
	if elapsed := time.Since(start); elapsed > prompt {
		x.t.Fatalf("Read with a wait after Close took %v", elapsed)
	}
	check("Compact", l.Compact(x.ctx, p, posOf(rs, 1), []byte("snapshot")))
	check("Compact with a nil snapshot", l.Compact(x.ctx, p, posOf(rs, 1), nil))
	_, err = l.Partitions(x.ctx)
	check("Partitions", err)
	x.checkTail("another client's Read", x.read(other, p, backends.Pos{}), backends.Pos{}, rs[:2], 0)
	x.checkTail("another client's Append", x.append(other, p, posOf(rs, 1), rs[2:]), posOf(rs, 1), rs[2:], 1)
}

// Partitions: lists, sorted, the partitions that have a log (compacted
// ones too); not those only read, compacted or given empty Appends; an
// emptied log drops out (at once, or soon after: "may include one just
// emptied"), and comes back when appended to.
func testLogPartitions(x *lt) {
	c1, c2 := x.client(), x.client()
	var want []string
	for i, name := range []string{"b", "a", "a/b", "a:b", "a.b", "B", "0", "z-z", "a_b"} {
		p := x.part(name)
		x.append([]backends.Log{c1, c2}[i%2], p, backends.Pos{}, logRecs(name, 1))
		want = append(want, p)
	}
	slices.Sort(want)
	x.read(c1, x.part("read"), backends.Pos{})
	x.read(c1, x.part("read"), backends.Pos{N: 2, ID: newID()})
	x.compact(c1, x.part("compacted"), backends.Pos{N: 1, ID: newID()}, []byte("snapshot"))
	x.append(c1, x.part("empty"), backends.Pos{}, nil)
	for _, c := range []backends.Log{c1, c2} {
		if got := x.partitions(c); !slices.Equal(got, want) {
			x.t.Fatalf("Partitions lists %q, want %q", got, want)
		}
	}
	// A compacted log is listed; an emptied one drops out.
	gone, kept := x.part("b"), x.part("a")
	x.compact(c1, kept, x.end(c1, kept), []byte("snapshot"))
	goneAt := x.end(c1, gone)
	x.compact(c2, gone, goneAt, nil)
	left := slices.DeleteFunc(slices.Clone(want), func(p string) bool { return p == gone })
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got := x.partitions(c1)
		if slices.Equal(got, left) {
			break
		}
		if !slices.Equal(got, want) || time.Now().After(deadline) {
			x.t.Fatalf("Partitions lists %q after %q was emptied, want %q", got, gone, left)
		}
	}
	x.append(c1, gone, goneAt, logRecs("anew", 1))
	if got := x.partitions(c2); !slices.Equal(got, want) {
		x.t.Fatalf("Partitions lists %q after %q was appended to again, want %q", got, gone, want)
	}
}

// Concurrent: goroutines appending to one partition through two clients,
// and one following it with waiting Reads, each see one log: every record
// once, numbers dense, the same entry at each number, never a Restart.
func testLogConcurrent(x *lt) {
	clients := []backends.Log{x.client(), x.client()}
	p := x.part("p")
	const workers, appends = 4, 40
	total := 0
	for w := range workers {
		for i := range appends {
			total += 1 + (w+i)%2
		}
	}
	var mu sync.Mutex
	seen := map[uint64]backends.Entry{} // by N: the entry first seen there
	learn := func(who string, es []backends.Entry) error {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range es {
			if s, ok := seen[e.N]; !ok {
				seen[e.N] = e
			} else if s.ID != e.ID || s.Time != e.Time || s.Base != e.Base || (s.Data != nil && e.Data != nil && !bytes.Equal(s.Data, e.Data)) {
				return fmt.Errorf("%s sees entry %d as {ID:%#x Time:%d Base:%d Data:%s}, another saw {ID:%#x Time:%d Base:%d Data:%s}",
					who, e.N, e.ID, e.Time, e.Base, short(e.Data), s.ID, s.Time, s.Base, short(s.Data))
			} else if s.Data == nil {
				seen[e.N] = e
			}
		}
		return nil
	}
	// follow checks a tail read after from and returns its end.
	follow := func(who string, tail backends.Tail, from backends.Pos, own []backends.Record) (backends.Pos, error) {
		if tail.Restart {
			return from, fmt.Errorf("%s after %v: Restart at %v, in a log never compacted", who, from, tail.Start)
		}
		for i, e := range tail.Entries {
			if e.N != from.N+uint64(i)+1 {
				return from, fmt.Errorf("%s after %v: entry %d has N %d (entries %s)", who, from, i, e.N, describe(tail.Entries))
			}
		}
		if n := len(tail.Entries); n < len(own) {
			return from, fmt.Errorf("%s after %v: %d entries, fewer than the %d appended", who, from, n, len(own))
		}
		mine := tail.Entries[len(tail.Entries)-len(own):]
		for i := range mine {
			if mine[i].ID != own[i].ID || mine[i].Data != nil {
				return from, fmt.Errorf("%s: own entry %d is {ID:%#x, %d bytes of Data}, want {ID:%#x, nil Data}", who, i, mine[i].ID, len(mine[i].Data), own[i].ID)
			}
		}
		for i, e := range tail.Entries {
			if !x.plausible(e.Time) {
				return from, fmt.Errorf("%s: entry %d has Time %d", who, i, e.Time)
			}
		}
		return tail.End(from), learn(who, tail.Entries)
	}
	var recsMu sync.Mutex
	appended := map[uint64][]byte{}          // ID -> Data
	ctx, cancel := context.WithCancel(x.ctx) // the follower's: ended if a worker fails
	defer cancel()
	errs := make(chan error, 1)
	go func() { // the follower
		errs <- func() error {
			var from backends.Pos
			for from.N < uint64(total) {
				tail, err := clients[1].Read(ctx, p, from, 200*time.Millisecond)
				if err != nil {
					return fmt.Errorf("follower: %w", err)
				}
				if from, err = follow("follower", tail, from, nil); err != nil {
					return err
				}
			}
			return nil
		}()
	}()
	runWorkers(x.t, workers, func(w int) error {
		c := clients[w%2]
		var from backends.Pos
		for i := range appends {
			rs := logRecs(fmt.Sprintf("w%d/%d", w, i), 1+(w+i)%2)
			recsMu.Lock()
			for _, r := range rs {
				appended[r.ID] = r.Data
			}
			recsMu.Unlock()
			tail, err := c.Append(x.ctx, p, from, rs)
			if err != nil {
				return err
			}
			if from, err = follow("Append", tail, from, rs); err != nil {
				return err
			}
		}
		return nil
	})
	if x.t.Failed() {
		cancel()
		<-errs
		return
	}
	if err := <-errs; err != nil {
		x.t.Fatal(err)
	}
	all := x.read(clients[0], p, backends.Pos{})
	if _, err := follow("final Read", all, backends.Pos{}, nil); err != nil {
		x.t.Fatal(err)
	}
	if len(all.Entries) != total {
		x.t.Fatalf("final Read: %d entries, want the %d appended", len(all.Entries), total)
	}
	for _, e := range all.Entries {
		data, ok := appended[e.ID]
		if !ok {
			x.t.Fatalf("entry %d has ID %#x, appended never or twice", e.N, e.ID)
		}
		if !bytes.Equal(e.Data, data) {
			x.t.Fatalf("entry %d: Data %s, want %s", e.N, short(e.Data), short(data))
		}
		delete(appended, e.ID)
	}
}

// LargeRecords: records of 1 MiB, and a snapshot of 1 MiB, round-trip.
func testLargeRecords(x *lt) {
	c1, c2 := x.client(), x.client()
	p := x.part("p")
	rs := logRecs("p", 3)
	rs[0].Data = value(x.prefix+"big0", 1<<20)
	rs[2].Data = value(x.prefix+"big2", 1<<20)
	x.checkTail("Append", x.append(c1, p, backends.Pos{}, rs), backends.Pos{}, rs, 3)
	more := logRecs("more", 1)
	x.checkTail("another client's Append", x.append(c2, p, backends.Pos{}, more), backends.Pos{}, slices.Concat(rs, more), 1)
	x.checkTail("Read", x.read(c2, p, backends.Pos{}), backends.Pos{}, slices.Concat(rs, more), 0)
	snap := value(x.prefix+"snapshot", 1<<20)
	x.compact(c1, p, posOf(rs, 1), snap)
	x.checkRestart("Read after Compact", x.read(c2, p, backends.Pos{}), snap, posOf(rs, 1), slices.Concat(rs[2:], more), 0)
}

// RecordValues: record IDs of all 64 bits and Data of every byte value
// (or none) round-trip, and positions tell IDs apart in every bit.
func testRecordValues(x *lt) {
	c1, c2 := x.client(), x.client()
	p := x.part("p")
	every := make([]byte, 256)
	for i := range every {
		every[i] = byte(i)
	}
	rs := []backends.Record{
		{ID: math.MaxUint64, Data: every},
		{ID: 1, Data: nil},
		{ID: 1<<60 + 1, Data: []byte{}},
		{ID: 1 << 63, Data: []byte{0}},
		{ID: 1<<53 + 1, Data: []byte("\xff\xfe")},
	}
	x.checkTail("Append", x.append(c1, p, backends.Pos{}, rs), backends.Pos{}, rs, len(rs))
	x.checkTail("Read", x.read(c2, p, backends.Pos{}), backends.Pos{}, rs, 0)
	for i, other := range []uint64{math.MaxUint64 - 1, 3, 1 << 60, 1<<63 + 1, 1 << 53} {
		from := backends.Pos{N: uint64(i) + 1, ID: other}
		x.checkRestart(fmt.Sprintf("Read after %v (entry %d has ID %#x)", from, i+1, rs[i].ID), x.read(c2, p, from), nil, backends.Pos{}, rs, 0)
	}
	x.checkTail("Read", x.read(c2, p, posOf(rs, 2)), posOf(rs, 2), rs[3:], 0)
	x.compact(c1, p, backends.Pos{N: 3, ID: 1 << 60}, []byte("at another ID"))
	x.checkTail("Read after a Compact at another ID", x.read(c2, p, backends.Pos{}), backends.Pos{}, rs, 0)
	x.compact(c1, p, posOf(rs, 2), []byte("after 3"))
	x.checkRestart("Read after Compact", x.read(c2, p, backends.Pos{}), []byte("after 3"), posOf(rs, 2), rs[3:], 0)
}

// PartitionNames: partitions of any name a tq partition may have (letters,
// digits, "_.:/-", up to 255 bytes), and names with braces and percent
// signs, are distinct logs, each listed under its own name.
func testPartitionNames(x *lt) {
	c1, c2 := x.client(), x.client()
	names := []string{
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:/-",
		"a", "A", "a:", "a:b", "a/b", "a.b", "a_b", "a-b", ":", "/", "..", "-",
		"{a}", "a{b}c", "{", "}", "}{", "{}", "{a}:b", "a}:l",
		"%", "%%", "%25", "%7Ba%7D", "a%2Fb", "%s%d", "%{",
		strings.Repeat("x", max(1, 255-len(x.prefix))),
	}
	parts := make([]string, len(names))
	rs := make([]backends.Record, len(names))
	for i, name := range names {
		parts[i] = x.part(name)
		rs[i] = backends.Record{ID: newID(), Data: []byte(name)}
		x.checkTail(fmt.Sprintf("Append to %q", parts[i]), x.append([]backends.Log{c1, c2}[i%2], parts[i], backends.Pos{}, rs[i:i+1]), backends.Pos{}, rs[i:i+1], 1)
	}
	for i, p := range parts {
		x.checkTail(fmt.Sprintf("Read of %q", p), x.read(c2, p, backends.Pos{}), backends.Pos{}, rs[i:i+1], 0)
	}
	want := slices.Clone(parts)
	slices.Sort(want)
	if got := x.partitions(c1); !slices.Equal(got, want) {
		x.t.Fatalf("Partitions lists %q, want %q", got, want)
	}
}
