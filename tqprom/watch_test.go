package tqprom_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest"
	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/tq"
	"github.com/tqgo/tqgo/tqprom"
)

// Watch's gauges are what Status says, at each scrape.
func TestWatchReportsStatus(t *testing.T) {
	col, reg, c := setup(t)
	ctx := t.Context()
	keys := putRows(t, c, "p", 4, 0)
	task, err := c.Task("p", "t", []string{"x"}, tq.MaxDeliveries(1))
	if err != nil {
		t.Fatal(err)
	}
	l, err := task.Claim(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	// One row dead (delivered once, its lease given back), one dropped.
	l, err = task.Claim(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Nack(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := task.Drop(ctx, keys[3]); err != nil {
		t.Fatal(err)
	}
	if err := col.Watch(c, "p", "t", "idle", "t"); err != nil {
		t.Fatal(err)
	}
	st, err := c.Status(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Tasks["t"]; got.Ready != 0 || got.Waiting != 0 || got.Leased != 0 || got.Acked != 2 || got.Dead != 1 || got.Dropped != 1 {
		t.Fatalf("Status: %+v, the test expected another state", got)
	}

	want := `
		tq_partition_rows{partition="p"} 4
		tq_task_rows{partition="p",state="acked",task="idle"} 0
		tq_task_rows{partition="p",state="dead",task="idle"} 0
		tq_task_rows{partition="p",state="dropped",task="idle"} 0
		tq_task_rows{partition="p",state="leased",task="idle"} 0
		tq_task_rows{partition="p",state="ready",task="idle"} 4
		tq_task_rows{partition="p",state="waiting",task="idle"} 0
		tq_task_rows{partition="p",state="acked",task="t"} 2
		tq_task_rows{partition="p",state="dead",task="t"} 1
		tq_task_rows{partition="p",state="dropped",task="t"} 1
		tq_task_rows{partition="p",state="leased",task="t"} 0
		tq_task_rows{partition="p",state="ready",task="t"} 0
		tq_task_rows{partition="p",state="waiting",task="t"} 0
	`
	compare(t, reg, want, "tq_partition_rows", "tq_task_rows", "tq_scrape_errors_total")

	// Changes show at the next scrape: a retried row, leased.
	if err := task.Retry(ctx, keys[2]); err != nil {
		t.Fatal(err)
	}
	if _, err := task.Claim(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(gauge(t, reg, "tq_task_rows", "partition", "p", "task", "t", "state", "leased")); got != 1 {
		t.Errorf("leased after a claim: %v, want 1", got)
	}
	if got := testutil.ToFloat64(gauge(t, reg, "tq_task_rows", "partition", "p", "task", "t", "state", "dead")); got != 0 {
		t.Errorf("dead after a retry: %v, want 0", got)
	}

	// The scrapes' Status calls are not counted as calls.
	if m := sample(t, reg, "tq_calls_total", "op", "Status", "class", "ok"); m.GetCounter().GetValue() != 1 {
		t.Errorf("tq_calls_total{op=Status} = %v, want the test's own 1", m.GetCounter())
	}

	col.Unwatch("p")
	for _, name := range []string{"tq_partition_rows", "tq_task_rows"} {
		if f := family(t, reg, name); f != nil {
			t.Errorf("after Unwatch: %v", f)
		}
	}
}

// gauge gathers reg and returns the one metric as a collector for ToFloat64.
func gauge(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) prometheus.Collector {
	t.Helper()
	m := sample(t, reg, name, labels...)
	if m == nil {
		t.Fatalf("no %s %v", name, labels)
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "copy"})
	g.Set(m.GetGauge().GetValue())
	return g
}

// WatchTask reports the staleness counts of the watched handles, summed.
func TestWatchTaskStaleness(t *testing.T) {
	col, reg, c := setup(t)
	ctx := t.Context()
	putRows(t, c, "p", 3, 0)
	putRows(t, c, "q", 2, 0)
	dropper, err := c.Task("p", "train", []string{"x"}, tq.Staleness("version", 1, true))
	if err != nil {
		t.Fatal(err)
	}
	skipper, err := c.Task("q", "train", []string{"x"}, tq.Staleness("version", 1, false))
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.Task("q", "train", []string{"x"}, tq.Staleness("version", 1, false))
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range []*tq.Task{dropper, skipper, other, skipper} {
		if err := col.WatchTask(task); err != nil {
			t.Fatal(err)
		}
		task.SetVersion(5) // every row (version 0) is stale
	}
	for _, task := range []*tq.Task{dropper, skipper, skipper, other} {
		if _, err := task.Claim(ctx, 3); err != nil {
			t.Fatal(err)
		}
	}
	// Rows of q: 2 stale rows passed over by 3 claims, none dropped. Rows
	// of p: 3 dropped, and skipped as Stats counts them.
	pSkipped := strconv.FormatInt(dropper.Stats().Skipped, 10)
	compare(t, reg, `
		tq_claim_dropped_rows_total{partition="p",task="train"} 3
		tq_claim_dropped_rows_total{partition="q",task="train"} 0
		tq_claim_skipped_rows_total{partition="p",task="train"} `+pSkipped+`
		tq_claim_skipped_rows_total{partition="q",task="train"} 6
	`, "tq_claim_dropped_rows_total", "tq_claim_skipped_rows_total")

	col.UnwatchTask(skipper)
	compare(t, reg, `
		tq_claim_dropped_rows_total{partition="p",task="train"} 3
		tq_claim_dropped_rows_total{partition="q",task="train"} 0
		tq_claim_skipped_rows_total{partition="p",task="train"} `+pSkipped+`
		tq_claim_skipped_rows_total{partition="q",task="train"} 2
	`, "tq_claim_dropped_rows_total", "tq_claim_skipped_rows_total")
	col.UnwatchTask(other)
	col.UnwatchTask(dropper)
	if f := family(t, reg, "tq_claim_skipped_rows_total"); f != nil {
		t.Errorf("after UnwatchTask of every handle: %v", f)
	}
}

// The watch limit counts label sets, and frees them on Unwatch.
func TestWatchLimit(t *testing.T) {
	col, _, c := setup(t, tqprom.WithWatchLimit(3))
	task, err := c.Task("p", "t", []string{"x"})
	if err != nil {
		t.Fatal(err)
	}
	if err := col.Watch(c, "a", "t1"); err != nil { // 2
		t.Fatal(err)
	}
	if err := col.Watch(c, "b"); err != nil { // 3
		t.Fatal(err)
	}
	if err := col.Watch(c, "c"); !errors.Is(err, tqprom.ErrWatchLimit) {
		t.Errorf("a 4th label set: %v, want ErrWatchLimit", err)
	}
	if err := col.WatchTask(task); !errors.Is(err, tqprom.ErrWatchLimit) {
		t.Errorf("a 4th label set by WatchTask: %v, want ErrWatchLimit", err)
	}
	if err := col.Watch(c, "a", "t1", "t2"); !errors.Is(err, tqprom.ErrWatchLimit) {
		t.Errorf("growing a watch past the limit: %v, want ErrWatchLimit", err)
	}
	if err := col.Watch(c, "a"); err != nil { // 2: replaced
		t.Fatal(err)
	}
	if err := col.WatchTask(task); err != nil { // 3
		t.Fatal(err)
	}
	col.Unwatch("b") // 2
	if err := col.Watch(c, "c"); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"nil client": col.Watch(nil, "p"),
		"empty":      col.Watch(c, ""),
		"empty task": col.Watch(c, "p", ""),
		"nil task":   col.WatchTask(nil),
	} {
		if !errors.Is(err, tqprom.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// A partition whose Status does not answer within the scrape timeout is
// left out of the scrape and counted as a scrape error; the scrape
// returns in time and leaves no goroutine behind (see TestMain).
func TestScrapeTimeout(t *testing.T) {
	col, reg := registered(t, tqprom.WithScrapeTimeout(50*time.Millisecond))
	f := new(backendtest.Faulty)
	c := faultyClient(t, f, tq.WithTracer(col))
	putRows(t, c, "slow", 2, 0)
	putRows(t, c, "fast", 1, 0)
	for _, p := range []string{"slow", "fast"} {
		if err := col.Watch(c, p, "t"); err != nil {
			t.Fatal(err)
		}
	}
	compare(t, reg, `
		tq_partition_rows{partition="fast"} 1
		tq_partition_rows{partition="slow"} 2
	`, "tq_partition_rows", "tq_scrape_errors_total")

	f.SetDelay(backendtest.OpConsumption, time.Hour) // every Status hangs
	start := time.Now()
	compare(t, reg, `
		tq_scrape_errors_total{partition="fast"} 1
		tq_scrape_errors_total{partition="slow"} 1
	`, "tq_partition_rows", "tq_task_rows", "tq_scrape_errors_total")
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a scrape took %v with a 50ms scrape timeout", d)
	}
	f.Clear()
	compare(t, reg, `
		tq_partition_rows{partition="fast"} 1
		tq_partition_rows{partition="slow"} 2
		tq_scrape_errors_total{partition="fast"} 1
		tq_scrape_errors_total{partition="slow"} 1
	`, "tq_partition_rows", "tq_scrape_errors_total")
	col.Unwatch("slow")
	compare(t, reg, `
		tq_partition_rows{partition="fast"} 1
		tq_scrape_errors_total{partition="fast"} 1
	`, "tq_partition_rows", "tq_scrape_errors_total")
}

// The exported metrics pass promlint, with every kind of series present.
func TestLint(t *testing.T) {
	col, _, c := setup(t)
	ctx := t.Context()
	putRows(t, c, "p", 2, 0)
	task, err := c.Task("p", "t", []string{"x"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := task.Claim(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.BatchGet(ctx, "p", []string{"nope"}, "x"); err == nil {
		t.Fatal("BatchGet of an unknown key did not fail")
	}
	if err := col.Watch(c, "p", "t"); err != nil {
		t.Fatal(err)
	}
	closed, err := tq.Open(ctx, "memory://")
	if err != nil {
		t.Fatal(err)
	}
	_ = closed.Close()
	if err := col.Watch(closed, "q"); err != nil { // every scrape fails
		t.Fatal(err)
	}
	if err := col.WatchTask(task); err != nil {
		t.Fatal(err)
	}
	pres, err := c.Announce(ctx, "rollout", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer pres.Close()
	if err := col.WatchPresence(c, "rollout"); err != nil {
		t.Fatal(err)
	}
	if err := col.Watch(connClient(t, backends.ConnStats{Open: 3, Idle: 1, Timeouts: 2}), "r"); err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.CollectAndLint(col)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	collected := map[string]bool{}
	for _, f := range gather(t, col) {
		collected[f.GetName()] = true
	}
	for _, name := range exported(t, col) {
		if !collected[name] {
			t.Errorf("%s was not linted: not collected", name)
		}
	}
}

// connStore is a memory engine's Store that says it keeps connections.
type connStore struct {
	*memory.Store
	st backends.ConnStats
}

func (s connStore) ConnStats() backends.ConnStats { return s.st }

// connClient is a client over an engine reporting st as its connections.
func connClient(t *testing.T, st backends.ConnStats) *tq.Client {
	t.Helper()
	c, err := tq.New(backends.Engine{Data: connStore{memory.New(), st}, Local: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// The watched clients' engines' connections are reported once per
// client, summed, and not at all for in-process engines.
func TestWatchConnections(t *testing.T) {
	col, reg, c := setup(t)
	if err := col.Watch(c, "p"); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "tq_engine_connections"); err != nil || n != 0 {
		t.Fatalf("connections of a memory engine: %d series, %v", n, err)
	}
	a := connClient(t, backends.ConnStats{Open: 3, Idle: 1, Timeouts: 2})
	b := connClient(t, backends.ConnStats{Open: 2, Idle: 2})
	for _, w := range []struct {
		c *tq.Client
		p string
	}{{a, "q"}, {a, "r"}, {b, "q"}} {
		if err := col.Watch(w.c, w.p); err != nil {
			t.Fatal(err)
		}
	}
	compare(t, reg, `
		tq_engine_connections{state="busy"} 2
		tq_engine_connections{state="idle"} 3
		tq_engine_connection_timeouts_total 2
	`, "tq_engine_connections", "tq_engine_connection_timeouts_total")
}
