package tqserve_test

import (
	"os"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

// cpuTime is the user and system CPU time this process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkServedClaim is C consumers, each a tq:// client of its own, of
// one task of a partition on Redis served by an in-process tq server,
// each looping Claim(8) with the ack of its previous lease riding on it
// (tq.Acking). ns/op is wall time per claim; cpu-µs/claim the CPU time of
// the clients and the server together (Redis's apart), which on shared
// cores varies less than the wall time; B/op and allocs/op (-benchmem)
// are theirs too. With TQ_BENCH_PROFILE=FILE the CPU profile of the
// claims alone (not the puts before them) goes to FILE.
//
//	go test -run '^$' -bench ServedClaim -benchtime 20000x -benchmem ./tqserve
func BenchmarkServedClaim(b *testing.B) {
	redistest.Available(b)
	rs := redistest.Start(b)
	for _, consumers := range []int{1, 8, 64} {
		b.Run("consumers="+strconv.Itoa(consumers), func(b *testing.B) {
			ctx := b.Context()
			// A prefix per run: -count and the first run of b.N=1 share the server.
			srv := startServer(b, rs.URL()+"?prefix=bench"+strconv.FormatInt(engineNames.Add(1), 10))
			clients := make([]*tq.Client, consumers)
			for i := range clients {
				c, err := tq.Open(ctx, srv.URL)
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				clients[i] = c
			}
			const p = "sweep"
			rows := b.N*8 + consumers*8
			const chunk = 10000
			ids := make([]int64, chunk)
			for at := 0; at < rows; at += chunk {
				n := min(chunk, rows-at)
				keys := make([]string, n)
				for i := range keys {
					keys[i] = "r" + strconv.Itoa(at+i)
				}
				if err := clients[0].BatchPut(ctx, p, keys, tq.Batch{"id": tq.Stacked(ids[:n], n)}, nil); err != nil {
					b.Fatal(err)
				}
			}
			tasks := make([]*tq.Task, consumers)
			for i, c := range clients {
				var err error
				if tasks[i], err = c.Task(p, "t", []string{"id"}); err != nil {
					b.Fatal(err)
				}
			}
			if f := os.Getenv("TQ_BENCH_PROFILE"); f != "" && b.N > 1 {
				out, err := os.Create(f)
				if err != nil {
					b.Fatal(err)
				}
				defer out.Close()
				if err := pprof.StartCPUProfile(out); err != nil {
					b.Fatal(err)
				}
				defer pprof.StopCPUProfile()
			}
			// TQ_BENCH_ALLOCS=F writes the allocations profile before the
			// loop (F.base) and after it (F): `go tool pprof -base F.base F`
			// reads what the claims allocated, the set-up left out.
			allocs := os.Getenv("TQ_BENCH_ALLOCS")
			if allocs != "" && b.N > 1 {
				writeAllocs(b, allocs+".base")
			}
			var left atomic.Int64
			left.Store(int64(b.N))
			var wg sync.WaitGroup
			errs := make([]error, consumers)
			cpu0 := cpuTime()
			b.ResetTimer()
			for i, task := range tasks {
				wg.Go(func() {
					var prev *tq.Lease
					for left.Add(-1) >= 0 {
						l, err := task.Claim(ctx, 8, tq.Acking(prev))
						if err != nil {
							errs[i] = err
							return
						}
						if l.Len() != 8 {
							errs[i] = &shortClaim{l.Len()}
							return
						}
						prev = l
					}
					if prev != nil {
						errs[i] = prev.Ack(ctx)
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/claim")
			if allocs != "" && b.N > 1 {
				writeAllocs(b, allocs)
			}
			for _, err := range errs {
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// writeAllocs writes the process's allocations profile to file.
func writeAllocs(b *testing.B, file string) {
	out, err := os.Create(file)
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()
	if err := pprof.Lookup("allocs").WriteTo(out, 0); err != nil {
		b.Fatal(err)
	}
}

type shortClaim struct{ n int }

func (e *shortClaim) Error() string { return "a claim leased " + strconv.Itoa(e.n) + " rows of 8" }
