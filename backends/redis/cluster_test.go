package redis_test

import (
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest"
	"github.com/tqgo/tqgo/internal/redistest"
)

// TestCluster runs the conformance suites and a tq round trip on a
// three-master Redis Cluster: no script or multi-key command may span hash
// slots.
func TestCluster(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	url := c.URL()
	t.Run("Engine", func(t *testing.T) {
		backendtest.RunEngine(t, func(t *testing.T) backends.Engine { return engine(open(t, url)) })
	})
	t.Run("TQ", func(t *testing.T) { testTQ(t, url+"?prefix=job1") })
}
