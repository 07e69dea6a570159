package redis_test

import (
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest"
)

// The Redis Log passes the log suite on every configuration: standalone
// (with LogCells), the Cluster path on a standalone server, and a Cluster.
func TestRunLog(t *testing.T) {
	t.Parallel()
	for _, e := range logEnvs(t) {
		t.Run(e.name, func(t *testing.T) {
			backendtest.RunLog(t, func(t *testing.T) func() backends.Log {
				return func() backends.Log {
					l, _ := e.open(t, "tq")
					return l
				}
			})
		})
	}
}
