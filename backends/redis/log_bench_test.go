package redis_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/internal/redistest"
)

// The Log's calls, one at a time, against a private server (and a
// three-master Cluster):
//
//	go test -run '^$' -bench Log -count 5 ./backends/redis
//
// Besides ns/op each reports the server's time per call: script-µs/op,
// what INFO commandstats counts for the call's top command (EVALSHA, or
// EXEC for a transaction), and server-cpu-µs/op, the server process's
// CPU time (INFO cpu, user and system), which adds parsing the request,
// writing the reply and the event loop.

// serverTime reads a server's time counters.
type serverTime struct {
	c *goredis.Client
}

// sample returns the microseconds INFO commandstats counts for cmd, and
// the server's CPU time in microseconds.
func (s serverTime) sample(b *testing.B, cmd string) (usec, cpu float64) {
	info, err := s.c.Info(context.Background(), "commandstats", "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":"); ok {
			for f := range strings.SplitSeq(rest, ",") {
				if v, ok := strings.CutPrefix(f, "usec="); ok {
					usec, _ = strconv.ParseFloat(v, 64)
				}
			}
		}
		for _, k := range []string{"used_cpu_user:", "used_cpu_sys:"} {
			if v, ok := strings.CutPrefix(line, k); ok {
				x, _ := strconv.ParseFloat(v, 64)
				cpu += x * 1e6
			}
		}
	}
	return usec, cpu
}

// measure runs f b.N times and reports the server's time per call.
func (s serverTime) measure(b *testing.B, cmd string, f func(i int)) {
	u0, c0 := s.sample(b, cmd)
	b.ResetTimer()
	for i := range b.N {
		f(i)
	}
	b.StopTimer()
	u1, c1 := s.sample(b, cmd)
	b.ReportMetric((u1-u0)/float64(b.N), "script-µs/op")
	b.ReportMetric((c1-c0)/float64(b.N), "server-cpu-µs/op")
}

// logBenchEnv is a server kind to benchmark on.
type logBenchEnv struct {
	name string
	// start starts the server and returns its URL and the client of the
	// node that holds key, given a Store on it.
	start func(b *testing.B) (url string, node func(s *redis.Store, key string) *goredis.Client)
	opts  []redis.Option
}

// Each server starts in its own sub-benchmark, so that a Cluster's nodes
// do not run beside the standalone benchmarks.
var logBenchEnvs = []logBenchEnv{
	{name: "standalone", start: benchStandalone},
	{name: "standalone-goredis", start: benchStandalone, opts: []redis.Option{redis.WithDirectConnections(false)}},
	{name: "cluster", start: func(b *testing.B) (string, func(s *redis.Store, key string) *goredis.Client) {
		c := redistest.StartCluster(b)
		return c.URL(), func(s *redis.Store, key string) *goredis.Client {
			n, err := s.Client().(*goredis.ClusterClient).MasterForKey(context.Background(), key)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}},
}

func benchStandalone(b *testing.B) (string, func(s *redis.Store, key string) *goredis.Client) {
	srv := redistest.Start(b)
	return srv.URL(), func(s *redis.Store, key string) *goredis.Client { return s.Client().(*goredis.Client) }
}

// BenchmarkLog: Append of one small record from the log's end (the reply
// holds only its own entry), Read from the end (nothing new), Read of one
// new entry, and on a standalone server AppendCells of one small cell
// with its record and ReadCells of that cell with the log.
func BenchmarkLog(b *testing.B) {
	data := []byte(strings.Repeat("r", 64))
	for _, e := range logBenchEnvs {
		b.Run(e.name, func(b *testing.B) {
			const prefix = "bench"
			url, node := e.start(b)
			l, s := openLog(b, url+"?prefix="+prefix, e.opts...)
			ctx := context.Background()
			st := serverTime{node(s, logKey(prefix, "p", "log"))}
			var end backends.Pos
			appendOne := func(p string, r backends.Record) {
				tail, err := l.Append(ctx, p, end, []backends.Record{r})
				if err != nil {
					b.Fatal(err)
				}
				if len(tail.Entries) != 1 {
					b.Fatalf("append from the end replied %d entries", len(tail.Entries))
				}
				end = tail.End(end)
			}
			appendOne("p", backends.Record{ID: 1, Data: data}) // loads the script
			if _, err := l.Read(ctx, "p", end, 0); err != nil {
				b.Fatal(err)
			}
			b.Run("Append", func(b *testing.B) {
				st.measure(b, "evalsha", func(i int) {
					appendOne("p", backends.Record{ID: uint64(i) + 2<<32, Data: data})
				})
			})
			b.Run("AppendIndexes", func(b *testing.B) {
				st.measure(b, "evalsha", func(i int) {
					appendOne("p", backends.Record{ID: uint64(i) + 3<<32, Indexes: 16, Data: data})
				})
			})
			b.Run("ReadEnd", func(b *testing.B) {
				st.measure(b, "evalsha", func(int) {
					tail, err := l.Read(ctx, "p", end, 0)
					if err != nil || len(tail.Entries) != 0 {
						b.Fatal(len(tail.Entries), err)
					}
				})
			})
			b.Run("ReadOne", func(b *testing.B) {
				var before backends.Pos
				for _, x := range readAll(b, l, "p").Entries {
					if x.N == end.N-1 {
						before = x.Pos()
					}
				}
				st.measure(b, "evalsha", func(int) {
					tail, err := l.Read(ctx, "p", before, 0)
					if err != nil || len(tail.Entries) != 1 {
						b.Fatal(len(tail.Entries), err)
					}
				})
			})
			lc, ok := l.(backends.LogCells)
			if !ok {
				return
			}
			cell := []byte(strings.Repeat("c", 512))
			b.Run("AppendCells", func(b *testing.B) {
				cmd := "exec"
				if on, _ := redis.DirectConnections(s); !on {
					cmd = "evalsha" // Write, then Append
				}
				st.measure(b, cmd, func(i int) {
					tail, err := lc.AppendCells(ctx, "p", end, []backends.Cell{{Key: "bench@" + strconv.Itoa(i), Body: cell}},
						[]backends.Record{{ID: uint64(i) + 4<<32, Indexes: 1, Data: data}})
					if err != nil || len(tail.Entries) != 1 {
						b.Fatal(len(tail.Entries), err)
					}
					end = tail.End(end)
				})
			})
			b.Run("ReadCells", func(b *testing.B) {
				dst := make([]byte, len(cell))
				st.measure(b, "exec", func(int) {
					rc := []backends.ReadCell{{Key: "bench@0", Body: dst}}
					tail, err := lc.ReadCells(ctx, "p", end, rc)
					if err != nil || len(tail.Entries) != 0 || !rc[0].Found {
						b.Fatal(len(tail.Entries), rc[0].Found, err)
					}
				})
			})
		})
	}
}

func readAll(b *testing.B, l backends.Log, p string) backends.Tail {
	tail, err := l.Read(context.Background(), p, backends.Pos{}, 0)
	if err != nil {
		b.Fatal(err)
	}
	return tail
}
