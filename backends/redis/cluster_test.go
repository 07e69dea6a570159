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
	c := redistest.StartCluster(t)
	url := c.URL()
	t.Run("Data", func(t *testing.T) {
		backendtest.Run(t, func(t *testing.T) backends.Backend { return open(t, url) })
	})
	t.Run("Meta", func(t *testing.T) {
		backendtest.RunMeta(t, func(t *testing.T) backends.MetaStore { return open(t, url).Meta() })
	})
	t.Run("TQ", func(t *testing.T) { testTQ(t, url+"?prefix=job1") })
}
