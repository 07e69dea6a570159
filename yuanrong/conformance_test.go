package yuanrong_test

import (
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest"
	"github.com/tqgo/tqgo/yuanrong"
)

func TestBackendConformance(t *testing.T) {
	backendtest.RunStore(t, func(t *testing.T) backends.Store {
		return newBackend(t, yuanrong.NewLocal())
	})
}

// Small key limits make every conformance batch of more than a few keys
// run in several rounds.
func TestBackendConformanceSmallLimits(t *testing.T) {
	backendtest.RunStore(t, func(t *testing.T) backends.Store {
		return newBackend(t, yuanrong.NewLocal(), yuanrong.WithPutKeysLimit(7), yuanrong.WithGetClearKeysLimit(5))
	})
}
