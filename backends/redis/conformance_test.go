package redis_test

import (
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest"
	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/internal/redistest"
)

// open opens a store on url for t, closed (both sides) when t ends.
func open(t *testing.T, url string, opts ...redis.Option) *redis.Store {
	t.Helper()
	s, err := redis.OpenURL(t.Context(), url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		s.Meta().Close()
	})
	return s
}

func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	t.Run("Data", func(t *testing.T) {
		backendtest.Run(t, func(t *testing.T) backends.Backend { return open(t, srv.URL()) })
	})
	t.Run("Meta", func(t *testing.T) {
		backendtest.RunMeta(t, func(t *testing.T) backends.MetaStore { return open(t, srv.URL()).Meta() })
	})
	// Everything through go-redis, as with a client whose hooks must see
	// every command.
	t.Run("DataNoDirect", func(t *testing.T) {
		backendtest.Run(t, func(t *testing.T) backends.Backend { return open(t, srv.URL()+"?direct=false") })
	})
	t.Run("MetaNoDirect", func(t *testing.T) {
		backendtest.RunMeta(t, func(t *testing.T) backends.MetaStore { return open(t, srv.URL()+"?direct=false").Meta() })
	})
	t.Run("MetaClusterPath", func(t *testing.T) {
		backendtest.RunMeta(t, func(t *testing.T) backends.MetaStore {
			return open(t, srv.URL(), redis.WithClusterSafe()).Meta()
		})
	})
}
