// Command bench is tqgo's performance report: the measurements behind every
// performance claim in docs/performance.md.
//
//	go run ./bench                       # the full report, Markdown on stdout
//	go run ./bench -suites pack -png sweep.png -csv sweep.csv
//	go run ./bench -urls memory://,redis://127.0.0.1:6379/0
//	go run ./bench -suites queue -urls tq+redis -consumers 8,64,256,1000 -reps 3
//
// Suites: pack (TransferQueue PR #153's object-size and object-count sweeps: serial,
// TransferQueue's pool of 16, and the size-aware default, against copy()),
// kv (BatchPut and BatchGet of a GRPO-shaped batch on every engine, parity
// checked, against raw go-redis or copy() of the same bytes), limit
// (copy() bandwidth; raw go-redis beside redis-benchmark) and redis (the
// targets of the Redis engine: against raw go-redis and one round trip per
// key) and queue (claim and ack of a step, wake-up to a row in hand, many
// consumers, claim cost against partition size and, on Redis, the server's
// time per claim, each beside Redis Streams consumer groups on Redis and
// beside a List, a channel, BLPOP or LPOP; on a tq server, -urls tq+redis,
// the wake-ups also beside a relay process of grpc-go alone, a consumer
// sweep of tq:// clients beside Redis Streams consumers and tq
// on redis:// directly, and the takeover of a partition after kill -9 of
// the tq server that owns it, beside its aim of the ownership TTL + 1 s;
// -queue-measures picks among them). The method is
// FlashPack PR #31's: warm-up, interleaved arms, medians and ranges over -reps.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
)

func main() {
	if child, code := runChild(); child {
		os.Exit(code)
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	def := DefaultConfig()
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	suites := fs.String("suites", strings.Join(def.Suites, ","), "suites to run, a comma list of pack, kv, limit, redis, queue")
	sizes := fs.String("sizes", joinSizes(def.Sizes), "object sizes of the pack size sweep and the Redis limits (512, 8KiB, 1MiB, ...)")
	counts := fs.String("counts", joinInts(def.Counts), "object counts of the pack count sweep")
	objects := fs.Int("objects", def.Objects, "objects per batch in the pack size sweep")
	countSize := fs.String("count-size", fmtSize(def.CountSize), "object size of the pack count sweep")
	reps := fs.Int("reps", def.Reps, "repetitions per arm: medians and ranges are over these")
	minSample := fs.Duration("sample", def.MinSample, "minimum duration of one sample (fast operations repeat within it)")
	urls := fs.String("urls", strings.Join(def.URLs, ","), `engines for the kv, limit and queue suites: URLs, "redis" for a private redis-server, "file" (or "file?sync=always") for the file engine in a temporary directory, and "tq+redis" for a private redis-server served by a tq server process (tq serve; "tq+redis://host:port/db" serves that Redis), whose clients open tq:// URLs`)
	samples := fs.Int("samples", def.Samples, "GRPO batch size of the kv suite (rows)")
	L := fs.Int("L", def.L, "sequence length of the kv suite's [L] fields")
	consumers := fs.String("consumers", joinInts(def.Consumers), "consumer counts of the queue suite's contention measure")
	queueSizes := fs.String("queue-sizes", joinInts(def.QueueSizes), "ready rows of the queue suite's claim cost vs partition size")
	sweepTime := fs.Duration("sweep-time", def.SweepTime, "duration of one sample of the queue suite's consumer sweep (tq+redis targets: tq:// clients beside Redis Streams and tq on redis://)")
	queueMeasures := fs.String("queue-measures", strings.Join(def.QueueMeasures, ","), "the queue suite's measures, a comma list of step (claim+ack, wake-ups, contention), size (claim cost vs partition size), sweep (consumer sweep, tq+redis) and takeover (kill -9 of a partition's owner, tq+redis)")
	takeoverTTL := fs.Duration("takeover-ownership", def.TakeoverTTL, "ownership TTL (tq serve -ownership) of the two tq servers of the queue suite's takeover measure")
	serveBin := fs.String("serve-bin", "", "tq binary `FILE` that runs \"tq serve\" for tq+redis targets (default: go build of cmd/tq, from the repository)")
	serveProfile := fs.String("serve-cpuprofile", "", "write the CPU profile of the tq server of a tq+redis target to this `FILE` (go tool pprof FILE)")
	redisBytes := fs.String("redis-bytes", fmtSize(def.RedisBytes), "bytes per batch of the raw Redis limits")
	csvPath := fs.String("csv", "", "also write every measurement to this CSV file")
	pngPath := fs.String("png", "", "also plot the pack size sweep (throughput vs object size) to this PNG file")
	quick := fs.Bool("quick", false, "tiny sizes: checks the harness in seconds, numbers are meaningless")
	progressMode := fs.String("progress", "auto", "progress bar on stderr: auto (only on a terminal), always, never")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}

	cfg := def
	if *quick {
		cfg = QuickConfig()
	}
	// Flags given explicitly override the defaults of either preset (the
	// flag defaults are DefaultConfig's, so without -quick this is all of
	// them in effect).
	var err error
	fs.Visit(func(f *flag.Flag) {
		if err != nil {
			return
		}
		switch f.Name {
		case "suites":
			cfg.Suites = parseList(*suites)
		case "consumers":
			cfg.Consumers, err = parseCounts(*consumers)
		case "queue-sizes":
			cfg.QueueSizes, err = parseCounts(*queueSizes)
		case "sizes":
			cfg.Sizes, err = parseSizes(*sizes)
		case "counts":
			cfg.Counts, err = parseCounts(*counts)
		case "count-size":
			cfg.CountSize, err = parseSize(*countSize)
		case "redis-bytes":
			cfg.RedisBytes, err = parseSize(*redisBytes)
		case "objects":
			cfg.Objects = *objects
		case "sample":
			cfg.MinSample = *minSample
		case "samples":
			cfg.Samples = *samples
		case "L":
			cfg.L = *L
		case "reps":
			cfg.Reps = *reps
		case "urls":
			cfg.URLs = parseList(*urls)
		case "sweep-time":
			cfg.SweepTime = *sweepTime
		case "queue-measures":
			cfg.QueueMeasures = parseList(*queueMeasures)
		case "takeover-ownership":
			cfg.TakeoverTTL = *takeoverTTL
		}
		if err != nil {
			err = fmt.Errorf("-%s: %w", f.Name, err)
		}
	})
	if err != nil {
		return err
	}
	cfg.CSV, cfg.PNG = *csvPath, *pngPath
	cfg.ServeBin, cfg.ServeProfile = *serveBin, *serveProfile
	cfg.Command = "go run ./bench"
	if len(args) > 0 {
		cfg.Command += " " + strings.Join(args, " ")
	}
	switch *progressMode {
	case "auto":
		if isTerminal(os.Stderr) {
			cfg.Progress = os.Stderr
		}
	case "always":
		cfg.Progress = os.Stderr
	case "never":
	default:
		return fmt.Errorf("-progress %q: want auto, always or never", *progressMode)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop() // Ctrl-C stops the run and, through Run's cleanup, a private redis-server
	_, err = Run(ctx, cfg, os.Stdout)
	return err
}

func joinSizes(s []int) string {
	out := make([]string, len(s))
	for i, n := range s {
		out[i] = strings.ReplaceAll(fmtSize(n), " ", "")
	}
	return strings.Join(out, ",")
}

func joinInts(s []int) string {
	out := make([]string, len(s))
	for i, n := range s {
		out[i] = fmt.Sprint(n)
	}
	return strings.Join(out, ",")
}
