package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/internal/redisserver"
)

// privateRedisURL is the -urls entry that means "start a redis-server for
// this run".
const privateRedisURL = "redis"

// privateFileURL is the -urls entry that means "the file engine in a
// directory of this run's, removed after": "file", or "file?sync=always"
// with the engine's parameters.
const privateFileURL = "file"

// privateFile is the target of a privateFileURL entry: a fresh temporary
// directory.
func privateFile(raw string) (*target, error) {
	dir, err := os.MkdirTemp("", "tqbench-file-")
	if err != nil {
		return nil, err
	}
	_, query, _ := strings.Cut(raw, "?")
	name, url := "file", "file://"+filepath.ToSlash(dir)
	if query != "" {
		name += " " + strings.ReplaceAll(query, "&", " ")
		url += "?" + query
	}
	return &target{name: name, url: url, stop: func() error { return os.RemoveAll(dir) }}, nil
}

// target is one engine the kv suite runs against.
type target struct {
	name    string // what the tables call it: "memory", "redis", ...
	url     string // for tq.Open
	private bool   // a redis-server this run started
	kv      bool   // tq.Open knows the scheme (else only the raw limits run)

	redisOpts *redis.Options // set for redis URLs: the raw go-redis limits
	// serve is the tq server of a served target (tq+redis): url is its
	// tq:// URL, redisURL the Redis server it serves, on which the raw
	// limits run and tq on redis:// directly is set beside it.
	serve    *serveProc
	redisURL string
	stop     func() error
}

// isRedis reports whether the target is a Redis server (raw limits apply).
func (t *target) isRedis() bool { return t.redisOpts != nil }

// isServed reports whether the target is a tq server in front of Redis.
func (t *target) isServed() bool { return t.serve != nil }

// resolveTargets turns -urls into targets, starting a private redis-server
// for "redis", and a private redis-server and a tq server in front of it
// for "tq+redis" (tq+redis://host:port/db: a tq server in front of that
// Redis server). An engine that this binary cannot open is skipped with a
// note in the report rather than failing the run, so the default URL list
// works in every build. Call stopTargets when done.
func resolveTargets(ctx context.Context, cfg Config, rep *Report) ([]*target, error) {
	var out []*target
	schemes := backends.Schemes()
	for _, raw := range cfg.URLs {
		switch {
		case raw == privateServeURL || strings.HasPrefix(raw, servePrefix+"redis://") || strings.HasPrefix(raw, servePrefix+"rediss://"):
			t, err := servedTarget(ctx, cfg, raw)
			if err != nil {
				stopTargets(out)
				return nil, err
			}
			if t == nil {
				rep.note("%s: skipped, redis-server is not installed (pass -urls tq+redis://host:port/db)", raw)
				continue
			}
			out = append(out, t)
			continue
		case raw == privateRedisURL:
			if err := redisserver.Available(); err != nil {
				rep.note("redis: skipped, redis-server is not installed (apt-get install redis-server redis-tools, or pass -urls redis://host:port/db): %v", err)
				continue
			}
			srv, err := redisserver.Start(ctx, redisserver.Options{})
			if err != nil {
				stopTargets(out)
				return nil, fmt.Errorf("starting a private redis-server: %w", err)
			}
			t := &target{name: "redis", url: srv.URL(), private: true, kv: slices.Contains(schemes, "redis"), stop: srv.Stop}
			if t.redisOpts, err = redisOptions(t.url); err != nil {
				stopTargets(append(out, t))
				return nil, err
			}
			if !t.kv {
				rep.note("redis: kv skipped, scheme \"redis\" is not registered in this build (registered: %s); its raw limits still run", strings.Join(schemes, ", "))
			}
			out = append(out, t)
			continue
		case raw == "memory":
			raw = "memory://"
		case raw == privateFileURL || strings.HasPrefix(raw, privateFileURL+"?"):
			t, err := privateFile(raw)
			if err != nil {
				stopTargets(out)
				return nil, err
			}
			if t.kv = slices.Contains(schemes, "file"); !t.kv {
				rep.note("%s: skipped, scheme \"file\" is not registered in this build", t.name)
				_ = t.stop()
				continue
			}
			out = append(out, t)
			continue
		}
		u, err := url.Parse(raw)
		if err != nil || u.Scheme == "" {
			stopTargets(out)
			return nil, fmt.Errorf("-urls: %q is not a URL (want scheme://..., or %q)", raw, privateRedisURL)
		}
		t := &target{name: u.Scheme, url: raw, kv: slices.Contains(schemes, u.Scheme)}
		if u.Scheme == "redis" || u.Scheme == "rediss" {
			if t.redisOpts, err = redisOptions(raw); err != nil {
				stopTargets(out)
				return nil, err
			}
		}
		if !t.kv {
			msg := fmt.Sprintf("%s: kv skipped, scheme %q is not registered in this build (registered: %s)", u.Redacted(), u.Scheme, strings.Join(schemes, ", "))
			if !t.isRedis() {
				rep.note("%s", msg)
				continue
			}
			rep.note("%s; its raw limits still run", msg)
		}
		out = append(out, t)
	}
	// Two targets of one scheme are told apart by their URLs.
	for _, t := range out {
		for _, o := range out {
			if o != t && o.name == t.name {
				t.name = redact(t.url)
				break
			}
		}
	}
	return out, nil
}

