package tqserve_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/internal/redisserver"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
	"github.com/tqgo/tqgo/tq/tqtest"
	"github.com/tqgo/tqgo/tqserve"
)

// server is a tq server started for a test on a free loopback port.
type server struct {
	URL string // tq://127.0.0.1:PORT
	srv *tqserve.Server
}

// startServer serves engineURL on a free loopback port until t ends.
func startServer(t testing.TB, engineURL string, opts ...tqserve.ServerOption) *server {
	t.Helper()
	s, err := tqserve.NewServer(t.Context(), engineURL, opts...)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(lis) }()
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("server close: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return &server{URL: "tq://" + lis.Addr().String(), srv: s}
}

// engines are the engines a server is tested over: one whose cells it
// carries (file://) and one whose cells clients reach themselves (redis).
// engineNames numbers the engines tests make (memory:// names, Redis
// prefixes): one per engine across the package, whose tests run side by
// side.
var engineNames atomic.Int64

func engines(t *testing.T) map[string]func(t *testing.T) string {
	out := map[string]func(t *testing.T) string{
		"file": func(t *testing.T) string { return "file://" + t.TempDir() + "?sync=never" },
		"memory": func(t *testing.T) string {
			return fmt.Sprintf("memory://tqserve-%d", engineNames.Add(1))
		},
	}
	var once sync.Once
	var rs *redisserver.Server
	parent := t
	out["redis"] = func(t *testing.T) string {
		redistest.Available(t)
		once.Do(func() { rs = redistest.Start(parent) })
		return fmt.Sprintf("%s?prefix=t%d", rs.URL(), engineNames.Add(1))
	}
	return out
}

func openMeta(t *testing.T, url string) metadata.MetaStore {
	t.Helper()
	eng, err := backends.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Meta.Close(); _ = eng.Data.Close() })
	m, ok := eng.Meta.(metadata.MetaStore)
	if !ok {
		t.Fatalf("%s: engine metadata %T is not a MetaStore", url, eng.Meta)
	}
	return m
}

// The metadata and consumption suites, every call through a server.
func TestMetaQueue(t *testing.T) {
	t.Parallel() // mostly waits out leases, on servers of its own
	for name, eng := range engines(t) {
		t.Run(name, func(t *testing.T) {
			newMeta := func(t *testing.T) metadata.MetaStore { return openMeta(t, startServer(t, eng(t)).URL) }
			t.Run("Meta", func(t *testing.T) { backendtest.RunMeta(t, newMeta) })
			t.Run("Queue", func(t *testing.T) { backendtest.RunQueue(t, newMeta) })
		})
	}
}

// The data-store suite (backendtest.RunStore) through the server's Cells
// service: for the engines whose cells the server carries (file://,
// memory://), the Data of a tq:// client, one per subtest, writes, reads
// and deletes cells as the contract of backends.Store has it. (A client of
// a server over Redis reaches the cells itself, with the Redis engine's
// own store: its suite is the redis package's.)
func TestCells(t *testing.T) {
	t.Parallel()
	for name, eng := range engines(t) {
		if name == "redis" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			s := startServer(t, eng(t))
			backendtest.RunStore(t, func(t *testing.T) backends.Store {
				e, err := backends.Open(t.Context(), s.URL)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = e.Meta.Close(); _ = e.Data.Close() })
				return e.Data
			})
		})
	}
}

// A tq:// client's Data, for an engine whose cells the server carries,
// goes over the connection of its Meta: once that Meta is closed, its
// Write, Read and Delete fail with ErrClosed, not with ErrUnavailable (a
// failure tq retries as a server's outage).
func TestCellsClosedWithMeta(t *testing.T) {
	s := startServer(t, fmt.Sprintf("memory://tqserve-%d", engineNames.Add(1)))
	e, err := backends.Open(t.Context(), s.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Data.Close()
	cells := []backends.Cell{{Key: "k", Body: []byte("v")}}
	if err := e.Data.Write(t.Context(), cells); err != nil {
		t.Fatal(err)
	}
	if err := e.Meta.Close(); err != nil {
		t.Fatal(err)
	}
	for op, err := range map[string]error{
		"Write":  e.Data.Write(t.Context(), cells),
		"Read":   e.Data.Read(t.Context(), []backends.ReadCell{{Key: "k", Tag: cells[0].Tag}}),
		"Delete": e.Data.Delete(t.Context(), cells),
	} {
		if !errors.Is(err, backends.ErrClosed) || errors.Is(err, backends.ErrUnavailable) {
			t.Errorf("%s after the Meta's Close: %v, want ErrClosed (and not ErrUnavailable)", op, err)
		}
	}
}

// The client suite: every client a tq.Open of the server's URL, as
// processes of a job are.
func TestClient(t *testing.T) {
	t.Parallel() // mostly waits out leases, on servers of its own
	for name, eng := range engines(t) {
		t.Run(name, func(t *testing.T) {
			tqtest.Run(t, func(t *testing.T) tqtest.Engine {
				s := startServer(t, eng(t))
				e, err := backends.Open(t.Context(), s.URL)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = e.Meta.Close(); _ = e.Data.Close() })
				return tqtest.Engine{
					Open: func(t *testing.T) *tq.Client { return openClient(t, s.URL) },
					Data: e.Data, Meta: e.Meta.(metadata.MetaStore),
				}
			})
		})
	}
}

