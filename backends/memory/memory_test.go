package memory_test

import (
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest"
	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/tq/tqtest"
)

func newEngine(t *testing.T) backends.Engine {
	data, meta := memory.New(), memory.NewMetaStore()
	t.Cleanup(func() { _ = data.Close(); _ = meta.Close() })
	return backends.Engine{Data: data, Meta: meta, Local: true}
}

func TestConformance(t *testing.T) {
	backendtest.RunEngine(t, newEngine)
}

func TestClientConformance(t *testing.T) {
	tqtest.Run(t, func(t *testing.T) tqtest.Engine { return tqtest.Over(newEngine(t)) })
}

func TestModel(t *testing.T) {
	tqtest.RunModel(t, func(t *testing.T) tqtest.ModelEnv { return tqtest.ModelOver(newEngine(t)) })
}

// TestModelFakeClock runs the model's histories with the engine's clock
// under the test's control (a synctest bubble): leases end, Nack delays
// pass.
func TestModelFakeClock(t *testing.T) {
	tqtest.RunModelFakeClock(t, func(t *testing.T) tqtest.ModelEnv { return tqtest.ModelOver(newEngine(t)) })
}
