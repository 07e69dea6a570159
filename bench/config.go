package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Suites, in the order a report prints them.
var allSuites = []string{"pack", "kv", "limit", "redis", "queue"}

// The queue suite's measures: step (claim+ack of a step, the wake-ups,
// contention; the queue table), size (claim cost against partition size),
// sweep (the consumer sweep of served targets) and takeover (takeover
// after kill -9 of a partition's owner, served targets).
var allQueueMeasures = []string{"step", "size", "sweep", "takeover"}

// Config is one run of the report. DefaultConfig is the report of docs/performance.md;
// QuickConfig shrinks every size so the whole run takes a second or two.
type Config struct {
	Suites []string // subset of allSuites

	// pack
	Sizes     []int // object sizes of the size sweep (and of the Redis limits)
	Objects   int   // objects per batch in the size sweep (TransferQueue PR #153: 1024)
	Counts    []int // object counts of the count sweep
	CountSize int   // object size of the count sweep (TransferQueue PR #153: 512 B)

	// method (FlashPack PR #31)
	Reps      int           // samples per arm, each a median input (>= 1)
	MinSample time.Duration // each sample repeats its op for at least this long

	// kv
	URLs    []string // engines: URLs, "redis" for a private redis-server, "file[?params]" for the file engine in a temporary directory
	Samples int      // GRPO batch size (samples = rows)
	L       int      // sequence length of the [L] fields

	// limit
	RedisBytes int // bytes per batch of the raw Redis limits (object count = RedisBytes/size, clamped)

	// redis
	RedisShapes []redisShape // batch shapes measured against the Redis engine's targets

	// queue (its step is Samples rows)
	Consumers  []int // consumer counts of the contention measure and of the served targets' consumer sweep
	QueueSizes []int // ready rows of the claim-cost-vs-partition-size measure
	// SweepTime bounds one sample of the consumer sweep (served targets):
	// its consumers claim until it has passed.
	SweepTime time.Duration
	// QueueMeasures are the queue suite's measures to run, a subset of
	// allQueueMeasures.
	QueueMeasures []string
	// TakeoverTTL is the ownership TTL (tq serve -ownership) of the servers
	// of the takeover measure (served targets).
	TakeoverTTL time.Duration

	// served targets (tq+redis)
	ServeBin     string // a tq binary to run `tq serve` with ("": build cmd/tq)
	ServeProfile string // the tq server's CPU profile goes here ("": none)

	// Quick marks the toy preset: outside tools (redis-benchmark) run at
	// their lightest too.
	Quick bool

	CSV string // write the records here as CSV ("" for none)
	PNG string // write the size-sweep plot here ("" for none)

	Progress io.Writer // where the progress bar goes; nil for none
	Command  string    // the command line, printed in the header
}

// DefaultConfig is the full report, sized to finish in a few minutes on two
// cores.
func DefaultConfig() Config {
	return Config{
		Suites:     slices.Clone(allSuites),
		Sizes:      []int{512, 8 << 10, 32 << 10, 256 << 10, 512 << 10, 1 << 20},
		Objects:    1024,
		Counts:     []int{128, 256, 512, 1024, 2048, 4096, 8192},
		CountSize:  512,
		Reps:       5,
		MinSample:  50 * time.Millisecond,
		URLs:       []string{"memory://", "file", "redis", "yuanrong://"},
		Samples:    512,
		L:          512,
		RedisBytes: 64 << 20,
		// The Redis targets' shapes.
		RedisShapes: []redisShape{{1024, 512}, {1024, 8 << 10}, {64, 1 << 20}},
		Consumers:   []int{8, 64},
		QueueSizes:  []int{1_000, 10_000, 100_000},
		SweepTime:   2 * time.Second,

		QueueMeasures: slices.Clone(allQueueMeasures),
		// Short, so that a repetition of the takeover measure takes
		// seconds (tqserve.DefaultOwnership is 10 s).
		TakeoverTTL: 2 * time.Second,
	}
}

