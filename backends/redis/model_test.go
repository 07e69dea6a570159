package redis_test

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
	"github.com/tqgo/tqgo/tq/tqtest"
)

func requireModelGate(t *testing.T) {
	t.Helper()
	if os.Getenv(modelGate) != "1" {
		t.Skip("the Redis engine diverges from the model today (known bugs); run the model's histories with " + modelGate + "=1")
	}
}

// modelEnv hands each history a queue of its own: a fresh prefix on one
// server or cluster.
func modelEnv(url string, n *atomic.Int64) func(t *testing.T) tqtest.ModelEnv {
	return func(t *testing.T) tqtest.ModelEnv {
		sep := "?"
		if strings.Contains(url, "?") {
			sep = "&"
		}
		u := fmt.Sprintf("%s%sprefix=model%d", url, sep, n.Add(1))
		return tqtest.ModelEnv{Open: func(t *testing.T) *tq.Client { return openTQ(t, u) }}
	}
}

func TestModel(t *testing.T) {
	requireModelGate(t)
	srv := redistest.Start(t)
	var n atomic.Int64
	tqtest.RunModel(t, modelEnv(srv.URL(), &n))
}

func TestModelCluster(t *testing.T) {
	requireModelGate(t)
	c := redistest.StartCluster(t)
	var n atomic.Int64
	tqtest.RunModel(t, modelEnv(c.URL(), &n))
}
