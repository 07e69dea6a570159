package redis_test

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

const (
	rewindEpoch = rewindPrefix + ":{" + rewindPrefix + ":" + rewindPart + "}:e"
	rewindCount = rewindPrefix + ":{" + rewindPrefix + ":" + rewindPart + "}:n"
)

// dumpedKey is a key's DUMP and its time to live (0: none).
type dumpedKey struct {
	value string
	ttl   time.Duration
}

// dumpKeys returns every key under prefix, DUMPed.
func dumpKeys(t *testing.T, c *goredis.Client, prefix string) map[string]dumpedKey {
	t.Helper()
	ctx := t.Context()
	out := map[string]dumpedKey{}
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		v, err := c.Dump(ctx, k).Result()
		if errors.Is(err, goredis.Nil) {
			continue // expired meanwhile
		}
		must(t, "DUMP", err)
		ttl, err := c.PTTL(ctx, k).Result()
		must(t, "PTTL", err)
		out[k] = dumpedKey{value: v, ttl: max(ttl, 0)}
	}
	must(t, "SCAN", iter.Err())
	return out
}

// restoreKeys makes the keys under prefix what dumpKeys returned: the
// server's state for them goes back to that moment.
func restoreKeys(t *testing.T, c *goredis.Client, prefix string, dump map[string]dumpedKey) {
	t.Helper()
	ctx := t.Context()
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		if _, keep := dump[iter.Val()]; !keep {
			must(t, "DEL", c.Del(ctx, iter.Val()).Err())
		}
	}
	must(t, "SCAN", iter.Err())
	for k, d := range dump {
		must(t, "RESTORE", c.RestoreReplace(ctx, k, d.ttl, d.value).Err())
	}
}

// chainOf is the head of a log of recs, by the chain rule of the
// engine's LAYOUT.md: the hex SHA-1 of the previous head followed by the
// record's 16-character id, from "" for the empty log.
func chainOf(recs []string) string {
	head := ""
	for _, r := range recs {
		h := sha1.Sum([]byte(head + r[1:17]))
		head = hex.EncodeToString(h[:])
	}
	return head
}

// fence is a fence record, as another client settling a lost write
// appends at the position it was computed for.
func fence(id string) string { return "F" + id }

// TestLogRewoundToEarlierState: on one server, every key of the prefix
// goes back to an earlier moment (DUMP then RESTORE: the state of a
// replica that missed the writes since), while clients have replayed
// past it (see testRewind).
func TestLogRewoundToEarlierState(t *testing.T) {
	srv := redistest.Start(t)
	raw := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { raw.Close() })
	var dump map[string]dumpedKey
	testRewind(t, rewind{
		url:    srv.URL() + "?prefix=" + rewindPrefix,
		mark:   func(t *testing.T) { dump = dumpKeys(t, raw, rewindPrefix+":") },
		back:   func(t *testing.T) { restoreKeys(t, raw, rewindPrefix+":", dump) },
		server: func(*testing.T) goredis.Cmdable { return raw },
	})
}

// staleViews sets up a partition whose log a test then tampers with: a
// writes k000-k019 (two records: prepare, commit), which b reads; a then
// writes n000-n009 (two more), which c reads. a and c have replayed four
// records, b two. It returns the clients and the log's records.
func staleViews(t *testing.T, url string, raw *goredis.Client) (a, b, c *tq.Client, recs []string) {
	t.Helper()
	a, b, c = openTQ(t, url), openTQ(t, url), openTQ(t, url)
	put(t, a, "a", keyRange("k", 20), 1)
	listing(t, b, "b")
	put(t, a, "a", keyRange("n", 10), 2)
	listing(t, c, "c")
	recs, err := raw.LRange(t.Context(), rewindLog, 0, -1).Result()
	must(t, "LRANGE", err)
	head, err := raw.Get(t.Context(), rewindHead).Result()
	must(t, "GET head", err)
	if len(recs) != 4 || chainOf(recs) != head {
		t.Fatalf("test setup: log of %d records, head %s; want 4 records and head %s", len(recs), head, chainOf(recs))
	}
	return a, b, c, recs
}

