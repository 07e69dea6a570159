package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/internal/redisserver"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

// TestRunQuick runs every suite at toy sizes through Run, as `go run ./bench
// -quick` does, and checks that each table has the rows it should, that the
// parity checks ran and passed, and that the CSV and PNG are written. The
// Redis part runs when redis-server is installed, and must under
// TQ_REQUIRE_REDIS=1.
func TestRunQuick(t *testing.T) {
	cfg := QuickConfig()
	cfg.URLs = []string{"memory://", "yuanrong://"}
	withRedis := redisserver.Available() == nil
	switch {
	case withRedis:
		cfg.URLs = append(cfg.URLs, privateRedisURL)
	case os.Getenv(redistest.RequireEnv) == "1":
		t.Fatalf("%s=1 but redis-server is not installed: %v", redistest.RequireEnv, redisserver.Available())
	default:
		t.Log("redis-server not installed: the Redis part is not run")
	}
	dir := t.TempDir()
	cfg.CSV, cfg.PNG = filepath.Join(dir, "r.csv"), filepath.Join(dir, "r.png")

	start := time.Now()
	var out bytes.Buffer
	rep, err := Run(t.Context(), cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("quick run took %v", time.Since(start))
	md := out.String()

	for _, want := range []string{"### Machine", "- CPU: ", "GOMAXPROCS", "- Go: go1.", "- Date: ", "Measured crossover:"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	sizeRows := make([]string, len(cfg.Sizes))
	for i, s := range cfg.Sizes {
		sizeRows[i] = fmtSize(s)
	}
	countRows := make([]string, len(cfg.Counts))
	for i, n := range cfg.Counts {
		countRows[i] = fmtSize(cfg.CountSize) + "/" + strconv.Itoa(n)
	}
	checkTable(t, rep, md, "pack-size", sizeRows, func(r []string) string { return r[0] })
	checkTable(t, rep, md, "pack-count", countRows, func(r []string) string { return r[0] + "/" + r[1] })
	checkTable(t, rep, md, "limit-copy", sizeRows, func(r []string) string { return r[0] })

	var kvRows []string
	for _, e := range []string{"memory", "yuanrong", "redis"} {
		if e == "redis" && (!withRedis || !slices.Contains(backends.Schemes(), "redis")) {
			continue
		}
		kvRows = append(kvRows, e+" BatchPut", e+" BatchGet")
	}
	checkTable(t, rep, md, "kv", kvRows, func(r []string) string { return r[0] + " " + r[1] })

	if withRedis {
		tab := checkTable(t, rep, md, "limit-redis", sizeRows, func(r []string) string { return r[0] })
		if tab != nil {
			for _, r := range tab.Rows {
				if slices.Contains(r, "n/a") {
					t.Errorf("Redis limit row %v has an empty cell (go-redis and redis-benchmark must both run against the private server)", r)
				}
			}
		}
	}

	if withRedis {
		var rows []string
		for _, sh := range cfg.RedisShapes {
			rows = append(rows, sh.String()+" BatchPut", sh.String()+" BatchGet", sh.String()+" BatchGetInto")
		}
		tab := checkTable(t, rep, md, "redis-targets", rows, func(r []string) string { return r[0] + " " + r[1] })
		if tab != nil {
			for _, r := range tab.Rows {
				if slices.Contains(r, "n/a") || !strings.Contains(r[5], "met)") || !strings.Contains(r[8], "met)") {
					t.Errorf("redis-targets row %v: a measurement or a verdict is missing", r)
				}
			}
			if len(tab.Notes) != len(cfg.RedisShapes) {
				t.Errorf("redis-targets: %d notes on MGET chunkings, want one per shape", len(tab.Notes))
			}
		}
	}

	checkQueueTables(t, cfg, rep, md, withRedis)

	// Every record is a real measurement. A wake-up's hand-off counts 0
	// when the consumer returned before the producer's call did (a Redis
	// server answers a blocked XREAD or BLPOP before the command that
	// woke it), so a sample of a few hand-offs may be 0.
	if len(rep.Records) == 0 {
		t.Fatal("no records")
	}
	for _, r := range rep.Records {
		d := r.Dist
		low := d.Min > 0 || r.Table == "queue" && strings.Contains(r.Series, "wake-up") && d.Min == 0 ||
			r.Table == "queue-sweep" && strings.Contains(r.Series, "CPU") && d.Min == 0 // /proc counts 10 ms ticks
		if d.N != cfg.Reps || !low || d.Min > d.Median || d.Median > d.Max || math.IsInf(d.Max, 0) {
			t.Errorf("record %s/%s/%s: bad distribution %+v", r.Table, r.Row, r.Series, d)
		}
	}

	f, err := os.Open(cfg.CSV)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 1+len(rep.Records) || lines[0][0] != "suite" {
		t.Errorf("CSV has %d lines for %d records", len(lines), len(rep.Records))
	}
	png, err := os.ReadFile(cfg.PNG)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Error("-png did not write a PNG")
	}
}

// checkQueueTables checks the queue suite's tables: every measure beside
// each of its limits, the Streams limits on Redis only, a row per
// partition size, and the server's time per claim on Redis.
func checkQueueTables(t *testing.T, cfg Config, rep *Report, md string, withRedis bool) {
	t.Helper()
	step := fmt.Sprintf("claim+ack of %d rows", cfg.Samples)
	const inHand = "wake-up to row in hand: Task.Wait returns the lease"
	const unblocked = "blocked put wake-up: BatchPut returns after the Ack that makes room"
	const fromCall = "blocked put wake-up from the Ack's call: BatchPut returns / the Ack alone (call to return)"
	rows := []string{"memory " + step + " / List", "memory " + inHand + " / channel hand-off",
		"memory " + unblocked + " / channel hand-off", "memory " + unblocked + " / tq wake-up (Task.Wait, above)",
		"memory " + fromCall}
	for _, k := range cfg.Consumers {
		rows = append(rows, fmt.Sprintf("memory contention: %d consumers, per claim / channel pop", k))
	}
	var sizeRows, serverRows []string
	for _, n := range cfg.QueueSizes {
		sizeRows = append(sizeRows, "memory "+fmtCount(n))
	}
	if withRedis {
		x := fmt.Sprintf("XREADGROUP COUNT %d + XACK", cfg.Samples)
		rows = append(rows, "redis "+step+" / "+x, "redis "+step+" / List",
			"redis "+inHand+" / XADD to XREADGROUP BLOCK", "redis "+inHand+" / LPUSH to BLPOP",
			"redis "+unblocked+" / XADD to XREADGROUP BLOCK", "redis "+unblocked+" / LPUSH to BLPOP",
			"redis "+unblocked+" / tq wake-up (Task.Wait, above)", "redis "+fromCall)
		serverRows = append(serverRows, "redis "+step)
		for _, k := range cfg.Consumers {
			m := fmt.Sprintf("redis contention: %d consumers, per claim / ", k)
			rows = append(rows, m+"XREADGROUP COUNT 8 + XACK", m+"LPOP COUNT 8 of a list")
			serverRows = append(serverRows, fmt.Sprintf("redis contention: %d consumers", k))
		}
		for _, n := range cfg.QueueSizes {
			sizeRows = append(sizeRows, "redis "+fmtCount(n))
			serverRows = append(serverRows, fmt.Sprintf("redis Claim(8)+Ack, %s ready rows", fmtCount(n)))
		}
	}
	checkTable(t, rep, md, "queue", rows, func(r []string) string { return r[0] + " " + r[1] + " / " + r[3] })
	size := checkTable(t, rep, md, "queue-size", sizeRows, func(r []string) string { return r[0] + " " + r[1] })
	if size != nil {
		for _, r := range size.Rows {
			if slices.Contains(r[:4], "n/a") || r[0] == "redis" && slices.Contains(r, "n/a") {
				t.Errorf("queue-size row %v: a measurement is missing", r)
			}
			if r[1] == fmtCount(cfg.QueueSizes[0]) && r[3] != "1.00x" {
				t.Errorf("queue-size row %v: the smallest size over itself is not 1.00x", r)
			}
		}
	}
	if !withRedis {
		if rep.Table("queue-server") != nil {
			t.Error("a queue-server table without a Redis target")
		}
		return
	}
	server := checkTable(t, rep, md, "queue-server", serverRows, func(r []string) string { return r[0] + " " + r[1] })
	if server == nil {
		return
	}
	for _, r := range server.Rows {
		if slices.Contains(r, "n/a") || r[3] == "none" || !strings.Contains(r[4], "XREADGROUP") || !strings.Contains(r[4], "XACK") {
			t.Errorf("queue-server row %v: a measurement is missing", r)
		}
	}
	if len(server.Notes) > 0 {
		t.Errorf("queue-server notes %q: the MONITOR probe failed", server.Notes)
	}
}

// checkTable asserts that the table id exists with exactly the rows named
// (key(row) for each row, in order), full-width, and is in the Markdown.
func checkTable(t *testing.T, rep *Report, md, id string, rows []string, key func([]string) string) *Table {
	t.Helper()
	tab := rep.Table(id)
	if tab == nil {
		t.Errorf("no table %q", id)
		return nil
	}
	var got []string
	for _, r := range tab.Rows {
		if len(r) != len(tab.Header) {
			t.Errorf("table %q: row %v has %d cells for %d columns", id, r, len(r), len(tab.Header))
			continue
		}
		got = append(got, key(r))
		if !strings.Contains(md, "| "+strings.Join(r, " | ")+" |") {
			t.Errorf("table %q: row %v is not in the Markdown", id, r)
		}
	}
	if !slices.Equal(got, rows) {
		t.Errorf("table %q rows %q, want %q", id, got, rows)
	}
	if !strings.Contains(md, "### "+tab.Title) || !strings.Contains(md, "| "+strings.Join(tab.Header, " | ")+" |") {
		t.Errorf("table %q: title or header missing from the Markdown", id)
	}
	return tab
}

// TestMeterInterleaves: every repetition samples every arm once, the
// starting arm rotating, after one warm-up per arm.
func TestMeterInterleaves(t *testing.T) {
	var order []string
	mk := func(name string) *arm {
		return &arm{name: name, once: true, timed: func() (time.Duration, error) {
			order = append(order, name)
			return time.Millisecond, nil
		}}
	}
	m := &meter{reps: 3, minSample: time.Millisecond}
	d, err := m.run(context.Background(), "t", []*arm{mk("a"), mk("b"), mk("c")})
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split("a b c a b c b c a c a b", " ") // warm-ups, then rotations
	if !slices.Equal(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
	for _, x := range d {
		if x.N != 3 || x.Median != 1e-3 {
			t.Errorf("dist %+v, want 3 samples of 1 ms", x)
		}
	}
}

// TestGRPOParityCatchesDifferences: the kv parity check passes on an exact
// read and fails when any value differs.
func TestGRPOParityCatchesDifferences(t *testing.T) {
	ctx := t.Context()
	c, err := tq.Open(ctx, "memory://")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g := newGRPO(4, 8)
	if err := c.BatchPut(ctx, kvPartition, g.keys, g.batch, g.tags); err != nil {
		t.Fatal(err)
	}
	b, err := c.BatchGet(ctx, kvPartition, g.keys)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.check(b); err != nil {
		t.Fatalf("exact read fails parity: %v", err)
	}
	g.logp[5]++
	if err := g.check(b); err == nil || !strings.Contains(err.Error(), "old_log_probs") {
		t.Errorf("changed old_log_probs passes parity (err %v)", err)
	}
	g.logp[5]--
	g.uid[3] = "other"
	if err := g.check(b); err == nil || !strings.Contains(err.Error(), "uid") {
		t.Errorf("changed uid passes parity (err %v)", err)
	}
	g.uid[3] = "prompt-000000"
	delete(b, "rewards")
	if err := g.check(b); err == nil {
		t.Error("a missing field passes parity")
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int{"512": 512, "512B": 512, "8K": 8192, "8KiB": 8192, "32 kib": 32 << 10, "1M": 1 << 20, "1MiB": 1 << 20} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0", "-1", "1X", "KiB"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) accepted", bad)
		}
	}
}

