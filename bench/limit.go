package main

import (
	"context"
	"fmt"
	"github.com/tqgo/tqgo/internal/childproc"
	"os/exec"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// redis-benchmark's shape per value size: -P 64 as the team's machine notes ran it,
// but at most benchPipeBytes per pipeline and benchFlightBytes in flight over
// all connections (-c at most 50, its default). Deeper pipelines of large
// values stall redis-benchmark itself (SET of 1 MiB values at -P 16 -c 1
// measured 61 requests/s here, against 919 at -P 2 -c 8).
const (
	benchPipeBytes   = 2 << 20
	benchFlightBytes = 16 << 20
)

// benchShape returns redis-benchmark's -P, -c and -n for n objects of size
// bytes: at least n requests and four pipelines per connection.
//
// A light shape (-quick) uses at most 4 connections, still enough requests
// that redis-benchmark's millisecond clock does not read 0 ("inf requests
// per second").
func benchShape(size, n int, light bool) (pipeline, clients, requests int) {
	pipeline = min(max(benchPipeBytes/size, 1), 64)
	clients = min(max(benchFlightBytes/(pipeline*size), 1), 50)
	if light {
		clients = min(clients, 4)
		return pipeline, clients, max(n, 32*clients*pipeline)
	}
	return pipeline, clients, max(n, 4*clients*pipeline)
}

// limitObjects is how many objects of size bytes a raw Redis batch holds:
// about bytes in all, at least 64 objects and at most objects (the pack
// sweep's count).
func limitObjects(size, bytes, objects int) int {
	return max(min(bytes/size, objects), min(64, objects))
}

func limitSteps(cfg Config, targets []*target, havePack bool, m *meter) int {
	n := 0
	if !havePack {
		n += len(cfg.Sizes) * m.planSteps(1)
	}
	for _, t := range targets {
		if t.isRedis() && !t.isServed() {
			n += len(cfg.Sizes) * m.planSteps(3)
		}
	}
	return n
}

// runLimit measures what the hardware and the servers allow, so the other
// tables can be read against it: copy() on one goroutine per object size,
// and for each Redis server raw go-redis beside redis-benchmark.
func runLimit(ctx context.Context, cfg Config, m *meter, targets []*target, rep *Report) error {
	if err := limitCopy(ctx, cfg, m, rep); err != nil {
		return err
	}
	for _, t := range targets {
		if t.isRedis() && !t.isServed() { // a served Redis server's limits are its own
			if err := limitRedis(ctx, cfg, m, t, rep); err != nil {
				return err
			}
		}
	}
	return nil
}

func limitCopy(ctx context.Context, cfg Config, m *meter, rep *Report) error {
	if len(cfg.Sizes) == 0 {
		return nil
	}
	t := &Table{
		ID:     "limit-copy",
		Title:  fmt.Sprintf("Limit: copy() bandwidth, one goroutine (%d objects per batch)", cfg.Objects),
		Intro:  "Each object copied into its own preallocated, already faulted-in destination; median [min–max] of the repetitions.",
		Header: []string{"object size", "objects", "time per batch", "bandwidth"},
	}
	points := rep.SizeSweep // the pack suite measured these very copies
	if len(points) == 0 {
		for _, size := range cfg.Sizes {
			d, err := copyPoint(ctx, m, size, cfg.Objects)
			if err != nil {
				return err
			}
			points = append(points, sweepPoint{Size: size, Objects: cfg.Objects, Copy: d})
		}
	} else {
		t.Intro += " (Measured by the pack suite, interleaved with the packers.)"
	}
	for _, p := range points {
		b := float64(p.bytes())
		t.Rows = append(t.Rows, []string{fmtSize(p.Size), fmt.Sprint(p.Objects), fmtTime(p.Copy), fmtRateDist(b, p.Copy)})
		rep.Records = append(rep.Records, Record{Suite: "limit", Table: t.ID, Row: fmtSize(p.Size), Series: "copy", Unit: "s", Dist: p.Copy, Bytes: p.bytes()})
	}
	rep.Tables = append(rep.Tables, t)
	return nil
}

func copyPoint(ctx context.Context, m *meter, size, objects int) (Dist, error) {
	defer func() {
		runtime.GC()
		debug.FreeOSMemory()
	}()
	_, srcs := packValues(objects, size)
	backing := make([]byte, size*objects)
	clear(backing) // fault the pages in
	a := &arm{name: "copy", op: func() error {
		for i, s := range srcs {
			copy(backing[i*size:], s)
		}
		return nil
	}}
	d, err := m.run(ctx, fmt.Sprintf("copy %s×%d", fmtSize(size), objects), []*arm{a})
	if err != nil {
		return Dist{}, err
	}
	return d[0], nil
}

// limitRedis measures one Redis server per object size: go-redis pipelined
// SET and MGET of limitObjects objects, and redis-benchmark -P 64 against a
// private server.
func limitRedis(ctx context.Context, cfg Config, m *meter, t *target, rep *Report) error {
	bench := ""
	switch path, err := exec.LookPath("redis-benchmark"); {
	case !t.private:
		rep.note("%s: redis-benchmark not run (it writes its own keys; it runs only against a private server)", t.name)
	case err != nil:
		rep.note("%s: redis-benchmark not on PATH, its column is empty", t.name)
	default:
		bench = path
	}
	host, port, _ := strings.Cut(t.redisOpts.Addr, ":")
	tab := &Table{
		ID:    "limit-" + t.name,
		Title: fmt.Sprintf("Limit: %s, raw go-redis beside redis-benchmark", t.name),
		Intro: fmt.Sprintf("go-redis on one connection: pipelined SETs, then pipelined MGETs of %d keys, a pipeline per %s of values, "+
			"over up to %d objects and about %s per batch; the read is checked against what was written. "+
			"redis-benchmark: `redis-benchmark -h %s -p %s -P P -c C -t set,get -d SIZE -n N -q`, with -P 64 -c 50 for small values "+
			"and shallower for large ones (about 2 MiB per pipeline and 16 MiB in flight: deep pipelines of large values stall "+
			"redis-benchmark); the last column gives -P/-c/-n. redis-benchmark overwrites one key, so the server reuses that value's memory, "+
			"while go-redis (like tq) writes distinct keys, for which the server faults fresh pages in: its SET is an optimistic limit. "+
			"Throughput, median [min–max] of the repetitions; "+
			"\"of benchmark\" is go-redis's median over redis-benchmark's.",
			mgetChunk, fmtSize(rawRoundBytes), cfg.Objects, fmtSize(cfg.RedisBytes), host, port),
		Header: []string{"object size", "objects", "go-redis SET", "redis-benchmark SET", "of benchmark", "go-redis MGET", "redis-benchmark GET", "of benchmark", "-P/-c/-n"},
	}
	for _, size := range cfg.Sizes {
		row, err := redisPoint(ctx, cfg, m, t, bench, size, limitObjects(size, cfg.RedisBytes, cfg.Objects), rep)
		if err != nil {
			return err
		}
		tab.Rows = append(tab.Rows, row)
	}
	rep.Tables = append(rep.Tables, tab)
	return nil
}

func redisPoint(ctx context.Context, cfg Config, m *meter, t *target, bench string, size, n int, rep *Report) ([]string, error) {
	_, srcs := packValues(n, size)
	raw := newRawRedis(t.redisOpts, n)
	defer raw.Close()
	set := &arm{name: "go-redis SET", timed: func() (time.Duration, error) {
		start := time.Now()
		if err := raw.set(ctx, srcs); err != nil {
			return 0, err
		}
		d := time.Since(start)
		return d, raw.del(ctx, n)
	}}
	get := &arm{name: "go-redis MGET", timed: func() (time.Duration, error) {
		if err := raw.set(ctx, srcs); err != nil {
			return 0, err
		}
		start := time.Now()
		cmds, err := raw.mget(ctx, srcs)
		if err != nil {
			return 0, err
		}
		d := time.Since(start)
		if err := raw.check(cmds, srcs); err != nil {
			return 0, fmt.Errorf("parity: %w", err)
		}
		return d, raw.del(ctx, n)
	}}
	arms := []*arm{set, get}
	// redis-benchmark reports both commands per run: its SET is the arm's
	// time, its GET goes to getSecs. Times are per n objects, like go-redis.
	var getSecs []float64
	shape := "n/a"
	if bench != "" {
		rb := &redisBenchmark{path: bench, opts: t.redisOpts, size: size}
		rb.pipeline, rb.clients, rb.requests = benchShape(size, n, cfg.Quick)
		shape = fmt.Sprintf("%d/%d/%d", rb.pipeline, rb.clients, rb.requests)
		arms = append(arms, &arm{name: "redis-benchmark", once: true, timed: func() (time.Duration, error) {
			setRPS, getRPS, err := rb.run(ctx)
			if err != nil {
				return 0, err
			}
			getSecs = append(getSecs, float64(n)/getRPS)
			return time.Duration(float64(n) / setRPS * float64(time.Second)), nil
		}})
	}
	label := fmt.Sprintf("%s %s×%d", t.name, fmtSize(size), n)
	dists, err := m.run(ctx, label, arms)
	if err != nil {
		return nil, err
	}
	bytes := float64(size * n)
	rate := func(d Dist) string { return fmtRateDist(bytes, d) }
	benchSet, benchGet := Dist{}, Dist{}
	if bench != "" {
		benchSet = dists[2]
		benchGet = summarize(getSecs[len(getSecs)-m.reps:]) // drop the warm-up run
	}
	row := []string{fmtSize(size), fmt.Sprint(n), rate(dists[0]), rate(benchSet), ofLimit(benchSet, dists[0]),
		rate(dists[1]), rate(benchGet), ofLimit(benchGet, dists[1]), shape}
	for _, s := range []struct {
		name string
		d    Dist
	}{{"go-redis SET", dists[0]}, {"go-redis MGET", dists[1]}, {"redis-benchmark SET", benchSet}, {"redis-benchmark GET", benchGet}} {
		if s.d.N > 0 {
			rep.Records = append(rep.Records, Record{Suite: "limit", Table: "limit-" + t.name, Row: fmtSize(size), Series: s.name, Unit: "s", Dist: s.d, Bytes: int64(size * n)})
		}
	}
	return row, nil
}

// ofLimit is the share of the limit's throughput a measurement reached.
func ofLimit(limit, d Dist) string {
	if limit.N == 0 || d.N == 0 {
		return "n/a"
	}
	return fmtPercent(limit.Median / d.Median)
}

// redisBenchmark runs the redis-benchmark binary against one server.
type redisBenchmark struct {
	path                        string
	opts                        *redis.Options
	size                        int
	pipeline, clients, requests int
}

var rpsLine = regexp.MustCompile(`(SET|GET): ([0-9.]+) requests per second`)

// run returns SET and GET requests per second.
func (b *redisBenchmark) run(ctx context.Context) (setRPS, getRPS float64, err error) {
	host, port, _ := strings.Cut(b.opts.Addr, ":")
	args := []string{"-h", host, "-p", port, "-P", strconv.Itoa(b.pipeline), "-c", strconv.Itoa(b.clients),
		"-t", "set,get", "-d", strconv.Itoa(b.size), "-n", strconv.Itoa(b.requests), "-q"}
	if b.opts.DB != 0 {
		args = append(args, "--dbnum", strconv.Itoa(b.opts.DB))
	}
	if b.opts.Password != "" {
		args = append(args, "-a", b.opts.Password)
	}
	cmd := exec.CommandContext(ctx, b.path, args...)
	childproc.Tie(cmd)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w: %s", strings.Join(cmd.Args, " "), err, tail(out))
	}
	// -q prints progress lines ending in \r before each result line; the
	// last match of each command is its result.
	for _, mt := range rpsLine.FindAllStringSubmatch(string(out), -1) {
		v, perr := strconv.ParseFloat(mt[2], 64)
		if perr != nil || v <= 0 {
			continue
		}
		if mt[1] == "SET" {
			setRPS = v
		} else {
			getRPS = v
		}
	}
	if setRPS == 0 || getRPS == 0 {
		return 0, 0, fmt.Errorf("%s: no SET and GET rates in its output: %s", strings.Join(cmd.Args, " "), tail(out))
	}
	return setRPS, getRPS, nil
}

// tail is the end of a tool's output, its progress lines (ended by \r)
// dropped, for an error message.
func tail(out []byte) string {
	s := string(out)
	if i := strings.LastIndexByte(s, '\r'); i >= 0 {
		s = s[i+1:]
	}
	s = strings.TrimSpace(s)
	if len(s) > 300 {
		s = "…" + s[len(s)-300:]
	}
	return s
}