// The model: random histories of two clients, each a tq.Open of the
// server, closed mid-history as killed consumers are.
func TestModel(t *testing.T) {
	for name, eng := range engines(t) {
		t.Run(name, func(t *testing.T) {
			if os.Getenv("TQ_MODEL_HISTORIES") == "" {
				// Each step is a call to the server: the engines' own
				// model tests run the longer histories.
				t.Setenv("TQ_MODEL_HISTORIES", "30")
			}
			tqtest.RunModel(t, func(t *testing.T) tqtest.ModelEnv {
				s := startServer(t, eng(t))
				return tqtest.ModelEnv{Open: func(t *testing.T) *tq.Client { return openClient(t, s.URL) }}
			})
		})
	}
}

// The model through a server on Redis with WithIndexBlocks: puts of
// new keys go by Block and PutNew calls; the model takes their indexes
// from the engine and holds each client to its put order.
func TestModelBlocks(t *testing.T) {
	if os.Getenv("TQ_MODEL_HISTORIES") == "" {
		t.Setenv("TQ_MODEL_HISTORIES", "30")
	}
	url := engines(t)["redis"]
	tqtest.RunModel(t, func(t *testing.T) tqtest.ModelEnv {
		s := startServer(t, url(t))
		return tqtest.ModelEnv{Blocks: true, Open: func(t *testing.T) *tq.Client {
			c, err := tq.Open(t.Context(), s.URL, tq.Quiet(), tq.WithIndexBlocks())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			return c
		}}
	})
}

// The model again, with the replies of claims and waits lost at random
// on the way (a proxy resets the call's stream as the reply comes): each
// lost claim is undone and tried again, so every history holds to the
// model as if nothing was lost, with no row left leased to a claim its
// client never saw.
func TestModelLostReplies(t *testing.T) {
	if os.Getenv("TQ_MODEL_HISTORIES") == "" {
		t.Setenv("TQ_MODEL_HISTORIES", "30")
	}
	var drops, seeds atomic.Int64
	tqtest.RunModel(t, func(t *testing.T) tqtest.ModelEnv {
		s := startServer(t, fmt.Sprintf("memory://tqserve-model-lost-%d", engineNames.Add(1)))
		p := startGRPCProxy(t, strings.TrimPrefix(s.URL, "tq://"))
		// The losses are drawn from the history's seed (its subtest's
		// name), so that a replay of the seed loses the same calls, but
		// for calls made in the background (a hand-back, an undo).
		seeds.Add(1)
		h := fnv.New64a()
		h.Write([]byte(t.Name()))
		p.dropAtRandom(map[string]float64{mClaim: 0.1, mWait: 0.1}, h.Sum64())
		t.Cleanup(func() { drops.Add(int64(p.seen(mClaim+"@dropped") + p.seen(mWait+"@dropped"))) })
		return tqtest.ModelEnv{Open: func(t *testing.T) *tq.Client { return openClient(t, "tq://"+p.addr()) }}
	})
	t.Cleanup(func() {
		if drops.Load() == 0 && !t.Failed() {
			t.Errorf("no reply was dropped in %d histories: the test tested nothing", seeds.Load())
		}
		t.Logf("%d replies of claims and waits dropped over %d histories", drops.Load(), seeds.Load())
	})
}

func openClient(t *testing.T, url string) *tq.Client {
	t.Helper()
	c, err := tq.Open(t.Context(), url, tq.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// A client's calls carry the server's token; a wrong or missing one is
// refused with an error matching ErrInvalid that says to check it, and
// changes nothing.
func TestToken(t *testing.T) {
	s := startServer(t, "memory://tqserve-token", tqserve.WithToken("s3cret"))
	u, _ := url.Parse(s.URL)
	good := openClient(t, "tq://:s3cret@"+u.Host)
	ctx := context.Background()
	if err := good.Put(ctx, "p", "k", map[string]any{"x": int64(1)}, nil); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"tq://" + u.Host, "tq://:wrong@" + u.Host} {
		_, err := tq.Open(ctx, bad, tq.Quiet())
		if err == nil {
			t.Fatalf("%s: opened without the token", bad)
		}
		if !errors.Is(err, backends.ErrInvalid) {
			t.Fatalf("%s: %v, want ErrInvalid", bad, err)
		}
	}
	rows, err := good.List(ctx, "p")
	if err != nil || len(rows.Rows) != 1 {
		t.Fatalf("after refused clients: %v, %v", rows, err)
	}
}
