// Package redistest starts private Redis servers for tests, stopped by
// t.Cleanup. When redis-server (or redis-cli) is not installed, the test is
// skipped, unless the environment sets TQ_REQUIRE_REDIS=1 (CI does), in
// which case it fails: a CI run must never pass by skipping Redis.
package redistest

import (
	"os"
	"testing"

	"github.com/tqgo/tqgo/internal/redisserver"
)

// RequireEnv names the variable that turns a missing Redis from a skip into
// a failure.
const RequireEnv = "TQ_REQUIRE_REDIS"

// Available skips t (or fails it, under TQ_REQUIRE_REDIS=1) when the Redis
// binaries are missing.
func Available(t testing.TB) {
	t.Helper()
	if err := redisserver.Available(); err != nil {
		msg := "redis-server not found on PATH; install redis-server and redis-tools (apt-get install redis-server redis-tools) or set " + RequireEnv + "=1 to make this a failure: " + err.Error()
		if os.Getenv(RequireEnv) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// Start starts a private redis-server for t, stopped when t ends.
func Start(t testing.TB, opts ...redisserver.Options) *redisserver.Server {
	t.Helper()
	Available(t)
	var o redisserver.Options
	if len(opts) > 0 {
		o = opts[0]
	}
	s, err := redisserver.Start(t.Context(), o)
	if err != nil {
		t.Fatalf("starting redis-server: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stopping redis-server %s: %v", s.Addr(), err)
		}
	})
	return s
}

// StartCluster starts a private three-master Redis Cluster for t, stopped
// when t ends.
func StartCluster(t testing.TB) *redisserver.Cluster {
	t.Helper()
	return StartClusterWith(t, redisserver.Options{})
}

// StartClusterWith is StartCluster with opts for every node (see
// redisserver.StartClusterWith).
func StartClusterWith(t testing.TB, opts redisserver.Options) *redisserver.Cluster {
	t.Helper()
	Available(t)
	c, err := redisserver.StartClusterWith(t.Context(), 3, opts)
	if err != nil {
		t.Fatalf("starting redis cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stopping redis cluster: %v", err)
		}
	})
	return c
}
