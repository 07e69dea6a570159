package toylog_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest/toylog"
)

// The server stamps entries with the test's clock, which the test moves.
func TestClock(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2030, 1, 2, 3, 4, 5, 6000, time.UTC).UnixMicro())
	srv := toylog.NewServer(func() time.Time { return time.UnixMicro(now.Load()) })
	l := srv.Engine().Log
	defer l.Close()
	ctx := t.Context()
	tail, err := l.Append(ctx, "p", backends.Pos{}, []backends.Record{{ID: 1}, {ID: 2}})
	if err != nil {
		t.Fatal(err)
	}
	start := now.Load()
	now.Add(int64(time.Hour / time.Microsecond))
	if _, err := l.Append(ctx, "p", tail.End(backends.Pos{}), []backends.Record{{ID: 3}}); err != nil {
		t.Fatal(err)
	}
	all, err := l.Read(ctx, "p", backends.Pos{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{start, start, now.Load()}
	if len(all.Entries) != len(want) {
		t.Fatalf("%d entries, want %d", len(all.Entries), len(want))
	}
	for i, e := range all.Entries {
		if e.Time != want[i] {
			t.Errorf("entry %d: Time %d, want %d", e.N, e.Time, want[i])
		}
	}
}

// Clients share the server's cells and logs; closing one closes it alone.
func TestClients(t *testing.T) {
	srv := toylog.NewServer(nil)
	a, b := srv.Engine(), srv.Engine()
	defer b.Close()
	ctx := t.Context()
	if err := a.Data.Write(ctx, []backends.Cell{{Key: "k", Body: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Log.Append(ctx, "p", backends.Pos{}, []backends.Record{{ID: 7, Data: []byte("r")}}); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Data.Read(ctx, []backends.ReadCell{{Key: "k"}}); !errors.Is(err, backends.ErrClosed) {
		t.Fatalf("Read of a closed client's Data: %v, want ErrClosed", err)
	}
	cells := []backends.ReadCell{{Key: "k"}}
	if err := b.Data.Read(ctx, cells); err != nil || !cells[0].Found || string(cells[0].Value) != "v" {
		t.Fatalf("Read through another client: %v, found %t, value %q; want \"v\"", err, cells[0].Found, cells[0].Value)
	}
	tail, err := b.Log.Read(ctx, "p", backends.Pos{}, 0)
	if err != nil || len(tail.Entries) != 1 || string(tail.Entries[0].Data) != "r" {
		t.Fatalf("Read of the log through another client: %v, %+v", err, tail)
	}
}
