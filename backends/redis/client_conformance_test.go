package redis_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
	"github.com/tqgo/tqgo/tq/tqtest"
)

// clientEngine hands each subtest of the client suite its own prefix on
// one server, so subtests never see each other's keys.
func clientEngine(url string, n *atomic.Int64) func(t *testing.T) tqtest.Engine {
	return func(t *testing.T) tqtest.Engine {
		sep := "?"
		if strings.Contains(url, "?") {
			sep = "&"
		}
		u := fmt.Sprintf("%s%sprefix=tqtest%d", url, sep, n.Add(1))
		s := open(t, u)
		return tqtest.Engine{
			Open: func(t *testing.T) *tq.Client { return openTQ(t, u) },
			Data: s,
			Meta: metaOf(s),
		}
	}
}

func TestClientConformance(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var n atomic.Int64
	t.Run("Standalone", func(t *testing.T) {
		t.Parallel()
		tqtest.Run(t, clientEngine(srv.URL(), &n))
	})
	t.Run("NoDirect", func(t *testing.T) {
		t.Parallel()
		tqtest.Run(t, clientEngine(srv.URL()+"?direct=false", &n))
	})
}

func TestClientConformanceCluster(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	var n atomic.Int64
	tqtest.Run(t, clientEngine(c.URL(), &n))
}
