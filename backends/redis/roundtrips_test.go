package redis_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/internal/redistest"
)

// TestRoundTrips: the engine reports, with backends.CountRoundTrips, each
// request it waits on: on its direct connections, a Write of one round, a
// WriteCommit that fits one round and a ReadRows of rows its view holds
// current take one each; a cold ReadRows (no view of the partition)
// looks the rows up first, two; a Prepare is one script. Through go-redis
// (direct=false), which the engine counts with a hook, a WriteCommit is
// the cells' MSET and then the commit, and a ReadRows one transaction (the
// log's read and the MGETs).
func TestRoundTrips(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name                            string
		query                           string
		writeCommit, readRows, prepares int64
	}{
		{"direct", "", 1, 1, 1},
		{"goredis", "&direct=false", 2, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := srv.URL() + "?prefix=rt" + tc.name + tc.query
			s := open(t, url)
			m := metaOf(s)
			ctx := t.Context()
			if err := redis.LoadScripts(ctx, s.Client()); err != nil { // as a server that ran them has them
				t.Fatal(err)
			}
			counted := func(what string, want int64, f func(ctx context.Context) error) {
				t.Helper()
				var rt backends.RoundTrips
				if err := f(rt.Attach(ctx)); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if got := rt.Load(); got != want {
					t.Errorf("%s: %d round trips counted, want %d", what, got, want)
				}
			}
			keys := []string{"a", "b", "c"}
			var res []metadata.Reservation
			prepare := func(ctx context.Context) (err error) {
				res, err = m.Prepare(ctx, "p", keys, []string{"f"}, nil)
				return err
			}
			cells := func() []backends.Cell {
				out := make([]backends.Cell, len(keys))
				for i := range keys {
					out[i] = backends.Cell{Key: backends.StorageKey(res[i].Index, "f", res[i].Gens["f"]), Head: []byte("he"), Body: []byte(fmt.Sprint("b", i))}
				}
				return out
			}
			// Loads the scripts (a first EVALSHA finds none) and gives the
			// Meta its view of p.
			if err := prepare(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := m.Lookup(ctx, "p", keys); err != nil {
				t.Fatal(err)
			}

			counted("Prepare", tc.prepares, prepare)
			counted("Write of one round", 1, func(ctx context.Context) error { return s.Write(ctx, cells()) })
			counted("Prepare", tc.prepares, prepare)
			written := cells()
			counted("WriteCommit of one round", tc.writeCommit, func(ctx context.Context) error {
				_, err := colo(m).WriteCommit(ctx, "p", written, fieldUpdate(keys, res, "f"))
				return err
			})
			read := func(m metadata.Colocated) func(ctx context.Context) error {
				return func(ctx context.Context) error {
					var dst []backends.ReadCell
					rows, err := colo(m).ReadRows(ctx, "p", keys, func(rows []*metadata.Row) ([]backends.ReadCell, error) {
						dst = make([]backends.ReadCell, len(rows))
						for i, r := range rows {
							if r == nil {
								return nil, fmt.Errorf("row %q missing", keys[i])
							}
							dst[i] = backends.ReadCell{Key: backends.StorageKey(r.Index, "f", r.Fields["f"].Gen), Head: make([]byte, 2), Body: make([]byte, 2)}
						}
						return dst, nil
					})
					if err != nil {
						return err
					}
					for i, d := range dst {
						if !d.Found || !bytes.Equal(append(d.Head, d.Body...), append(written[i].Head, written[i].Body...)) {
							return fmt.Errorf("cell of %q read %+v, want %q%q (rows %v)", keys[i], d, written[i].Head, written[i].Body, rows)
						}
					}
					return nil
				}
			}
			// go-redis's connection set-up (HELLO, CLIENT SETINFO) is not
			// the read's: the pools hold a connection first.
			if err := read(colo(m))(ctx); err != nil {
				t.Fatal(err)
			}
			counted("ReadRows of rows the view holds", tc.readRows, read(colo(m)))
			cold := metaOf(open(t, url))
			if _, err := cold.Lookup(ctx, "elsewhere", keys); err != nil { // its connections set up
				t.Fatal(err)
			}
			counted("ReadRows by a Meta with no view (cold)", 2, read(colo(cold)))
		})
	}
}
