package backendtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest"
	"github.com/tqgo/tqgo/backends/backendtest/toykv"
	"github.com/tqgo/tqgo/backends/backendtest/toylog"
	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/internal/replica"
	"github.com/tqgo/tqgo/tq"
	"github.com/tqgo/tqgo/tq/tqtest"
)

// newToy is the toy engine: a map behind a mutex made a Store by
// backends.FromKV, process-local, so an in-process MetaStore serves it.
func newToy(t *testing.T) backends.Engine {
	data := backends.FromKV(toykv.New())
	t.Cleanup(func() { _ = data.Close() })
	return backends.Engine{Data: data, Local: true}
}

// The toy engine passes the engine suites: an engine needs no more than
// KV's four methods.
func TestToyEngine(t *testing.T) {
	t.Parallel()
	backendtest.RunEngine(t, newToy)
}

// The toy engine passes the client suite too, bare and wrapped (a wrapper
// built with Wrap loses nothing the client relies on). Clients of one
// engine share its MetaStore, as processes sharing a server would.
func TestToyEngineClient(t *testing.T) {
	t.Parallel()
	for _, wrapped := range []bool{false, true} {
		name := "bare"
		if wrapped {
			name = "wrapped"
		}
		t.Run(name, func(t *testing.T) {
			tqtest.Run(t, func(t *testing.T) tqtest.Engine {
				eng := newToy(t)
				eng.Meta = memory.NewMetaStore()
				if wrapped {
					eng = backendtest.Wrap(eng, &backendtest.Faulty{})
				}
				return tqtest.Over(eng)
			})
		})
	}
}

// newToyLog is RunLog's newServer over a fresh toylog server per subtest;
// its clients are closed at the subtest's end.
func newToyLog(t *testing.T) func() backends.Log {
	srv := toylog.NewServer(nil)
	return func() backends.Log {
		e := srv.Engine()
		t.Cleanup(func() { _ = e.Close() })
		return e.Log
	}
}

// The toy shared engine's Log passes the log suite, on a server per
// subtest and on one server for every subtest (as a real server is run:
// the suite's partitions are apart by prefix).
func TestToyLog(t *testing.T) {
	t.Run("fresh", func(t *testing.T) { backendtest.RunLog(t, newToyLog) })
	t.Run("shared", func(t *testing.T) {
		srv := toylog.NewServer(nil)
		backendtest.RunLog(t, func(t *testing.T) func() backends.Log {
			return func() backends.Log {
				e := srv.Engine()
				t.Cleanup(func() { _ = e.Close() })
				return e.Log
			}
		})
	})
}

// The toy shared engine's Data passes the data suite, every store a client
// of one server.
func TestToyLogStore(t *testing.T) {
	srv := toylog.NewServer(nil)
	backendtest.RunStore(t, func(t *testing.T) backends.Store {
		e := srv.Engine()
		t.Cleanup(func() { _ = e.Close() })
		return e.Data
	})
}

// newToyShared is the toy shared engine as an Engine: a client of a fresh
// server, its metadata the rules over the server's log.
func newToyShared(t *testing.T) backends.Engine {
	e := toylog.NewServer(nil).Engine()
	t.Cleanup(func() { _ = e.Close() })
	return backends.Engine{Data: e.Data, Log: e.Log}
}

// The toy shared engine passes the metadata and consumption suites, with
// the rules applied to its log.
func TestToySharedMeta(t *testing.T) {
	t.Parallel()
	newMeta := func(t *testing.T) metadata.MetaStore {
		e := newToyShared(t)
		m := replica.NewStore(e.Log, e.Data)
		t.Cleanup(func() { _ = m.Close() })
		return m
	}
	t.Run("Meta", func(t *testing.T) { backendtest.RunMeta(t, newMeta) })
	t.Run("Queue", func(t *testing.T) { backendtest.RunQueue(t, newMeta) })
}

