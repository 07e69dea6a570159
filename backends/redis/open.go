package redis

import (
	"context"
	"fmt"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
)

// Schemes this package registers with backends.Register.
const (
	Scheme           = "redis"          // redis://[user:pass@]host:port[/db]
	SchemeTLS        = "rediss"         // the same over TLS
	SchemeCluster    = "redis+cluster"  // redis+cluster://[user:pass@]h1:p1,h2:p2,h3:p3[/]
	SchemeClusterTLS = "rediss+cluster" // the same over TLS
)

func init() {
	for _, s := range []string{Scheme, SchemeTLS, SchemeCluster, SchemeClusterTLS} {
		backends.Register(s, openEngine)
	}
}

func openEngine(ctx context.Context, u *url.URL) (backends.Engine, error) {
	s, err := OpenURL(ctx, u.String())
	if err != nil {
		return backends.Engine{}, err
	}
	return backends.Engine{Data: s, Log: s.Log()}, nil
}

// Query parameters this package reads; the rest go to go-redis.
var ownParams = map[string]func(string) (Option, error){
	"prefix": func(v string) (Option, error) { return WithPrefix(v), nil },
	"io_depth": func(v string) (Option, error) {
		n, err := strconv.Atoi(v)
		return WithIODepth(n), err
	},
	"round_keys": func(v string) (Option, error) {
		n, err := strconv.Atoi(v)
		return WithRoundKeys(n), err
	},
	"write_round_bytes": func(v string) (Option, error) {
		n, err := strconv.Atoi(v)
		return WithWriteRoundBytes(n), err
	},
	"read_round_bytes": func(v string) (Option, error) {
		n, err := strconv.Atoi(v)
		return WithReadRoundBytes(n), err
	},
	"direct": func(v string) (Option, error) {
		on, err := strconv.ParseBool(v)
		return WithDirectConnections(on), err
	},
	"direct_pool_size": func(v string) (Option, error) {
		n, err := strconv.Atoi(v)
		return WithDirectPoolSize(n), err
	},
}

// DefaultReplicaTimeout is how long a metadata write waits for its
// replicas when the URL gives replicas but no replica_timeout.
const DefaultReplicaTimeout = time.Second

// replicasParam reads replicas=N and replica_timeout=D (a Go duration,
// default DefaultReplicaTimeout) from q, removing both; nil when neither
// is given. As for the other parameters, the last value given counts,
// and an empty one is invalid.
func replicasParam(q url.Values) (Option, error) {
	ns, hasN := q["replicas"]
	ds, hasD := q["replica_timeout"]
	q.Del("replicas")
	q.Del("replica_timeout")
	if !hasN && !hasD {
		return nil, nil
	}
	count, timeout := 0, DefaultReplicaTimeout
	var err error
	if hasN {
		n := ns[len(ns)-1]
		if count, err = strconv.Atoi(n); err != nil {
			return nil, fmt.Errorf("%w: redis URL parameter replicas=%q: %v", backends.ErrInvalid, n, err)
		}
	}
	if hasD {
		d := ds[len(ds)-1]
		if timeout, err = time.ParseDuration(d); err != nil {
			return nil, fmt.Errorf("%w: redis URL parameter replica_timeout=%q: %v", backends.ErrInvalid, d, err)
		}
	}
	return WithReplicas(count, timeout), nil
}

// OpenURL connects to the Redis that rawURL names, checks that it answers
// PING, and returns a Store (and, through Store.Meta, its metadata store)
// that owns the client. See the package doc for the URL forms and
// parameters. opts apply after the URL's parameters.
func OpenURL(ctx context.Context, rawURL string, opts ...Option) (*Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", backends.ErrInvalid, err)
	}
	o := defaultOptions()
	q := u.Query()
	var own []Option
	for name, parse := range ownParams {
		vals, ok := q[name]
		if !ok {
			continue
		}
		opt, err := parse(vals[len(vals)-1])
		if err != nil {
			return nil, fmt.Errorf("%w: redis URL parameter %s=%q: %v", backends.ErrInvalid, name, vals[len(vals)-1], err)
		}
		own = append(own, opt)
		q.Del(name)
	}
	if opt, err := replicasParam(q); err != nil {
		return nil, err
	} else if opt != nil {
		own = append(own, opt)
	}
	if err := o.apply(append(own, opts...)); err != nil {
		return nil, err
	}

	var client goredis.UniversalClient
	switch u.Scheme {
	case Scheme, SchemeTLS:
		if strings.Contains(u.Host, ",") {
			return nil, fmt.Errorf("%w: redis URL %q names several hosts: use %s:// for a cluster", backends.ErrInvalid, u.Redacted(), SchemeCluster)
		}
		gu := *u
		gu.RawQuery = q.Encode()
		co, err := goredis.ParseURL(gu.String())
		if err != nil {
			return nil, fmt.Errorf("%w: %w", backends.ErrInvalid, err)
		}
		if o.addr == "" {
			o.addr = co.Addr
		}
		co.ContextTimeoutEnabled = true // callers' deadlines bound network waits
		if err := o.splitPool(co); err != nil {
			return nil, err
		}
		client = goredis.NewClient(co)
	case SchemeCluster, SchemeClusterTLS:
		hosts := strings.Split(u.Host, ",")
		if u.Path != "" && u.Path != "/" {
			return nil, fmt.Errorf("%w: redis cluster URL %q has a path: a cluster has only database 0", backends.ErrInvalid, u.Redacted())
		}
		for _, h := range hosts[1:] {
			q.Add("addr", h)
		}
		gu := *u
		gu.Scheme = strings.TrimSuffix(u.Scheme, "+cluster")
		gu.Host = hosts[0]
		gu.Path = ""
		gu.RawQuery = q.Encode()
		co, err := goredis.ParseClusterURL(gu.String())
		if err != nil {
			return nil, fmt.Errorf("%w: %w", backends.ErrInvalid, err)
		}
		if o.addr == "" {
			o.addr = strings.Join(co.Addrs, ",")
		}
		co.ContextTimeoutEnabled = true
		client = goredis.NewClusterClient(co)
	default:
		return nil, fmt.Errorf("%w: scheme %q is not a redis scheme", backends.ErrInvalid, u.Scheme)
	}
	s := newStore(client, o, true)
	if err := client.Ping(ctx).Err(); err != nil {
		client.Close()
		return nil, s.wrap(ctx, "connect", err)
	}
	return s, nil
}

// splitPool takes the engine's own connections out of co.PoolSize (see
// WithDirectPoolSize): the engine opens at most pool_size connections,
// go-redis's and its own together. A pool_size of 1 leaves none to share:
// the engine's own connections are off.
func (o *options) splitPool(co *goredis.Options) error {
	total := co.PoolSize
	if total <= 0 {
		total = 10 * runtime.GOMAXPROCS(0) // go-redis's default
	}
	if o.noDirect {
		o.directPool = 0
		return nil
	}
	if o.directPool < 0 {
		o.directPool = directShare(total)
	}
	if o.directPool >= total {
		return fmt.Errorf("%w: redis direct_pool_size %d leaves none of pool_size %d to go-redis", backends.ErrInvalid, o.directPool, total)
	}
	co.PoolSize = total - o.directPool
	if co.MaxActiveConns > co.PoolSize {
		co.MaxActiveConns = co.PoolSize
	}
	return nil
}
