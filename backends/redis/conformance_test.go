package redis_test

import (
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest"
	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/internal/redistest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	engineOn := func(url string, opts ...redis.Option) func(t *testing.T) backends.Engine {
		return func(t *testing.T) backends.Engine { return engine(open(t, url, opts...)) }
	}
	t.Run("Engine", func(t *testing.T) { backendtest.RunEngine(t, engineOn(srv.URL())) })
	// Everything through go-redis, as with a client whose hooks must see
	// every command.
	t.Run("NoDirect", func(t *testing.T) { backendtest.RunEngine(t, engineOn(srv.URL()+"?direct=false")) })
	t.Run("ClusterPath", func(t *testing.T) {
		backendtest.RunEngine(t, engineOn(srv.URL(), redis.WithClusterSafe()))
	})
	// Wrapped (fault injection off): every capability passes through.
	t.Run("Wrapped", func(t *testing.T) {
		backendtest.RunEngine(t, func(t *testing.T) backends.Engine {
			return backendtest.Wrap(engine(open(t, srv.URL())), &backendtest.Faulty{})
		})
	})
}
