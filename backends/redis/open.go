package redis

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"runtime"
	"slices"
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

// urlParams are the query parameters this package reads; the rest go to
// go-redis. replicas and replica_timeout set the fields WithReplicas sets,
// which OpenURL then checks as WithReplicas does.
var urlParams = map[string]func(string) (Option, error){
	"prefix":            func(v string) (Option, error) { return WithPrefix(v), nil },
	"io_depth":          intParam(WithIODepth),
	"round_keys":        intParam(WithRoundKeys),
	"write_round_bytes": intParam(WithWriteRoundBytes),
	"read_round_bytes":  intParam(WithReadRoundBytes),
	"direct_pool_size":  intParam(WithDirectPoolSize),
	"direct": func(v string) (Option, error) {
		on, err := strconv.ParseBool(v)
		return WithDirectConnections(on), err
	},
	"replicas": intParam(func(n int) Option {
		return func(o *options) error { o.replicas = n; return nil }
	}),
	"replica_timeout": func(v string) (Option, error) {
		d, err := time.ParseDuration(v)
		return func(o *options) error { o.replicaTimeout = d; return nil }, err
	},
}

// intParam parses a parameter that is an integer for option.
func intParam(option func(int) Option) func(string) (Option, error) {
	return func(v string) (Option, error) {
		n, err := strconv.Atoi(v)
		return option(n), err
	}
}

// listParams are the query parameters that may be given more than once:
// go-redis's addr, a cluster's further seed nodes.
var listParams = map[string]bool{"addr": true}

// checkRepeats fails, with ErrInvalid, on a parameter given twice:
// go-redis, and url.Values.Get, would take one of the values silently, so
// that "?prefix=a&prefix=b" opened one namespace where the caller may
// have meant the other.
func checkRepeats(q url.Values) error {
	for _, name := range slices.Sorted(maps.Keys(q)) {
		if vals := q[name]; len(vals) > 1 && !listParams[name] {
			return fmt.Errorf("%w: redis URL parameter %q given twice (%d values): give it once", backends.ErrInvalid, name, len(vals))
		}
	}
	return nil
}

// DefaultReplicaTimeout is how long a metadata write waits for its
// replicas when the URL gives replicas but no replica_timeout.
const DefaultReplicaTimeout = time.Second

// OpenURL connects to the Redis that rawURL names, checks that it answers
// PING, and returns a Store (and, through Store.Log, its partition logs)
// that owns the client, which honours context deadlines
// (ContextTimeoutEnabled). See the package doc for the URL forms and
// parameters. opts apply after the URL's parameters. A rediss:// URL's
// server that fails the TLS handshake (one that speaks plaintext, say)
// fails OpenURL within dial_timeout, with an error that says so.
func OpenURL(ctx context.Context, rawURL string, opts ...Option) (*Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", backends.ErrInvalid, err)
	}
	o := defaultOptions()
	q := u.Query()
	if err := checkRepeats(q); err != nil {
		return nil, err
	}
	var fromURL []Option
	for name, parse := range urlParams {
		vals, ok := q[name]
		if !ok {
			continue
		}
		opt, err := parse(vals[0])
		if err != nil {
			return nil, fmt.Errorf("%w: redis URL parameter %s=%q: %v", backends.ErrInvalid, name, vals[0], err)
		}
		fromURL = append(fromURL, opt)
		q.Del(name)
	}
	checkReplicas := func(o *options) error { return WithReplicas(o.replicas, o.replicaTimeout)(o) }
	if err := o.apply(append(append(fromURL, checkReplicas), opts...)); err != nil {
		return nil, err
	}

	var client goredis.UniversalClient
	var probe func(ctx context.Context) error // before the PING: see probeTLS
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
		co.ContextTimeoutEnabled = true // callers' deadlines bound network waits
		if err := o.splitPool(co); err != nil {
			return nil, err
		}
		if co.TLSConfig != nil {
			co.Dialer = tlsDialer(co.DialTimeout, co.TLSConfig)
			probe = func(ctx context.Context) error { return probeTLS(ctx, co.Dialer, "tcp", co.Addr) }
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
		co.ContextTimeoutEnabled = true
		client = goredis.NewClusterClient(co)
	default:
		return nil, fmt.Errorf("%w: scheme %q is not a redis scheme", backends.ErrInvalid, u.Scheme)
	}
	s := newStore(client, o, true)
	if probe != nil {
		if err := probe(ctx); err != nil {
			client.Close()
			return nil, s.wrap(ctx, "connect", err)
		}
	}
	if err := client.Ping(ctx).Err(); err != nil {
		client.Close()
		return nil, s.wrap(ctx, "connect", err)
	}
	return s, nil
}

// splitPool takes the direct connections out of co.PoolSize (see
// WithDirectPoolSize): the engine opens at most pool_size connections,
// go-redis's and direct ones together.
func (o *options) splitPool(co *goredis.Options) error {
	total := co.PoolSize
	if total <= 0 {
		total = 10 * runtime.GOMAXPROCS(0) // go-redis's default
	}
	if o.noDirect {
		o.directPoolSize = 0
		return nil
	}
	if o.directPoolSize < 0 {
		o.directPoolSize = directShare(total)
	}
	if o.directPoolSize >= total {
		return fmt.Errorf("%w: redis direct_pool_size %d leaves none of pool_size %d to go-redis", backends.ErrInvalid, o.directPoolSize, total)
	}
	co.PoolSize = total - o.directPoolSize
	if co.MaxActiveConns > co.PoolSize {
		co.MaxActiveConns = co.PoolSize
	}
	return nil
}