// TestLogTruncatedKeepingEpoch: the partition's log loses its last
// records, or all of them, or has its last record replaced, with its
// epoch kept and its head (and row count) as the records make them: what
// a replica that missed the last appends holds. Clients that replayed the
// longer log drop their views on their next call and converge; a put
// from a stale view succeeds only as a write every client then reads.
func TestLogTruncatedKeepingEpoch(t *testing.T) {
	ks, ns := keyRange("k", 20), keyRange("n", 10)
	for _, tc := range []struct {
		name   string
		tamper func(t *testing.T, raw *goredis.Client, recs []string)
		kept   bool // k000-k019 stay committed
	}{
		{"last put trimmed", func(t *testing.T, raw *goredis.Client, recs []string) {
			must(t, "LTRIM", raw.LTrim(t.Context(), rewindLog, 0, 1).Err())
			must(t, "SET head", raw.Set(t.Context(), rewindHead, chainOf(recs[:2]), 0).Err())
			must(t, "SET count", raw.Set(t.Context(), rewindCount, len(ks), 0).Err())
		}, true},
		{"every record dropped", func(t *testing.T, raw *goredis.Client, recs []string) {
			must(t, "DEL", raw.Del(t.Context(), rewindLog, rewindHead, rewindCount).Err())
		}, false},
		{"last commit replaced by a fence", func(t *testing.T, raw *goredis.Client, recs []string) {
			// The log is as long as a's and c's views: only the head
			// tells them they replayed another log.
			recs = slices.Clone(recs)
			recs[3] = fence("00000000000000fe")
			must(t, "LSET", raw.LSet(t.Context(), rewindLog, 3, recs[3]).Err())
			must(t, "SET head", raw.Set(t.Context(), rewindHead, chainOf(recs), 0).Err())
			must(t, "SET count", raw.Set(t.Context(), rewindCount, len(ks), 0).Err())
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			raw := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
			t.Cleanup(func() { raw.Close() })
			url := srv.URL() + "?prefix=" + rewindPrefix
			a, b, c, recs := staleViews(t, url, raw)
			epoch, err := raw.Get(t.Context(), rewindEpoch).Result()
			must(t, "GET epoch", err)
			tc.tamper(t, raw, recs)
			if got, err := raw.Get(t.Context(), rewindEpoch).Result(); err != nil || got != epoch {
				t.Fatalf("test setup: epoch %q (%v) after tampering, want %q kept", got, err, epoch)
			}
			var want []string // the keys the tampered log holds
			if tc.kept {
				want = ks
			}
			fresh := openTQ(t, url)
			for who, cl := range map[string]*tq.Client{"c": c, "b": b, "fresh": fresh} {
				if got := listedKeys(listing(t, cl, who)); !slices.Equal(got, want) {
					t.Fatalf("%s lists %v after the tampering, want %v", who, got, want)
				}
			}
			// a's first call since: puts against its stale view.
			put(t, a, "a", ks[:5], 3)
			put(t, a, "a", ns[:3], 4)
			want = slices.Concat(ks[:5], ns[:3])
			if tc.kept {
				want = slices.Concat(ks, ns[:3])
			}
			final := listing(t, openTQ(t, url), "fresh")
			if got := listedKeys(final); !slices.Equal(got, want) {
				t.Fatalf("a fresh client lists %v, want %v", got, want)
			}
			for who, cl := range map[string]*tq.Client{"a": a, "b": b, "c": c, "fresh": fresh} {
				if got := listing(t, cl, who); !slices.Equal(got, final) {
					t.Fatalf("%s lists\n%v\na fresh client\n%v", who, got, final)
				}
				wantValues(t, cl, who, ks[:5], 0, 5, 3)
				wantValues(t, cl, who, ns[:3], 0, 3, 4)
				if tc.kept {
					wantValues(t, cl, who, ks, 5, len(ks), 1)
				}
			}
		})
	}
}

