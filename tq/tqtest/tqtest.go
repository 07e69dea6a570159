package tqtest

import (
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/internal/replica"
	"github.com/tqgo/tqgo/tq"
)

// Engine is one storage engine under test. Every client Open returns
// shares the engine's store, as processes sharing one server do, so a
// test can write with one client and read with another.
type Engine struct {
	// Open returns a new client over the engine's store; Open closes it
	// when t ends.
	Open func(t *testing.T) *tq.Client
	// Data and Meta are the engine's data backend and metadata store
	// themselves (not a client's), for tests that reach under the client:
	// to tamper with a stored cell, or to look at a row's generations.
	Data backends.Store
	Meta metadata.MetaStore
}

// Run runs the suite, one subtest per rule, each on a fresh Engine from
// newEngine.
func Run(t *testing.T, newEngine func(t *testing.T) Engine) {
	t.Helper()
	for _, c := range cases() {
		t.Run(c.name, func(t *testing.T) {
			c.run(t, newEngine(t))
		})
	}
}

// testCase is one rule of the suite.
type testCase struct {
	name string
	run  func(t *testing.T, e Engine)
}

// cases lists every rule; each file of the suite contributes its own.
func cases() []testCase {
	var all []testCase
	all = append(all, tagCases()...)
	all = append(all, readCases()...)
	all = append(all, byMetaCases()...)
	all = append(all, consumeCases()...)
	all = append(all, capacityCases()...)
	all = append(all, deadlineCases()...)
	all = append(all, ratioCases()...)
	all = append(all, fieldCases()...)
	all = append(all, badInputCases()...)
	all = append(all, leaseCases()...)
	all = append(all, handBackCases()...)
	all = append(all, consumptionCases()...)
	all = append(all, deadWhyCases()...)
	all = append(all, ackingCases()...)
	all = append(all, grantedCases()...)
	return all
}

// Over is the Engine whose clients tq.New makes over eng, each closed when
// the test that opened it ends. Clients share eng's MetaStore, or, over a
// shared engine's Log, each applies the rules to the log in a copy of its
// own, as processes do; so eng must have one or the other (a Local
// engine's in-process store included).
func Over(eng backends.Engine) Engine {
	meta, _ := eng.Meta.(metadata.MetaStore) // tq.New refuses any other
	if meta == nil && eng.Log != nil {
		// A process of its own looking at the log: the rules applied to
		// it, as every client applies them.
		meta = replica.NewStore(eng.Log, eng.Data)
	}
	return Engine{
		Open: func(t *testing.T) *tq.Client {
			c, err := tq.New(eng)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			return c
		},
		Data: eng.Data,
		Meta: meta,
	}
}
