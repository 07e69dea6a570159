package backendtest

import (
	"testing"

	"github.com/tqgo/tqgo/backends"
)

// RunEngine checks a whole engine: that it passes backends.Engine.Check,
// then RunStore over its Data, RunMeta and RunQueue over its Meta (when it
// has one) and
// RunColocated when its Meta is a backends.Colocated, each subtest on a
// fresh engine from newEngine. It calls newEngine once more, under t, to
// learn which suites apply.
func RunEngine(t *testing.T, newEngine func(t *testing.T) backends.Engine) {
	t.Helper()
	probe := newEngine(t)
	if err := probe.Check(); err != nil {
		t.Fatalf("the engine fails Engine.Check: %v", err)
	}
	t.Run("Store", func(t *testing.T) {
		RunStore(t, func(t *testing.T) backends.Store { return newEngine(t).Data })
	})
	if probe.Meta == nil {
		return
	}
	t.Run("Meta", func(t *testing.T) {
		RunMeta(t, func(t *testing.T) backends.MetaStore { return newEngine(t).Meta })
	})
	t.Run("Queue", func(t *testing.T) {
		RunQueue(t, func(t *testing.T) backends.MetaStore { return newEngine(t).Meta })
	})
	if _, ok := probe.Meta.(backends.Colocated); ok {
		t.Run("Colocated", func(t *testing.T) { RunColocated(t, newEngine) })
	}
}