// TestLogInconsistentHead: the partition's log and its head disagree (the
// head deleted, or records trimmed, dropped or replaced with the head
// kept): no replica holds such a state, and every client that reads the
// records in question gets an error matching redis.ErrCorrupt from reads
// and writes rather than accept either. Once the keys are put back, every
// client converges on the log as it was: the writes that failed left
// nothing.
//
// A record replaced with the log's epoch, length and head kept is the one
// tampering a client cannot see if it replayed that record before: the
// head vouches for the records a client fetches, and such a client,
// whose view the log still matches, fetches none. Those clients (blind)
// are left out of the checks; every other one must refuse the log.
func TestLogInconsistentHead(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tamper func(t *testing.T, raw *goredis.Client, recs []string)
		blind  []string // clients whose views cover the tampered record, the log's head kept
	}{
		{"head deleted", func(t *testing.T, raw *goredis.Client, recs []string) {
			must(t, "DEL", raw.Del(t.Context(), rewindHead).Err())
		}, nil},
		{"last put trimmed", func(t *testing.T, raw *goredis.Client, recs []string) {
			must(t, "LTRIM", raw.LTrim(t.Context(), rewindLog, 0, 1).Err())
		}, nil},
		{"every record dropped", func(t *testing.T, raw *goredis.Client, recs []string) {
			must(t, "DEL", raw.Del(t.Context(), rewindLog).Err())
		}, nil},
		{"last commit replaced by a fence", func(t *testing.T, raw *goredis.Client, recs []string) {
			must(t, "LSET", raw.LSet(t.Context(), rewindLog, 3, fence("00000000000000fe")).Err())
		}, []string{"a", "c"}},
		{"a record replaced by another of the log", func(t *testing.T, raw *goredis.Client, recs []string) {
			must(t, "LSET", raw.LSet(t.Context(), rewindLog, 3, recs[1]).Err())
		}, []string{"a", "c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			raw := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
			t.Cleanup(func() { raw.Close() })
			url := srv.URL() + "?prefix=" + rewindPrefix
			a, b, c, recs := staleViews(t, url, raw)
			before := listing(t, a, "a")
			dump := dumpKeys(t, raw, rewindPrefix+":")
			tc.tamper(t, raw, recs)
			fresh := openTQ(t, url)
			clients := map[string]*tq.Client{"a": a, "b": b, "c": c, "fresh": fresh}
			checked := maps.Clone(clients)
			for _, who := range tc.blind {
				delete(checked, who)
			}
			for who, cl := range checked {
				if _, err := cl.List(t.Context(), rewindPart); !errors.Is(err, redis.ErrCorrupt) {
					t.Errorf("%s: List of the tampered log: %v, want ErrCorrupt", who, err)
				}
			}
			zs := keyRange("z", 3)
			for who, cl := range checked {
				err := cl.BatchPut(t.Context(), rewindPart, zs, rollout(zs, 5), nil)
				if !errors.Is(err, redis.ErrCorrupt) {
					t.Errorf("%s: put into the tampered log: %v, want ErrCorrupt", who, err)
				}
				if err := cl.Clear(t.Context(), rewindPart, keyRange("k", 1)); !errors.Is(err, redis.ErrCorrupt) {
					t.Errorf("%s: Clear in the tampered log: %v, want ErrCorrupt", who, err)
				}
			}
			restoreKeys(t, raw, rewindPrefix+":", dump)
			for who, cl := range clients {
				if got := listing(t, cl, who); !slices.Equal(got, before) {
					t.Fatalf("%s lists, after the log was put back,\n%v\nwant\n%v", who, got, before)
				}
				wantValues(t, cl, who, keyRange("k", 20), 0, 20, 1)
				wantValues(t, cl, who, keyRange("n", 10), 0, 10, 2)
			}
			must(t, "a put after the log was put back", a.BatchPut(t.Context(), rewindPart, zs, rollout(zs, 6), nil))
			wantValues(t, b, "b", zs, 0, len(zs), 6)
		})
	}
}
