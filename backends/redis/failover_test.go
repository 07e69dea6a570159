package redis_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/internal/redisserver"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

// failover is a master, a replica that follows it, and the proxy the
// clients reach the master through.
//
// The replica's replication link runs through a proxy of its own, so
// that the test decides what the replica has: lag cuts the link (the
// replica keeps what it has, and every later write of the master stays
// on the master alone; it cannot reconnect), which is deterministic where
// pausing the replica or killing the master at the right moment is not.
// promote is the failover: the replica becomes a master with what it
// has, the old master dies, and the clients' proxy moves to the replica,
// closing their connections.
type failover struct {
	master, replica *redisserver.Server
	link, clients   *switchProxy
	direct          [2]*goredis.Client // to master and replica, not proxied
	promoted        bool
}

func startFailover(t *testing.T) *failover {
	t.Helper()
	// A master waits 5s by default before it streams a first sync.
	master := redistest.Start(t, redisserver.Options{Args: []string{"--repl-diskless-sync-delay", "0"}})
	f := &failover{master: master, replica: redistest.Start(t)}
	f.link = startSwitchProxy(t, f.master.Addr())
	f.clients = startSwitchProxy(t, f.master.Addr())
	for i, s := range []*redisserver.Server{f.master, f.replica} {
		f.direct[i] = goredis.NewClient(&goredis.Options{Addr: s.Addr(), MaxRetries: -1})
		t.Cleanup(func() { f.direct[i].Close() })
	}
	if err := f.replica.ReplicaOf(t.Context(), f.link.addr()); err != nil {
		t.Fatal(err)
	}
	f.waitSynced(t)
	return f
}

// waitSynced waits until the replica has every write the master made.
func (f *failover) waitSynced(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := redisserver.WaitReplicated(ctx, f.master, f.replica); err != nil {
		t.Fatal(err)
	}
}

// lag cuts the replica's link to the master.
func (f *failover) lag() { f.link.switchTo("") }

// promote fails the clients over to the replica.
func (f *failover) promote(t *testing.T) {
	t.Helper()
	if err := f.replica.Promote(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := f.master.Kill(); err != nil {
		t.Fatal(err)
	}
	f.clients.switchTo(f.replica.Addr())
	f.promoted = true
}

// server is a client of the server the clients use now.
func (f *failover) server(*testing.T) goredis.Cmdable {
	if f.promoted {
		return f.direct[1]
	}
	return f.direct[0]
}

// TestFailoverToLaggingReplica: the clients move to a replica that missed
// the master's last writes, which some of them replayed (see testRewind).
func TestFailoverToLaggingReplica(t *testing.T) {
	f := startFailover(t)
	testRewind(t, rewind{
		url: f.clients.url(rewindPrefix, ""),
		mark: func(t *testing.T) {
			f.waitSynced(t)
			f.lag()
		},
		back:   f.promote,
		server: f.server,
	})
}

// TestFailoverKeepsReplicatedWrites: with replicas=1, a put or Clear that
// returned nil was on the replica, so it survives a failover, whenever
// the link is cut; with the replica cut off, a put and a Clear return an
// error matching tq.ErrOutcomeUnknown and redis.ErrNotReplicated (nil
// would claim a write the failover then loses), and each is then whole or
// absent.
func TestFailoverKeepsReplicatedWrites(t *testing.T) {
	f := startFailover(t)
	ctx := t.Context()
	url := f.clients.url(rewindPrefix, "&replicas=1&replica_timeout=300ms")
	a, b := openTQ(t, url), openTQ(t, url)
	ks, js, zs := keyRange("k", 10), keyRange("j", 10), keyRange("z", 5)
	// No waiting for the replica here: only the engine's WAIT makes
	// these acknowledged writes replicated.
	put(t, a, "a", ks, 1)
	put(t, b, "b", ks[:5], 2)
	put(t, a, "a", js, 3)
	must(t, "a: Clear", a.Clear(ctx, rewindPart, ks[9:]))

	f.lag()
	lostPut := a.BatchPut(ctx, rewindPart, zs, rollout(zs, 4), nil)
	lostClear := b.Clear(ctx, rewindPart, ks[8:9])
	for what, err := range map[string]error{"put": lostPut, "Clear": lostClear} {
		if !errors.Is(err, tq.ErrOutcomeUnknown) || !errors.Is(err, redis.ErrNotReplicated) || !errors.Is(err, backends.ErrOutcomeUnknown) {
			t.Fatalf("%s with the replica cut off: %v, want an error matching tq.ErrOutcomeUnknown and redis.ErrNotReplicated", what, err)
		}
	}

	f.promote(t)
	fresh := openTQ(t, url)
	final := listing(t, fresh, "fresh")
	for who, c := range map[string]*tq.Client{"a": a, "b": b, "fresh": fresh} {
		if got := listing(t, c, who); !slices.Equal(got, final) {
			t.Fatalf("after the failover %s lists\n%v\na fresh client\n%v", who, got, final)
		}
		wantValues(t, c, who, ks[:5], 0, 5, 2)
		wantValues(t, c, who, ks, 5, 8, 1)
		wantValues(t, c, who, js, 0, len(js), 3)
	}
	keys := listedKeys(final)
	if slices.Contains(keys, ks[9]) {
		t.Errorf("%s, cleared (acknowledged), is listed after the failover", ks[9])
	}
	if slices.Contains(keys, ks[8]) {
		wantValues(t, fresh, "fresh", ks, 8, 9, 1)
	}
	switch n := len(slices.DeleteFunc(keys, func(k string) bool { return !slices.Contains(zs, k) })); n {
	case 0:
	case len(zs):
		wantValues(t, fresh, "fresh", zs, 0, len(zs), 4)
	default:
		t.Errorf("%d of the %d rows of the put of unknown outcome are listed: want all or none", n, len(zs))
	}
}
