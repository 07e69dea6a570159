package redis_test

import (
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest"
	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/internal/redistest"
)

// The engine suites, each on a server of its own, side by side (they
// mostly wait out leases).
func TestConformance(t *testing.T) {
	t.Parallel()
	engineOn := func(query string, opts ...redis.Option) func(t *testing.T) {
		return func(t *testing.T) {
			t.Parallel()
			url := redistest.Start(t).URL() + query
			backendtest.RunEngine(t, func(t *testing.T) backends.Engine { return engine(open(t, url, opts...)) })
		}
	}
	t.Run("Engine", engineOn(""))
	// Everything through go-redis, as with a client whose hooks must see
	// every command.
	t.Run("NoDirect", engineOn("?direct=false"))
	t.Run("ClusterPath", engineOn("", redis.WithClusterSafe()))
	// Wrapped (fault injection off): every capability passes through.
	t.Run("Wrapped", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		backendtest.RunEngine(t, func(t *testing.T) backends.Engine {
			return backendtest.Wrap(engine(open(t, srv.URL())), &backendtest.Faulty{})
		})
	})
}
