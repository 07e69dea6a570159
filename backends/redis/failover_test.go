package redis_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
// error matching redis.ErrNotReplicated (the Clear's also
// tq.ErrOutcomeUnknown; nil would claim a write the failover then loses),
// and each is then whole or absent.
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
	// The put's Prepare is the first to wait; a Clear's outcome is
	// unknown.
	if !errors.Is(lostPut, redis.ErrNotReplicated) {
		t.Fatalf("put with the replica cut off: %v, want an error matching redis.ErrNotReplicated", lostPut)
	}
	if !errors.Is(lostClear, tq.ErrOutcomeUnknown) || !errors.Is(lostClear, redis.ErrNotReplicated) || !errors.Is(lostClear, backends.ErrOutcomeUnknown) {
		t.Fatalf("Clear with the replica cut off: %v, want an error matching tq.ErrOutcomeUnknown and redis.ErrNotReplicated", lostClear)
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

// TestFailoverUnderLoad: clients keep putting while the replica is cut
// off, promoted, and the clients moved to it mid-call. Whatever each put
// returned, its rows are whole or absent afterwards, with their values,
// and every client and a fresh one list the same rows. With replicas=1,
// every put that returned nil survives the failover; without, puts the
// master acknowledged after the cut may be lost (that is what the option
// is for), but nothing else may go wrong.
//
// A put that fails is held to whole or absent like the others.
func TestFailoverUnderLoad(t *testing.T) {
	for _, tc := range []struct {
		name, query string
		replicated  bool
	}{
		{"no replicas", "", false},
		{"replicas=1", "&replicas=1&replica_timeout=200ms", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFailover(t)
			ctx := t.Context()
			url := f.clients.url(rewindPrefix, tc.query)
			type outcome struct {
				keys []string
				err  error
			}
			const workers = 4
			clients := make([]*tq.Client, workers)
			for i := range clients {
				clients[i] = openTQ(t, url)
			}
			results := make([][]outcome, workers)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for w, c := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						keys := keyRange(fmt.Sprintf("w%d-%03d-", w, i), 3)
						pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
						err := c.BatchPut(pctx, rewindPart, keys, rollout(keys, w*1000+i), nil)
						cancel()
						results[w] = append(results[w], outcome{keys, err})
					}
				}()
			}
			time.Sleep(300 * time.Millisecond)
			f.lag()
			time.Sleep(300 * time.Millisecond)
			f.promote(t)
			time.Sleep(300 * time.Millisecond)
			close(stop)
			wg.Wait()

			fresh := openTQ(t, url)
			final := listing(t, fresh, "fresh")
			for i, c := range clients {
				who := fmt.Sprintf("client %d", i)
				if got := listing(t, c, who); !slices.Equal(got, final) {
					t.Fatalf("%s lists\n%v\na fresh client\n%v", who, got, final)
				}
			}
			listed := listedKeys(final)
			var ok, failed, lost int
			var noCells []string // committed on the new master, cells gone (see cellsLostGap)
			for w := range workers {
				for i, o := range results[w] {
					n := 0
					for _, k := range o.keys {
						if slices.Contains(listed, k) {
							n++
						}
					}
					switch {
					case n == len(o.keys):
						if _, err := fresh.BatchGet(ctx, rewindPart, o.keys); errors.Is(err, tq.ErrNotFound) && strings.Contains(err.Error(), "cell missing") {
							noCells = append(noCells, fmt.Sprintf("%v (put returned %v)", o.keys, o.err))
							continue
						}
						wantValues(t, fresh, "fresh", o.keys, 0, len(o.keys), w*1000+i)
					case n != 0:
						t.Errorf("put %v (returned %v): %d of its %d rows listed, want all or none", o.keys, o.err, n, len(o.keys))
					case o.err == nil && tc.replicated:
						t.Errorf("put %v returned nil with replicas=1, and is lost in the failover", o.keys)
					case o.err == nil:
						lost++
					}
					if o.err == nil {
						ok++
					} else {
						failed++
					}
				}
			}
			if ok == 0 {
				t.Fatalf("test setup: no put returned nil (%d an error)", failed)
			}
			t.Logf("%d puts returned nil (%d of them lost), %d an error", ok, lost, failed)
			switch {
			case len(noCells) > 0 && tc.replicated:
				t.Errorf("%d puts committed on the promoted replica have lost their cells: %v", len(noCells), noCells)
			case len(noCells) > 0:
				cellsLostGap(t, "%d puts committed on the promoted replica have lost their cells: %v", len(noCells), noCells)
			}
		})
	}
}