// QuickConfig is DefaultConfig at toy sizes: every code path, no numbers
// worth reading. The test runs it.
func QuickConfig() Config {
	c := DefaultConfig()
	c.Quick = true
	c.Sizes = []int{512, 4 << 10}
	c.Objects = 16
	c.Counts = []int{8, 32}
	c.CountSize = 512
	c.Reps = 3
	c.MinSample = 200 * time.Microsecond
	c.Samples = 8
	c.L = 16
	c.RedisBytes = 64 << 10
	c.RedisShapes = []redisShape{{16, 512}, {8, 4 << 10}}
	c.Consumers = []int{2, 4}
	c.SweepTime = 50 * time.Millisecond
	c.TakeoverTTL = 500 * time.Millisecond
	// The fewest rows a sample of claim cost needs: 100,000 rows take
	// seconds to write and to claim from.
	c.QueueSizes = []int{sizeMinRows, 2 * sizeMinRows}
	return c
}

func (c Config) validate() error {
	if len(c.Suites) == 0 {
		return fmt.Errorf("no suites")
	}
	for _, s := range c.Suites {
		if !slices.Contains(allSuites, s) {
			return fmt.Errorf("unknown suite %q (have %s)", s, strings.Join(allSuites, ", "))
		}
	}
	for _, m := range c.QueueMeasures {
		if !slices.Contains(allQueueMeasures, m) {
			return fmt.Errorf("unknown queue measure %q (have %s)", m, strings.Join(allQueueMeasures, ", "))
		}
	}
	for _, s := range c.Sizes {
		if s < 1 {
			return fmt.Errorf("object size %d < 1", s)
		}
	}
	for _, n := range c.Counts {
		if n < 1 {
			return fmt.Errorf("object count %d < 1", n)
		}
	}
	switch {
	case c.Reps < 1:
		return fmt.Errorf("reps %d < 1", c.Reps)
	case c.Objects < 1:
		return fmt.Errorf("objects %d < 1", c.Objects)
	case c.CountSize < 1:
		return fmt.Errorf("count-sweep object size %d < 1", c.CountSize)
	case c.Samples < 1 || c.L < 1:
		return fmt.Errorf("kv batch %d samples × L %d: both must be >= 1", c.Samples, c.L)
	case len(c.Consumers) == 0 || slices.Min(c.Consumers) < 1:
		return fmt.Errorf("consumers %v: want counts >= 1", c.Consumers)
	case len(c.QueueSizes) > 0 && slices.Min(c.QueueSizes) < sizeMinRows:
		return fmt.Errorf("queue sizes %v: each must be >= %d rows (the claims of one sample)", c.QueueSizes, sizeMinRows)
	case c.SweepTime <= 0:
		return fmt.Errorf("sweep time %v: want > 0", c.SweepTime)
	case c.TakeoverTTL < 100*time.Millisecond:
		return fmt.Errorf("takeover ownership %v: want at least 100ms", c.TakeoverTTL)
	case c.RedisBytes < 1:
		return fmt.Errorf("redis limit bytes %d < 1", c.RedisBytes)
	}
	return nil
}

func (c Config) has(suite string) bool { return slices.Contains(c.Suites, suite) }

// measures reports whether the queue suite runs measure m.
func (c Config) measures(m string) bool { return slices.Contains(c.QueueMeasures, m) }

// parseList splits a comma list, dropping blanks.
func parseList(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// parseSize reads "512", "512B", "8K", "8KiB", "1M", "1MiB" (binary units).
func parseSize(s string) (int, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	mult := 1
	for _, u := range []struct {
		suffix string
		mult   int
	}{{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"GIB", 1 << 30}, {"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.Atoi(t)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return n * mult, nil
}

func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range parseList(s) {
		n, err := parseSize(f)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

func parseCounts(s string) ([]int, error) {
	var out []int
	for _, f := range parseList(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad count %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}
