package redis_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

// flightProxy forwards TCP to a redis-server and counts round trips as
// the network sees them: a flight is a burst of requests a client sends
// on a connection before it waits for a reply, so a client's first bytes
// on a connection, and its first bytes after the server answered, start
// one each. A pipeline or a MULTI ... EXEC sent at once is one flight, two
// requests one after the other are two.
type flightProxy struct {
	*tcpProxy
	flights atomic.Int64
}

func startFlightProxy(t *testing.T, target string) *flightProxy {
	p := &flightProxy{}
	p.tcpProxy = startTCPProxy(t, target, func(client, server net.Conn) {
		var (
			mu      sync.Mutex
			replied = true // the next bytes from the client start a flight
		)
		go pump(client, server, func(chunk []byte) ([]byte, bool) {
			mu.Lock()
			replied = true
			mu.Unlock()
			return chunk, false
		})
		pump(server, client, func(chunk []byte) ([]byte, bool) {
			mu.Lock()
			if replied {
				p.flights.Add(1)
				replied = false
			}
			mu.Unlock()
			return chunk, false
		})
	})
	return p
}

// rtTracer records the round trips the client's tracer saw in its last call.
type rtTracer struct{ last atomic.Int64 }

func (r *rtTracer) TraceStart(ctx context.Context, _ *tq.Client, _ tq.Call) context.Context {
	return ctx
}

func (r *rtTracer) TraceEnd(_ context.Context, _ *tq.Client, _ tq.Call, end tq.CallEnd) {
	r.last.Store(end.RoundTrips)
}

// TestPutAndGetRoundTrips counts, through a proxy, the round trips of a
// GRPO-shaped put (stacked and jagged tensor columns and a values column)
// that fits one write round, and of reads of its rows, on a standalone
// server: the put is two (Prepare; every cell with the commit in one
// MULTI/EXEC), a read by a client that has seen the rows one (the log
// check rides with the MGET), a read by a client that has not two (its
// log read, then the cells). The engine wrapped by backendtest.Wrap keeps
// those counts (Wrap passes Colocated through), and the client's tracer
// reports what the proxy saw.
func TestPutAndGetRoundTrips(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	keys := keysOf("k", 16)
	for _, wrapped := range []bool{false, true} {
		name := "bare"
		if wrapped {
			name = "wrapped"
		}
		t.Run(name, func(t *testing.T) {
			p := startFlightProxy(t, srv.Addr())
			url := p.url("rt-" + name)
			tr := &rtTracer{}
			newClient := func() *tq.Client {
				s := open(t, url)
				eng := engine(s)
				if wrapped {
					eng = backendtest.Wrap(eng, &backendtest.Faulty{})
					if _, ok := eng.Log.(backends.LogCells); !ok {
						t.Fatal("the wrapped engine's Log is not a LogCells")
					}
				}
				c, err := tq.New(eng, tq.WithTracer(tr), tq.WithRetry(tq.NoRetry))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				// Warm up: connections dialled, scripts loaded.
				if err := c.BatchPut(ctx, "warm", keys, rollout(keys, 0), nil); err != nil {
					t.Fatal(err)
				}
				if _, err := c.BatchGet(ctx, "warm", keys); err != nil {
					t.Fatal(err)
				}
				return c
			}
			writer, reader := newClient(), newClient()
			count := func(what string, want int64, call func() error) {
				t.Helper()
				before := p.flights.Load()
				if err := call(); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				got := p.flights.Load() - before
				if got != want {
					t.Errorf("%s: %d round trips through the proxy, want %d", what, got, want)
				}
				if rt := tr.last.Load(); rt != got {
					t.Errorf("%s: the tracer reported %d round trips, the proxy saw %d", what, rt, got)
				}
			}
			count("put of tensor and values columns", 2, func() error {
				return writer.BatchPut(ctx, "p", keys, rollout(keys, 1), nil)
			})
			count("read of rows the client wrote", 1, func() error {
				b, err := writer.BatchGet(ctx, "p", keys)
				if err == nil {
					checkRollout(t, b, keys, 1, allRows(len(keys)))
				}
				return err
			})
			count("read of rows the client has not seen", 2, func() error {
				b, err := reader.BatchGet(ctx, "p", keys)
				if err == nil {
					checkRollout(t, b, keys, 1, allRows(len(keys)))
				}
				return err
			})
			count("read again of rows the client has now seen", 1, func() error {
				_, err := reader.BatchGet(ctx, "p", keys)
				return err
			})
		})
	}
}

func keysOf(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	return out
}

func allRows(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// TestClusterRoundTrips: on a Cluster the engine moves cells on go-redis
// (no direct connections), and a partition's log and the global index
// counter may live on different nodes, so a put is four round trips (the
// indexes from the counter; the reservation appended to the partition's
// log; the cells' SETs, one pipeline per node, in parallel; the commit)
// and a read two (the log, then the cells' GETs), whether or not the
// client has seen the rows. Counted by the tracer, which the engine's
// go-redis hook feeds (one per command or per node's pipeline).
func TestClusterRoundTrips(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	ctx := t.Context()
	keys, warm := keysOf("k", 16), keysOf("w", 16)
	tr := &rtTracer{}
	newClient := func() *tq.Client {
		c := openTQ(t, cl.URL()+"?prefix=rt", tq.WithTracer(tr))
		// Warm up on the same partition (its node has the scripts loaded)
		// and on other rows.
		if err := c.BatchPut(ctx, "p", warm, rollout(warm, 0), nil); err != nil {
			t.Fatal(err)
		}
		if _, err := c.BatchGet(ctx, "p", warm); err != nil {
			t.Fatal(err)
		}
		return c
	}
	writer, reader := newClient(), newClient()
	// The writer catches up with the reader's warm-up records (a client
	// behind the log reads it before its write is accepted).
	if _, err := writer.BatchGet(ctx, "p", warm); err != nil {
		t.Fatal(err)
	}
	count := func(what string, want int64, call func() error) {
		t.Helper()
		if err := call(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := tr.last.Load(); got != want {
			t.Errorf("%s: %d round trips, want %d", what, got, want)
		}
	}
	count("put", 4, func() error { return writer.BatchPut(ctx, "p", keys, rollout(keys, 1), nil) })
	count("read of rows the client wrote", 2, func() error { _, err := writer.BatchGet(ctx, "p", keys); return err })
	count("read of rows the client has not seen", 2, func() error { _, err := reader.BatchGet(ctx, "p", keys); return err })
}