func TestFormat(t *testing.T) {
	if got := fmtTime(Dist{Median: 1.234e-3, Min: 1.2e-3, Max: 2.5e-3, N: 5}); got != "1.23 ms [1.20–2.50]" {
		t.Errorf("fmtTime = %q", got)
	}
	if got := fmtRateDist(1e9, Dist{Median: 0.5, Min: 0.25, Max: 1, N: 5}); got != "2.00 GB/s [1.00–4.00]" {
		t.Errorf("fmtRateDist = %q", got)
	}
	if got := fmtSize(256 << 10); got != "256 KiB" {
		t.Errorf("fmtSize = %q", got)
	}
}

// TestRounds: raw Redis pipelines carry about rawRoundBytes, every value
// exactly once.
func TestRounds(t *testing.T) {
	mk := func(n, size int) [][]byte {
		v := make([][]byte, n)
		for i := range v {
			v[i] = make([]byte, size)
		}
		return v
	}
	for _, c := range []struct {
		n, size int
		want    [][2]int
	}{
		{5, 512 << 10, [][2]int{{0, 2}, {2, 4}, {4, 5}}},
		{3, 4 << 20, [][2]int{{0, 1}, {1, 2}, {2, 3}}},
		{128, 512, [][2]int{{0, 128}}},
		{200, 16 << 10, [][2]int{{0, 64}, {64, 128}, {128, 192}, {192, 200}}},
		{0, 1, nil},
	} {
		if got := rounds(mk(c.n, c.size)); !slices.Equal(got, c.want) {
			t.Errorf("rounds(%d × %d B) = %v, want %v", c.n, c.size, got, c.want)
		}
	}
}

