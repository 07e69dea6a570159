package redis

import (
	"context"

	goredis "github.com/redis/go-redis/v9"
)

// WithClusterSafe makes a standalone store take the Cluster code path
// (index ranges reserved apart from the partition script), so the
// conformance suites check that path without a Cluster.
func WithClusterSafe() Option {
	return func(o *options) error {
		o.clusterSafe = true
		return nil
	}
}

// WithRoundHook runs f after each round that Read ("get") or Write
// ("set") completes on its direct connections, which go-redis hooks do not
// see.
func WithRoundHook(f func(op string)) Option {
	return func(o *options) error {
		o.roundHook = f
		return nil
	}
}

// DirectConnections reports whether s uses the direct connections, and
// how many it opens at most.
func DirectConnections(s *Store) (on bool, size int) {
	p := s.directPool()
	if p == nil {
		return false, 0
	}
	return true, p.Size()
}

// ScriptName names the log script whose SHA1 is sha ("append", "read",
// "compact"), or returns "", so that a test's proxy can tell which script
// an EVALSHA runs.
func ScriptName(sha string) string {
	switch sha {
	case logAppendScript.Hash():
		return "append"
	case logReadScript.Hash():
		return "read"
	case logCompactScript.Hash():
		return "compact"
	}
	return ""
}

// LoadScripts loads every script of the engine into c's script cache, as
// a server restarted on its files has none.
func LoadScripts(ctx context.Context, c goredis.Scripter) error {
	for _, s := range []*goredis.Script{logAppendScript, logReadScript, logCompactScript} {
		if err := s.Load(ctx, c).Err(); err != nil {
			return err
		}
	}
	return nil
}