// The toy shared engine passes the client suite: each client applies the
// rules to the log in a copy of its own, as processes do.
func TestToySharedClient(t *testing.T) {
	t.Parallel()
	tqtest.Run(t, func(t *testing.T) tqtest.Engine { return tqtest.Over(newToyShared(t)) })
}

// toySharedModel is a model environment over a fresh toy server: each
// client applies the rules to the log in a copy of its own.
func toySharedModel(t *testing.T) tqtest.ModelEnv { return toySharedModelWith(false)(t) }

// toySharedModelWith is toySharedModel whose clients put by blocks of
// indexes (tq.WithIndexBlocks) when blocks is set.
func toySharedModelWith(blocks bool) func(t *testing.T) tqtest.ModelEnv {
	return func(t *testing.T) tqtest.ModelEnv {
		srv := toylog.NewServer(nil)
		var opts []tq.Option
		if blocks {
			opts = append(opts, tq.WithIndexBlocks())
		}
		return tqtest.ModelEnv{Blocks: blocks, Open: func(t *testing.T) *tq.Client {
			e := srv.Engine()
			c, err := tq.New(backends.Engine{Data: e.Data, Log: e.Log}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close(); _ = e.Close() })
			return c
		}}
	}
}

// The toy shared engine is held to the one model of the contract, with
// two clients in copies of their own, and with its clock moved (a
// synctest bubble) so that leases and delays end.
func TestToySharedModel(t *testing.T) {
	tqtest.RunModel(t, toySharedModel)
}

func TestToySharedModelFakeClock(t *testing.T) {
	tqtest.RunModelFakeClock(t, toySharedModel)
}

// With WithIndexBlocks, puts of new keys go by blocks: the model takes
// their indexes from the engine and holds each client to its put order.
func TestToySharedModelBlocks(t *testing.T) {
	tqtest.RunModel(t, toySharedModelWith(true))
}

func TestToySharedModelBlocksFakeClock(t *testing.T) {
	tqtest.RunModelFakeClock(t, toySharedModelWith(true))
}

// A Wait stands on a partition whose log its own client's write empties
// (no rows are left): a row put after must be leased once, to the Wait or
// to another client's Claim, not to both. An emptied log restarts every
// reader from the empty state, so the state must not be emptied while a
// claim stands.
func TestToySharedWaitOverEmptiedLog(t *testing.T) {
	srv := toylog.NewServer(nil)
	ctx := t.Context()
	open := func() *tq.Client {
		e := srv.Engine()
		c, err := tq.New(backends.Engine{Data: e.Data, Log: e.Log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(); _ = e.Close() })
		return c
	}
	a, b := open(), open()
	if err := b.Put(ctx, "p", "k0", map[string]any{"f": 1}, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.ClearPartition(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	ta, err := a.Task("p", "t", []string{"f"})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		keys []string
		err  error
	}
	got := make(chan result, 1)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	go func() {
		l, err := ta.Wait(wctx, 1)
		var keys []string
		if l != nil {
			keys = l.Keys()
		}
		got <- result{keys, err}
	}()
	// Let the Wait's claim reach the log and stand (a's write of it
	// empties the log: the partition holds no row).
	time.Sleep(200 * time.Millisecond)
	if err := b.Put(ctx, "p", "k1", map[string]any{"f": 2}, nil); err != nil {
		t.Fatal(err)
	}
	tb, err := b.Task("p", "t", []string{"f"})
	if err != nil {
		t.Fatal(err)
	}
	lb, err := tb.Claim(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	var kb []string
	if lb != nil {
		kb = lb.Keys()
	}
	var ra result
	if len(kb) == 0 {
		ra = <-got
	} else {
		cancel()
		ra = <-got
	}
	if len(ra.keys) > 0 && len(kb) > 0 {
		t.Fatalf("one row leased twice: the Wait leased %v, the Claim %v", ra.keys, kb)
	}
	if len(ra.keys)+len(kb) != 1 {
		t.Fatalf("the Wait leased %v (%v), the Claim %v: want k1 leased once", ra.keys, ra.err, kb)
	}
}