// TestBenchShape: -P 64 -c 50 for small values; large values get shallower
// pipelines and fewer connections, never more than 16 MiB in flight.
func TestBenchShape(t *testing.T) {
	if p, c, n := benchShape(512, 1024, false); p != 64 || c != 50 || n != 4*50*64 {
		t.Errorf("512 B: -P %d -c %d -n %d, want 64 50 12800", p, c, n)
	}
	for _, size := range []int{8 << 10, 256 << 10, 1 << 20, 64 << 20} {
		p, c, n := benchShape(size, 64, false)
		if p < 1 || c < 1 || (p > 1 && p*size > benchPipeBytes) || (c > 1 && c*p*size > benchFlightBytes) || n < 64 {
			t.Errorf("%s: -P %d -c %d -n %d", fmtSize(size), p, c, n)
		}
	}
}

// TestRedisSuiteOnURLWithQuery: the redis suite runs on a server given by
// a URL that has its own query (a prefix), and leaves no key behind but
// tq's index counter.
func TestRedisSuiteOnURLWithQuery(t *testing.T) {
	srv := redistest.Start(t)
	cfg := QuickConfig()
	cfg.Suites = []string{"redis"}
	cfg.URLs = []string{srv.URL() + "?prefix=mine&pool_size=4"}
	var out bytes.Buffer
	rep, err := Run(t.Context(), cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Table("redis-targets") == nil {
		t.Fatal("no redis-targets table")
	}
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rc.Close()
	keys, err := rc.Keys(t.Context(), "*").Result()
	if err == nil {
		keys, err = redistest.Persistent(t.Context(), rc, keys)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if !strings.HasSuffix(k, ":next") {
			t.Errorf("key %q left on the server after the suite", k)
		}
	}
}

// TestServedQuick runs the queue suite on a tq server process in front of
// a private redis-server (-urls tq+redis) at toy sizes: every measure runs
// through tq:// clients, the wake-ups are set beside the gRPC relay too
// (a process of this test binary's, see TestMain), the consumer sweep has
// a row per consumer kind (consumer processes included: this test binary
// run again) and count, and the server process, like every other process
// Run started, is gone when Run returns.
func TestServedQuick(t *testing.T) {
	if err := redisserver.Available(); err != nil {
		if os.Getenv(redistest.RequireEnv) == "1" {
			t.Fatalf("%s=1 but redis-server is not installed: %v", redistest.RequireEnv, err)
		}
		t.Skip("redis-server not installed")
	}
	cfg := QuickConfig()
	cfg.Suites = []string{"queue"}
	cfg.URLs = []string{privateServeURL}
	cfg.Consumers, cfg.QueueSizes = []int{2}, []int{sizeMinRows}
	kids := childPIDs(t)
	var out bytes.Buffer
	rep, err := Run(t.Context(), cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	md := out.String()
	if left := slices.DeleteFunc(childPIDs(t), func(pid int) bool { return slices.Contains(kids, pid) }); len(left) > 0 {
		t.Errorf("processes %v that Run started are left after it returned", left)
	}

	// The queue table: no contention (the sweep is the served target's),
	// and the gRPC relay beside both wake-ups.
	step := fmt.Sprintf("claim+ack of %d rows", cfg.Samples)
	const inHand = "wake-up to row in hand: Task.Wait returns the lease"
	const unblocked = "blocked put wake-up: BatchPut returns after the Ack that makes room"
	const fromCall = "blocked put wake-up from the Ack's call: BatchPut returns / the Ack alone (call to return)"
	x := fmt.Sprintf("XREADGROUP COUNT %d + XACK", cfg.Samples)
	queue := checkTable(t, rep, md, "queue", []string{
		step + " / " + x, step + " / List",
		inHand + " / XADD to XREADGROUP BLOCK", inHand + " / LPUSH to BLPOP", inHand + " / " + relayLimit,
		unblocked + " / XADD to XREADGROUP BLOCK", unblocked + " / LPUSH to BLPOP", unblocked + " / " + relayLimit,
		unblocked + " / tq wake-up (Task.Wait, above)", fromCall,
	}, func(r []string) string { return r[1] + " / " + r[3] })
	if queue != nil {
		for _, r := range queue.Rows {
			if r[0] != privateServeURL || r[3] == relayLimit && r[4] == "n/a" {
				t.Errorf("queue row %v: not the served target's, or the relay's time is missing", r)
			}
		}
	}

	var rows []string
	for _, k := range cfg.Consumers {
		for _, c := range []string{"tq:// (tq serve)", "tq:// (tq serve), OS processes", "tq on redis:// (no server)", echoLimit, "XREADGROUP COUNT 8 + XACK"} {
			rows = append(rows, fmt.Sprintf("%d %s", k, c))
		}
	}
	sweep := checkTable(t, rep, md, "queue-sweep", rows, func(r []string) string { return r[0] + " " + r[1] })
	for _, r := range sweep.Rows {
		if slices.Contains(r, "n/a") {
			t.Errorf("queue-sweep row %v: a measurement is missing", r)
		}
		served := strings.HasPrefix(r[1], "tq:// (tq serve)") || r[1] == echoLimit // the relay's CPU in the server's column
		if served == (r[7] == "—") || (r[5] == "—") != strings.HasPrefix(r[1], "XREADGROUP") {
			t.Errorf("queue-sweep row %v: the server's CPU or the ratios are in the wrong rows", r)
		}
	}
	var sizeRows []string
	for _, n := range cfg.QueueSizes {
		sizeRows = append(sizeRows, "tq+redis "+fmtCount(n))
	}
	checkTable(t, rep, md, "queue-size", sizeRows, func(r []string) string { return r[0] + " " + r[1] })
	if rep.Table("limit-redis") != nil || rep.Table("redis-targets") != nil {
		t.Error("a served Redis server got the Redis limits or targets of its own")
	}

	// The takeover: a row beside its aim, every call's failure of an
	// expected class, no acked row delivered again, a note per
	// repetition naming the servers it killed and kept.
	take := checkTable(t, rep, md, "queue-takeover", []string{"tq+redis"}, func(r []string) string { return r[0] })
	var pids []int
	if take != nil {
		for _, r := range take.Rows {
			if slices.Contains(r, "n/a") || !strings.HasPrefix(r[8], "none (of ") || strings.Contains(r[7], "UNEXPECTED") {
				t.Errorf("queue-takeover row %v: a measurement is missing, or the takeover failed", r)
			}
		}
		for _, n := range take.Notes {
			if strings.Contains(n, "FAILED") {
				t.Errorf("queue-takeover: %s", n)
			}
			for _, f := range strings.Split(n, "tq serve pid ")[1:] {
				p, _ := strconv.Atoi(f[:strings.IndexByte(f, ' ')])
				pids = append(pids, p)
			}
		}
		if len(pids) != 2*cfg.Reps {
			t.Errorf("queue-takeover notes name %d tq servers, want 2 per repetition: %q", len(pids), take.Notes)
		}
	}

	var pid int
	for _, l := range rep.Machine {
		if _, rest, ok := strings.Cut(l, "served by tq serve (pid "); ok {
			pid, _ = strconv.Atoi(rest[:strings.IndexByte(rest, ')')])
		}
	}
	if pid == 0 {
		t.Fatalf("the machine lines do not name the tq server: %q", rep.Machine)
	}
	for _, pid := range append(pids, pid) {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
			t.Errorf("tq serve (pid %d) still runs after Run returned", pid)
		}
	}
}

// childPIDs lists the processes whose parent is this one.
func childPIDs(t *testing.T) []int {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	self := strconv.Itoa(os.Getpid())
	var pids []int
	for _, name := range stats {
		b, err := os.ReadFile(name)
		if err != nil {
			continue // it exited
		}
		// pid (comm) state ppid ...: comm may hold spaces.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == self {
			pid, _ := strconv.Atoi(strings.Fields(s)[0])
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestQueueMeasures: -queue-measures runs the queue measures it names
// and no other, and refuses one it does not know.
func TestQueueMeasures(t *testing.T) {
	cfg := QuickConfig()
	cfg.Suites, cfg.URLs = []string{"queue"}, []string{"memory://"}
	cfg.QueueMeasures = []string{"size"}
	var out bytes.Buffer
	rep, err := Run(t.Context(), cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Table("queue-size") == nil || rep.Table("queue") != nil || rep.Table("queue-takeover") != nil {
		t.Errorf("-queue-measures size made the tables %v", tableIDs(rep))
	}
	cfg.QueueMeasures = []string{"takeover"}
	if rep, err = Run(t.Context(), cfg, &out); err != nil {
		t.Fatal(err)
	}
	if len(rep.Tables) != 0 || !slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.Contains(n, "takeover: skipped") }) {
		t.Errorf("takeover without a tq server target: tables %v, notes %q", tableIDs(rep), rep.Notes)
	}
	cfg.QueueMeasures = []string{"contention"}
	if _, err := Run(t.Context(), cfg, &out); err == nil || !strings.Contains(err.Error(), "unknown queue measure") {
		t.Errorf("an unknown queue measure: err %v", err)
	}
}

func tableIDs(rep *Report) []string {
	var ids []string
	for _, t := range rep.Tables {
		ids = append(ids, t.ID)
	}
	return ids
}

// TestTakeoverFailures: a consumer's failed call is of an expected class
// when a takeover may cause it, and the summary counts each class.
func TestTakeoverFailures(t *testing.T) {
	live := t.Context()
	hung, cancel := context.WithTimeout(live, 0)
	defer cancel()
	<-hung.Done()
	for _, c := range []struct {
		op   string
		ctx  context.Context
		err  error
		want string
		ok   bool
	}{
		{"claim", live, fmt.Errorf("x: %w", errors.Join(tq.ErrUnavailable, tq.ErrOutcomeUnknown)), "unavailable, outcome unknown", true},
		{"claim", live, fmt.Errorf("x: %w", tq.ErrUnavailable), "unavailable", true},
		{"ack", live, fmt.Errorf("x: %w", tq.ErrOutcomeUnknown), "outcome unknown", true},
		{"ack", live, &tq.LeaseLostError{Op: "ack", Keys: []string{"k"}}, "lease lost", true},
		{"claim", live, &tq.LeaseLostError{Op: "ack", Keys: []string{"k"}}, "other: ", false},
		{"claim", live, tq.ErrInvalid, "other: ", false},
		{"claim", hung, context.DeadlineExceeded, "no answer", false},
	} {
		got, ok := failClass(c.op, c.ctx, c.err)
		if !strings.HasPrefix(got, c.want) || ok != c.ok {
			t.Errorf("failClass(%s, %v) = %q, %v; want %q..., %v", c.op, c.err, got, ok, c.want, c.ok)
		}
	}
	t0 := time.Now()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	fs := []takeoverFailure{
		{op: "claim", class: "outcome unknown", expected: true, end: at(1)},
		{op: "claim", class: "outcome unknown", expected: true, end: at(2)},
		{op: "ack", class: "other: x", end: at(3)},
		{op: "ack", class: "unavailable", expected: true, end: at(10)},
	}
	if got, want := summarizeFailures(fs, at(1), at(3)), "UNEXPECTED ack: other: x ×1; claim: outcome unknown ×2"; got != want {
		t.Errorf("summarizeFailures = %q, want %q", got, want)
	}
	if got := summarizeFailures(fs, at(4), at(5)); got != "none" {
		t.Errorf("summarizeFailures of an empty window = %q", got)
	}
	if got, want := ownerKey("tq", "a/{b}%"), "tq:{tq:a/%7Bb%7D%25}:owner"; got != want {
		t.Errorf("ownerKey = %q, want %q", got, want)
	}
}