// servedTarget starts what a tq+redis entry names: a tq server process in
// front of a private redis-server (nil when none is installed) or of the
// Redis server of the URL after "tq+".
func servedTarget(ctx context.Context, cfg Config, raw string) (*target, error) {
	t := &target{name: privateServeURL, kv: true}
	var stops []func() error
	stop := func() error {
		var err error
		for _, f := range slices.Backward(stops) {
			err = errors.Join(err, f())
		}
		return err
	}
	if raw == privateServeURL {
		if redisserver.Available() != nil {
			return nil, nil
		}
		srv, err := redisserver.Start(ctx, redisserver.Options{})
		if err != nil {
			return nil, fmt.Errorf("starting a private redis-server: %w", err)
		}
		stops = append(stops, srv.Stop)
		t.redisURL, t.private = srv.URL(), true
	} else {
		t.redisURL = strings.TrimPrefix(raw, servePrefix)
		t.name = servePrefix + redact(t.redisURL)
	}
	var err error
	if t.redisOpts, err = redisOptions(t.redisURL); err != nil {
		return nil, errors.Join(err, stop())
	}
	if t.serve, err = startServe(ctx, cfg.ServeBin, t.redisURL, cfg.ServeProfile); err != nil {
		return nil, errors.Join(err, stop())
	}
	stops = append(stops, t.serve.stop)
	t.url, t.stop = t.serve.url, stop
	return t, nil
}

func stopTargets(ts []*target) {
	for _, t := range ts {
		if t.stop != nil {
			_ = t.stop()
			t.stop = nil
		}
	}
}

// redisOptions reads the address, credentials and database of a redis://
// URL for a raw go-redis client. It ignores query parameters, which belong
// to the tq engine (prefix=...), not to go-redis.
func redisOptions(raw string) (*redis.Options, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("redis URL %q: %w", redact(raw), err)
	}
	host, port := u.Hostname(), u.Port()
	if host == "" {
		host = "127.0.0.1"
	}
	if port == "" {
		port = "6379"
	}
	o := &redis.Options{Addr: net.JoinHostPort(host, port)}
	if u.User != nil {
		o.Username = u.User.Username()
		o.Password, _ = u.User.Password()
		if o.Password == "" {
			// redis://:secret@host gives the password as the user name.
			o.Password, o.Username = o.Username, ""
		}
	}
	if db := strings.Trim(u.Path, "/"); db != "" {
		if o.DB, err = strconv.Atoi(db); err != nil {
			return nil, fmt.Errorf("redis URL %q: database %q is not a number", redact(raw), db)
		}
	}
	return o, nil
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return u.Redacted()
}
