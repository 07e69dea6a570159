package redis_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/internal/replica"
)

// TestLogCompaction: many small writes make a long log, which a writer
// replaces with a snapshot; a Meta whose view predates the snapshot, and
// one that never saw the partition, read and write it correctly after.
func TestLogCompaction(t *testing.T) {
	defer replica.SetDefaultCompactAfter(1)()
	srv := redistest.Start(t)
	ctx := t.Context()
	url := srv.URL() + "?prefix=compact"
	writer := open(t, url)
	m := metaOf(writer)
	early := metaOf(open(t, url))
	if _, err := early.List(ctx, "p"); err != nil { // a view of the empty partition
		t.Fatal(err)
	}
	const n = 40
	var tagged []metadata.Reservation
	for i := range n {
		k := fmt.Sprintf("k%02d", i)
		res, err := m.Prepare(ctx, "p", []string{k}, []string{"f"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		up := fieldUpdate([]string{k}, res, "f")
		up[0].Tag = map[string]any{"i": int64(i), "even": i%2 == 0}
		if _, err := m.Commit(ctx, "p", up); err != nil {
			t.Fatal(err)
		}
		tagged = append(tagged, res[0])
	}
	// One row prepared and never committed survives the snapshot as
	// prepared: its next Prepare reserves generation 1.
	if _, err := m.Prepare(ctx, "p", []string{"pending"}, []string{"f"}, nil); err != nil {
		t.Fatal(err)
	}
	// Writers compact in the background, after their writes.
	var logLen int64
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var err error
		if logLen, err = writer.Client().XLen(ctx, "compact:{compact:p}:log").Result(); err != nil {
			t.Fatal(err)
		}
		if logLen < 2*n || time.Now().After(deadline) {
			break
		}
	}
	if logLen >= 2*n {
		t.Fatalf("log of %d entries after %d writes, want fewer (compacted)", logLen, 2*n+1)
	}
	if sn, err := writer.Client().HGet(ctx, "compact:{compact:p}:snap", "n").Int64(); err != nil || sn == 0 {
		t.Fatalf("snapshot at entry %d (%v), want one", sn, err)
	}
	fresh := metaOf(open(t, url))
	for _, r := range []struct {
		name string
		m    metadata.MetaStore
	}{{"writer", m}, {"early view", early}, {"fresh", fresh}} {
		rows, err := r.m.List(ctx, "p")
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != n {
			t.Fatalf("%s: List: %d rows, want %d", r.name, len(rows), n)
		}
		for i, row := range rows {
			if row.Index != tagged[i].Index || row.Tag["i"] != int64(i) || row.Tag["even"] != (i%2 == 0) || row.Fields["f"].Gen != 0 {
				t.Fatalf("%s: row %d: %+v", r.name, i, row)
			}
		}
	}
	res, err := early.Prepare(ctx, "p", []string{"pending", "k00"}, []string{"f"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Gens["f"] != 1 || res[1].Gens["f"] != 1 || res[1].Index != tagged[0].Index {
		t.Fatalf("Prepare after the snapshot: %+v, want generation 1 of both, k00 at index %d", res, tagged[0].Index)
	}
}

// TestCorruptLog: records this package did not write (kinds unknown,
// bodies that do not decode, counts whose size check would overflow 32
// bits) apply nothing, alike in every client: reads neither fail nor
// panic, and the rows are as before.
func TestCorruptLog(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	s := open(t, srv.URL()+"?prefix=bad")
	m := metaOf(s)
	res, err := m.Prepare(ctx, "p", []string{"a"}, []string{"f"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Commit(ctx, "p", fieldUpdate([]string{"a"}, res, "f")); err != nil {
		t.Fatal(err)
	}
	want, err := m.Lookup(ctx, "p", []string{"a"})
	if err != nil {
		t.Fatal(err)
	}
	l := open(t, srv.URL()+"?prefix=bad").Log()
	for i, rec := range []string{"", "Z", "P", "P12", "P1:\x91", "C\x91\x81", "C\x90\x91\xa1a\x01\x05\xc0", "D\x9f", "S\x90\x92",
		"C\x90\xdd\xc0\x00\x00\x00", "S\x90\xdd\xaa\xaa\xaa\xab", "Q\xa1t", "K\xa1t\x07"} {
		tail, err := l.Read(ctx, "p", backends.Pos{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(ctx, "p", tail.End(backends.Pos{}), []backends.Record{{ID: uint64(1000 + i), Data: []byte(rec)}}); err != nil {
			t.Fatal(err)
		}
		other := metaOf(open(t, srv.URL()+"?prefix=bad"))
		for _, mm := range []metadata.MetaStore{m, other} {
			rows, err := mm.Lookup(ctx, "p", []string{"a"})
			if err != nil || len(rows) != 1 || rows[0] == nil || rows[0].Index != want[0].Index || rows[0].Fields["f"].Gen != want[0].Fields["f"].Gen {
				t.Fatalf("Lookup with record %q in the log: %v, %v; want %+v", rec, rows, err, want[0])
			}
		}
	}
}
