package redis_test

import (
	"context"
	"net"
	"net/url"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/internal/redisserver"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

// clusterGroups are the outcome cases on a Cluster: every request goes
// through go-redis; a cell is one SET or UNLINK (keys of many slots), and
// a Prepare first reserves indexes in the prefix's slot (INCRBY and SADD,
// which the proxy does not count).
var clusterGroups = []outcomeGroup{
	{
		name:      "cluster",
		killFirst: true,
		want: map[outcomeOp][]string{
			opPut:            {"EVALSHA append", "SET", "SET", "SET", "SET", "EVALSHA append", "UNLINK", "UNLINK", "EVALSHA append"},
			opClear:          {"EVALSHA append", "UNLINK", "UNLINK", "EVALSHA append"},
			opClearAll:       {"EVALSHA append", "UNLINK", "UNLINK", "UNLINK", "UNLINK", "EVALSHA append"},
			opClearPartition: {"EVALSHA append", "UNLINK", "UNLINK", "UNLINK", "UNLINK", "EVALSHA append"},
		},
	},
}

// TestOutcomesCluster is the outcome suite on a three-master Cluster
// whose nodes keep an AOF: the faulted client reaches every node through
// the proxy (its dialer sends each node's address to the proxy's listener
// in front of it), so a fault hits whichever node the request went to,
// and a kill kills that node.
//
// A killed node takes two seconds to serve again (Redis holds a restarted
// master back that long), which the cases mostly wait out: each operation
// runs on a Cluster and proxy of its own, side by side.
func TestOutcomesCluster(t *testing.T) {
	t.Parallel()
	for _, op := range outcomeOps {
		for _, g := range clusterGroups {
			want, ok := g.want[op]
			if !ok {
				continue
			}
			g.want = map[outcomeOp][]string{op: want}
			t.Run(string(op), func(t *testing.T) {
				t.Parallel()
				runOutcomes(t, clusterEnv(t), []outcomeGroup{g})
			})
		}
	}
}

// clusterEnv starts a Cluster, and a proxy in front of its nodes, for t.
func clusterEnv(t *testing.T) *outcomeEnv {
	c := redistest.StartClusterWith(t, durable)
	nodes := map[string]*redisserver.Server{}
	for _, s := range c.Nodes() {
		nodes[s.Addr()] = s
	}
	p := startRequestProxy(t, c.Addrs()...)
	env := &outcomeEnv{
		p: p,
		client: func(t *testing.T, query string, settle time.Duration) *tq.Client {
			if settle == 0 {
				return proxyTQ(t, c.URL()+"?"+query)
			}
			q, err := url.ParseQuery(query)
			if err != nil {
				t.Fatal(err)
			}
			rc := goredis.NewClusterClient(&goredis.ClusterOptions{
				Addrs: c.Addrs(),
				// A dial held while a node restarts (up to upWait) must
				// not time out its first reply.
				ReadTimeout: upWait + time.Second,
				Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
					var d net.Dialer
					return d.DialContext(ctx, network, p.frontOf(addr))
				},
			})
			t.Cleanup(func() { rc.Close() })
			s, err := redis.New(rc, redis.WithPrefix(q.Get("prefix")))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				s.Close()
				s.Log().Close()
			})
			tc, err := tq.New(settling(t, s, s.Log(), settle), tq.WithRetry(tq.NoRetry))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { tc.Close() })
			return tc
		},
		loadScripts: func(ctx context.Context) error {
			rc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs()})
			defer rc.Close()
			return rc.ForEachMaster(ctx, func(ctx context.Context, n *goredis.Client) error {
				return redis.LoadScripts(ctx, n)
			})
		},
		kill: func(addr string) error { return nodes[addr].Kill() },
		restart: func(ctx context.Context, addr string) error {
			if err := nodes[addr].Restart(ctx); err != nil {
				return err
			}
			return c.WaitOK(ctx)
		},
	}
	return env
}