// cellsLostGap reports a gap the engine still has without WithReplicas
// (with it, a Prepare waits for its replicas): after a failover to a
// replica that lagged, the promoted replica's index counter is behind the
// indexes the old master gave out, and hands them out again. A put that
// the old master prepared after the replica lost its link writes or
// deletes cells by storage key (index, field, generation) that may be
// those of another row, which the promoted replica gave the same index,
// committed and acknowledged. Its commit is refused with
// backends.ErrReservationLost, and its rollback (Abandon first) finds the
// reservation lost: it deletes nothing. What remains is a put that writes
// its cells over the other row's in the failover window.
// It skips t, so that the test guards everything else until the engine
// is fixed, unless TQ_KNOWN_GAPS=1, which makes it a failure.
func cellsLostGap(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("TQ_KNOWN_GAPS") == "1" {
		t.Fatalf(format, args...)
	}
	t.Skipf("known gap (TQ_KNOWN_GAPS=1 makes it fail): "+format, args...)
}

// TestFailoverBetweenCellsAndCommit: a put of several write rounds writes
// its first rounds to the master after the replica lost its link, and the
// replica is promoted before the request that writes the last round with
// the commit. The promoted replica has the put's Prepare but not its
// first cells, so the put cannot be whole there: it must fail, with
// redis.ErrCellsMissing, and no row of it be listed.
func TestFailoverBetweenCellsAndCommit(t *testing.T) {
	f := startFailover(t)
	ctx := t.Context()
	url := f.clients.url(rewindPrefix, "&write_round_bytes=1200") // two cells a round
	var armed atomic.Bool
	var lagged, promoted bool
	h := &beforeHook{before: func(names []string) {
		if !armed.Load() {
			return
		}
		switch {
		case names[0] == "mset" && !lagged: // the put's first round
			f.waitSynced(t)
			f.lag()
			lagged = true
		case names[0] == "multi" && lagged && !promoted: // the last round, with the commit
			f.promote(t)
			promoted = true
		}
	}}
	c, err := tq.New(engine(open(t, url, redis.WithHooks(h))), tq.WithRetry(tq.NoRetry))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ks := keyRange("k", 8)
	_, batch := smallBatch(len(ks), 1)
	armed.Store(true)
	putErr := c.BatchPut(ctx, rewindPart, ks, batch, nil)
	if !promoted {
		t.Fatal("test setup: the put sent no round before its commit")
	}
	fresh := openTQ(t, f.clients.url(rewindPrefix, ""))
	listed := listedKeys(listing(t, fresh, "fresh"))
	if len(listed) > 0 {
		_, readErr := fresh.BatchGet(ctx, rewindPart, ks)
		t.Fatalf("put returned %v; the promoted replica lists its rows %v, whose cells it never had (read: %v)", putErr, listed, readErr)
	}
	if !errors.Is(putErr, redis.ErrCellsMissing) {
		t.Fatalf("put whose cells the failover lost: %v, want an error matching redis.ErrCellsMissing", putErr)
	}
}

// beforeHook is a go-redis hook (given with redis.WithHooks, it also sees the
// requests on direct connections) that calls before with the names of a
// request's commands before it goes out.
type beforeHook struct{ before func(names []string) }

func (h *beforeHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *beforeHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.before([]string{cmd.Name()})
		return next(ctx, cmd)
	}
}
func (h *beforeHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		names := make([]string, len(cmds))
		for i, c := range cmds {
			names[i] = c.Name()
		}
		h.before(names)
		return next(ctx, cmds)
	}
}
