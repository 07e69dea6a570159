package redis

import (
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// waitClient returns the client that blocking reads (XREAD BLOCK of at
// most block) go through: for a client of its own kind, a client of its
// own on the same servers, with the engine's hooks (closing it ends
// blocked reads at once, which go-redis cannot do to a read in flight;
// its read timeout covers a blocked XREAD; its connections are only the
// blocking reads', one per read in flight, at most qMaxWatchConns open
// (a read finding none free waits for one);
// it reads masters, where commits land first; it leaves out maintenance
// notifications, which would keep goroutines of their own after the last
// Wait). For another kind of client (a Ring), c itself: its watchers then
// take connections of its pool, its read timeout must exceed block
// (go-redis's default, 3 s, does), and Close waits for their reads to end.
func waitClient(c goredis.UniversalClient, hooks []goredis.Hook, block time.Duration) (_ goredis.UniversalClient, own bool) {
	var w goredis.UniversalClient
	off := &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	switch c := c.(type) {
	case *goredis.Client:
		o := *c.Options()
		o.ReadTimeout = block + 10*time.Second
		o.PoolSize, o.MinIdleConns, o.MaxIdleConns = qMaxWatchConns, 0, qIdleWatchConns
		o.PipelinePoolSize = -1 // the rounds are pipelines: in the pool above
		o.MaintNotificationsConfig = off
		w = goredis.NewClient(&o)
	case *goredis.ClusterClient:
		o := *c.Options()
		o.ReadTimeout = block + 10*time.Second
		o.PoolSize, o.MinIdleConns, o.MaxIdleConns = qMaxWatchConns, 0, qIdleWatchConns
		o.ReadOnly, o.RouteByLatency, o.RouteRandomly = false, false, false
		o.PipelinePoolSize = -1
		o.MaintNotificationsConfig = off
		w = goredis.NewClusterClient(&o)
	default:
		return c, false
	}
	for _, h := range hooks {
		w.AddHook(h)
	}
	return w, true
}

// qMaxWatchConns bounds the connections of a wait client (per node
// on a Cluster), and qIdleWatchConns how many it keeps open unused.
const (
	qMaxWatchConns  = 1024
	qIdleWatchConns = 16
)
