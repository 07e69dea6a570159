package backendtest_test

import (
	"testing"

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
	backendtest.RunEngine(t, newToy)
}

// The toy engine passes the client suite too, bare and wrapped (a wrapper
// built with Wrap loses nothing the client relies on). Clients of one
// engine share its MetaStore, as processes sharing a server would.
func TestToyEngineClient(t *testing.T) {
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
	tqtest.Run(t, func(t *testing.T) tqtest.Engine { return tqtest.Over(newToyShared(t)) })
}

// toySharedModel is a model environment over a fresh toy server: each
// client applies the rules to the log in a copy of its own.
func toySharedModel(t *testing.T) tqtest.ModelEnv {
	srv := toylog.NewServer(nil)
	return tqtest.ModelEnv{Open: func(t *testing.T) *tq.Client {
		e := srv.Engine()
		c, err := tq.New(backends.Engine{Data: e.Data, Log: e.Log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(); _ = e.Close() })
		return c
	}}
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
