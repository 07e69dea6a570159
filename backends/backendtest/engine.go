package backendtest

import (
	"errors"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/internal/replica"
)

// RunEngine checks a whole engine: that it passes backends.Engine.Check,
// then RunStore over its Data, RunMeta and RunQueue over its Meta (when it
// has one; for an engine with a Log, the rules applied to that log, as a
// client applies them) and RunColocated when that Meta is a
// metadata.Colocated, each subtest on a fresh engine from newEngine. It
// calls newEngine once more, under t, to learn which suites apply. An
// engine's Log is held to RunLog apart: RunLog needs clients of one
// server, which newEngine need not give.
func RunEngine(t *testing.T, newEngine func(t *testing.T) backends.Engine) {
	t.Helper()
	probe := newEngine(t)
	if _, err := metadata.Of(probe); err != nil {
		t.Fatalf("the engine fails Engine.Check (or its Meta is no MetaStore): %v", err)
	}
	if probe.Log != nil {
		bare := newEngine
		probe, newEngine = withRules(t, probe), func(t *testing.T) backends.Engine { return withRules(t, bare(t)) }
	}
	t.Run("Store", func(t *testing.T) {
		RunStore(t, func(t *testing.T) backends.Store { return newEngine(t).Data })
	})
	if probe.Meta == nil {
		return
	}
	t.Run("Meta", func(t *testing.T) {
		RunMeta(t, func(t *testing.T) metadata.MetaStore { return metaOf(t, newEngine(t)) })
	})
	t.Run("Queue", func(t *testing.T) {
		RunQueue(t, func(t *testing.T) metadata.MetaStore { return metaOf(t, newEngine(t)) })
	})
	if _, ok := probe.Meta.(metadata.Colocated); ok {
		t.Run("Colocated", func(t *testing.T) { RunColocated(t, newEngine) })
	}
}

// metaOf is e's Meta as a MetaStore (see metadata.Of); it fails t if it
// is none.
func metaOf(t *testing.T, e backends.Engine) metadata.MetaStore {
	t.Helper()
	m, err := metadata.Of(e)
	if err == nil && m == nil {
		err = errors.New("the engine has no Meta")
	}
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// withRules is e with the rules over its Log as its Meta, closed when t
// ends (the Log stays e's to close).
func withRules(t *testing.T, e backends.Engine) backends.Engine {
	m := replica.NewStore(e.Log, e.Data)
	t.Cleanup(func() { _ = m.Close() })
	e.Meta, e.Log = m, nil
	return e
}
