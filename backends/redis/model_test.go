package redis_test

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
	"github.com/tqgo/tqgo/tq/tqtest"
)

// modelHistories sizes a model run on a real server unless
// TQ_MODEL_HISTORIES does: each history's steps are round trips.
func modelHistories(t *testing.T, n int) {
	if os.Getenv("TQ_MODEL_HISTORIES") == "" {
		t.Setenv("TQ_MODEL_HISTORIES", fmt.Sprint(n))
	}
}

// modelEnv hands each history a queue of its own: a fresh prefix on one
// server or cluster. With moved, the server's clock as the log stamps it
// is the history's to move (WithTimeOffset), so leases and Nack delays
// end when the history says.
func modelEnv(url string, n *atomic.Int64, moved bool) func(t *testing.T) tqtest.ModelEnv {
	return func(t *testing.T) tqtest.ModelEnv {
		sep := "?"
		if strings.Contains(url, "?") {
			sep = "&"
		}
		u := fmt.Sprintf("%s%sprefix=model%d", url, sep, n.Add(1))
		if !moved {
			return tqtest.ModelEnv{Open: func(t *testing.T) *tq.Client { return openTQ(t, u) }}
		}
		var offset atomic.Int64
		return tqtest.ModelEnv{
			Open: func(t *testing.T) *tq.Client {
				s := open(t, u, redis.WithTimeOffset(func() time.Duration { return time.Duration(offset.Load()) }))
				c, err := tq.New(engine(s))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				return c
			},
			Advance: func(d time.Duration) { offset.Add(int64(d)) },
		}
	}
}

// The Redis engine is held to the one model of the contract: on a
// standalone server, with the server's clock and with a clock the
// histories move, and on a Cluster.
func TestModel(t *testing.T) {
	modelHistories(t, 100)
	srv := redistest.Start(t)
	var n atomic.Int64
	tqtest.RunModel(t, modelEnv(srv.URL(), &n, false))
}

func TestModelMovedClock(t *testing.T) {
	modelHistories(t, 100)
	srv := redistest.Start(t)
	var n atomic.Int64
	tqtest.RunModel(t, modelEnv(srv.URL(), &n, true))
}

func TestModelCluster(t *testing.T) {
	modelHistories(t, 40)
	c := redistest.StartCluster(t)
	var n atomic.Int64
	tqtest.RunModel(t, modelEnv(c.URL(), &n, true))
}

// With WithIndexBlocks, on a Cluster (whose log takes no cells with its
// records, so a put is Prepare, cells and Commit, and blocks save one),
// puts of new keys go by blocks: the model takes their indexes from the
// engine and holds each client to its put order. (On a standalone
// server a commit goes with its cells already and blocks are not used.)
func TestModelBlocks(t *testing.T) {
	modelHistories(t, 30)
	c := redistest.StartCluster(t)
	var n atomic.Int64
	tqtest.RunModel(t, func(t *testing.T) tqtest.ModelEnv {
		u := fmt.Sprintf("%s?prefix=blocks%d", c.URL(), n.Add(1))
		return tqtest.ModelEnv{Blocks: true, Open: func(t *testing.T) *tq.Client { return openTQ(t, u, tq.WithIndexBlocks()) }}
	})
}
