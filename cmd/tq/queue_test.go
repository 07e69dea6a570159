package main

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/examples/grpo/grpo"
	"github.com/tqgo/tqgo/tq"
)

// sharedScheme opens the memory engine the running test set in shared, so
// that the GRPO example and the tool's run, each opening a URL, work on
// one queue in this process. Its Close leaves the engine open.
const sharedScheme = "tqtest-shared"

var (
	sharedMu sync.Mutex
	shared   backends.Engine
)

type keepStore struct{ *memory.Store }

func (keepStore) Close() error { return nil }

type keepMeta struct{ *memory.MetaStore }

func (keepMeta) Close() error { return nil }

func init() {
	backends.Register(sharedScheme, func(ctx context.Context, u *url.URL) (backends.Engine, error) {
		sharedMu.Lock()
		defer sharedMu.Unlock()
		if shared.Data == nil {
			return backends.Engine{}, backends.ErrInvalid
		}
		return shared, nil
	})
}

// sharedQueue gives the test a fresh shared memory engine and its URL.
func sharedQueue(t *testing.T) string {
	t.Helper()
	st, meta := memory.New(), memory.NewMetaStore()
	sharedMu.Lock()
	shared = backends.Engine{Data: keepStore{st}, Meta: keepMeta{meta}, Local: true}
	sharedMu.Unlock()
	t.Cleanup(func() {
		sharedMu.Lock()
		shared = backends.Engine{}
		sharedMu.Unlock()
		meta.Close()
		st.Close()
	})
	return sharedScheme + "://"
}

type statusDoc struct {
	Partition string
	Rows      int
	Fields    map[string]int
	Tasks     map[string]struct {
		Ready, Waiting, Leased, Acked, Dead, Dropped int
		Exact                                        bool
	}
}

func status(t *testing.T, url string, args ...string) statusDoc {
	t.Helper()
	r := runTQ(t, url, append([]string{"-json", "status"}, args...)...)
	var doc statusDoc
	if err := json.Unmarshal([]byte(r.stdout), &doc); r.code != 0 || err != nil {
		t.Fatalf("status %v: %+v: %v", args, r, err)
	}
	return doc
}

// TestQueueCommandsOnGRPO runs the GRPO example (every stage, a few
// steps, Keep) on a queue the tool then inspects: the status of what the
// run left, a row's dump, a reset, and the status showing it.
func TestQueueCommandsOnGRPO(t *testing.T) {
	url := sharedQueue(t)
	cfg := grpo.DefaultConfig()
	cfg.URL, cfg.Steps, cfg.Prompts, cfg.Group, cfg.Length, cfg.Vocab = url, 3, 4, 2, 2, 3
	cfg.Keep, cfg.Quiet = true, true
	if _, err := grpo.Run(t.Context(), cfg, &strings.Builder{}); err != nil {
		t.Fatal(err)
	}
	r := runTQ(t, url, "partitions")
	for _, p := range []string{grpo.GradsPartition, grpo.WeightsPartition} {
		if !strings.Contains(r.stdout, p+"\n") {
			t.Errorf("partitions lack %s:\n%s", p, r.stdout)
		}
	}
	// The samples partition holds a round the rollout made past the last
	// step only if it took the last version it trained on before the
	// trainer's final one (the example's timing): otherwise every sample
	// was trained and cleared, and the partition is gone.
	samples := strings.Contains(r.stdout, grpo.SamplesPartition+"\n")

	// The trainer's last policy version is all the weights partition
	// holds: the rollout took it (and stopped) and acked it.
	w := status(t, url, grpo.WeightsPartition)
	if w.Rows != 1 || w.Fields["logits"] != 1 || w.Fields["done"] != 1 {
		t.Fatalf("weights: %+v, want one row with logits and done", w)
	}
	if ro := w.Tasks["rollout"]; ro.Acked != 1 || ro.Ready+ro.Leased+ro.Dead+ro.Dropped != 0 || ro.Exact {
		t.Fatalf("weights' rollout task: %+v, want 1 acked", ro)
	}
	// The table: the fields, then the tasks.
	r = runTQ(t, url, "status", grpo.WeightsPartition)
	for _, want := range []string{`partition "grpo/weights": 1 rows`, "FIELD", "logits  1", "TASK", "ACKED", "rollout"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("status table lacks %q: %+v", want, r)
		}
	}
	// Every rank all-reduced the last epoch's gradients: both rows acked
	// by both ranks' tasks.
	g := status(t, url, grpo.GradsPartition)
	for _, task := range []string{"allreduce-0", "allreduce-1"} {
		if g.Rows != 2 || g.Tasks[task].Acked != 2 {
			t.Errorf("grads: %d rows, %s %+v; want 2 rows acked", g.Rows, task, g.Tasks[task])
		}
	}
	// The samples the rollout made past the last step: every task's
	// states add up to the rows, and nothing was stale.
	if samples {
		smp := status(t, url, grpo.SamplesPartition)
		for name, ts := range smp.Tasks {
			if n := ts.Ready + ts.Waiting + ts.Leased + ts.Acked + ts.Dead + ts.Dropped; n != smp.Rows {
				t.Errorf("samples' task %s: %+v adds up to %d of %d rows", name, ts, n, smp.Rows)
			}
		}
		if smp.Tasks["train"].Dropped != 0 {
			t.Errorf("train dropped %d rows", smp.Tasks["train"].Dropped)
		}
	} else if r := runTQ(t, url, "status", grpo.SamplesPartition); r.code == 0 || !strings.Contains(r.stderr, "no partition") {
		t.Errorf("status of a partition partitions does not list: %+v", r)
	}

	r = runTQ(t, url, "dump", "-n", "3", grpo.WeightsPartition, "v000003", "logits")
	if r.code != 0 || !strings.Contains(r.stdout, "logits  float64  [18]") || !strings.Contains(r.stdout, "(3 of 18)") {
		t.Fatalf("dump of the last version: %+v", r)
	}

	// Reset the rollout's consumption: the version is ready for it again.
	if r := runTQ(t, url, "reset", grpo.WeightsPartition, "rollout"); r.code != 2 || !strings.Contains(r.stderr, "-yes") {
		t.Fatalf("reset without -yes: %+v", r)
	}
	r = runTQ(t, url, "reset", "-yes", grpo.WeightsPartition, "rollout")
	if r.code != 0 || !strings.Contains(r.stdout, "every row ready again") {
		t.Fatalf("reset: %+v", r)
	}
	w = status(t, url, "-task", "rollout", "-fields", "logits", grpo.WeightsPartition)
	if ro := w.Tasks["rollout"]; ro.Ready != 1 || ro.Acked != 0 || !ro.Exact {
		t.Fatalf("rollout after the reset: %+v, want 1 ready, counted exactly", ro)
	}
	// One key of another task: the rest of its consumption stays.
	r = runTQ(t, url, "reset", "-yes", grpo.GradsPartition, "allreduce-0", "s0003-e01-r00")
	if r.code != 0 || !strings.Contains(r.stdout, "1 rows ready again") {
		t.Fatalf("reset of a key: %+v", r)
	}
	g = status(t, url, grpo.GradsPartition)
	if a0, a1 := g.Tasks["allreduce-0"], g.Tasks["allreduce-1"]; a0.Acked != 1 || a0.Ready != 1 || a1.Acked != 2 {
		t.Errorf("after resetting one key of allreduce-0: %+v, %+v", a0, a1)
	}
	// A task that has not consumed yet is counted exactly too.
	w = status(t, url, "-task", "critic", "-fields", "done", grpo.WeightsPartition)
	if cr := w.Tasks["critic"]; cr.Ready != 1 || !cr.Exact {
		t.Errorf("a task that has not consumed: %+v", cr)
	}
	// A field no row has is a mistake (it would count every row
	// Waiting): the error names the fields there are.
	r = runTQ(t, url, "status", "-task", "critic", "-fields", "values", grpo.WeightsPartition)
	if r.code != 1 || !strings.Contains(r.stderr, `no field "values" in partition "grpo/weights" (fields: done, logits)`) {
		t.Errorf("status -fields with a field no row has: %+v", r)
	}
}

// TestDeadRetryDrop: a row nacked past MaxDeliveries is listed by dead,
// made ready by retry, and consumed by drop.
func TestDeadRetryDrop(t *testing.T) {
	url := sharedQueue(t)
	ctx := context.Background()
	c, err := tq.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.BatchPut(ctx, "p", []string{"a", "b", "c"}, tq.Batch{"x": tq.Stacked([]int64{1, 2, 3})}, nil); err != nil {
		t.Fatal(err)
	}
	task, err := c.Task("p", "work", []string{"x"}, tq.MaxDeliveries(1))
	if err != nil {
		t.Fatal(err)
	}
	l, err := task.Claim(ctx, 2)
	if err != nil || l.Len() != 2 || l.Keys()[0] != "a" {
		t.Fatalf("claim: %v, %v", l, err)
	}
	if err := l.Nack(ctx, 0, "a"); err != nil { // dead
		t.Fatal(err)
	}
	if err := l.Ack(ctx, "b"); err != nil {
		t.Fatal(err)
	}

	r := runTQ(t, url, "dead", "p", "work")
	if r.code != 0 || !strings.Contains(r.stdout, `"a"`) || strings.Contains(r.stdout, `"b"`) {
		t.Fatalf("dead: %+v, want a alone", r)
	}
	r = runTQ(t, url, "-json", "dead", "p", "work")
	var doc struct {
		Dead []struct {
			Key        string
			Deliveries int
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || len(doc.Dead) != 1 || doc.Dead[0].Key != "a" || doc.Dead[0].Deliveries != 1 {
		t.Fatalf("dead -json: %+v, %v", r, err)
	}
	if r := runTQ(t, url, "retry", "p", "work", "a"); r.code != 0 || !strings.Contains(r.stdout, "retried 1 rows") {
		t.Fatalf("retry: %+v", r)
	}
	if ts := status(t, url, "-task", "work", "-fields", "x", "p").Tasks["work"]; ts.Ready != 2 || ts.Dead != 0 || ts.Acked != 1 {
		t.Fatalf("after retry: %+v, want a and c ready, b acked", ts)
	}
	// b is acked, not dead: retry names it and changes nothing.
	if r := runTQ(t, url, "retry", "p", "work", "b"); r.code != 1 || !strings.Contains(r.stderr, "(b)") {
		t.Errorf("retry of an acked row: %+v", r)
	}
	if r := runTQ(t, url, "drop", "p", "work", "a"); r.code != 2 {
		t.Errorf("drop without -yes: %+v", r)
	}
	if r := runTQ(t, url, "drop", "-yes", "p", "work", "a", "c"); r.code != 0 {
		t.Fatalf("drop: %+v", r)
	}
	if ts := status(t, url, "p").Tasks["work"]; ts.Dropped != 2 || ts.Acked != 1 {
		t.Errorf("after drop: %+v, want a and c dropped", ts)
	}
	// A task that has not consumed: drop refuses it unless told it is new.
	if r := runTQ(t, url, "drop", "-yes", "p", "later", "a"); r.code != 1 || !strings.Contains(r.stderr, `no task "later" in partition "p" (tasks: work)`) {
		t.Errorf("drop for a new task: %+v", r)
	}
	if r := runTQ(t, url, "drop", "-yes", "-new-task", "p", "later", "a"); r.code != 0 {
		t.Errorf("drop -new-task: %+v", r)
	}
	if ts := status(t, url, "p").Tasks["later"]; ts.Dropped != 1 || ts.Ready != 2 {
		t.Errorf("the new task after drop -new-task: %+v", ts)
	}
}

func TestQueueCommandErrors(t *testing.T) {
	url := sharedQueue(t)
	ctx := context.Background()
	c, err := tq.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.BatchPut(ctx, "p", []string{"a"}, tq.Batch{"x": tq.Stacked([]int64{1})}, nil); err != nil {
		t.Fatal(err)
	}
	consume(t, c, "p", "t", "x")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-url", "nosuch://u:secret@h/", "status", "p"}, 1, "unknown"},
		{[]string{"status", "nope"}, 1, `no partition "nope"`},
		{[]string{"status", "-task", "t", "p"}, 2, "-task and -fields"},
		{[]string{"status", "-task", "t", "-fields", "x,", "p"}, 2, "empty field name"},
		{[]string{"reset", "-yes", "nope", "t"}, 1, `no partition "nope"`},
		{[]string{"reset", "-yes", "p", "t", "zz"}, 1, `no key "zz"`},
		{[]string{"reset", "-yes", "p"}, 2, "usage: tq reset"},
		{[]string{"dead", "nope", "t"}, 1, `no partition "nope"`},
		{[]string{"retry", "p", "t", "zz"}, 1, `no key "zz"`},
		{[]string{"retry", "p", "t"}, 2, "usage: tq retry"},
	} {
		r := runTQ(t, url, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) || r.stdout != "" || strings.Contains(r.stderr, "secret") {
			t.Errorf("%v: %+v, want exit %d and stderr with %q", tc.args, r, tc.code, tc.want)
		}
	}
}

// consume makes task of partition exist: it claims a row and acks it.
func consume(t *testing.T, c *tq.Client, partition, task string, fields ...string) {
	t.Helper()
	tk, err := c.Task(partition, task, fields)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tk.Claim(t.Context(), 1)
	if err != nil || l.Len() != 1 {
		t.Fatalf("claim: %v, %v", l, err)
	}
	if err := l.Ack(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// status shows who holds each lease, for how long yet, and which
// processes announced themselves, alive or not.
func TestStatusShowsHolders(t *testing.T) {
	url := sharedQueue(t)
	c, err := tq.Open(t.Context(), url, tq.WithName("worker-a"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	keys := []string{"r0", "r1", "r2"}
	if err := c.BatchPut(t.Context(), "p", keys, tq.Batch{"x": tq.Stacked([]float32{1, 2, 3})}, nil); err != nil {
		t.Fatal(err)
	}
	tk, err := c.Task("p", "reward", []string{"x"}, tq.LeaseFor(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if l, err := tk.Claim(t.Context(), 2); err != nil || l.Len() != 2 {
		t.Fatalf("claim: %v, %v", l, err)
	}
	pres, err := c.Announce(t.Context(), "reward", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer pres.Close()

	r := runTQ(t, url, "status", "p")
	if r.code != 0 {
		t.Fatalf("status: %+v", r)
	}
	for _, want := range []string{"HOLDER", "worker-a", "ENDS IN", "GROUP", "reward", "alive"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status lacks %q:\n%s", want, r.stdout)
		}
	}
	r = runTQ(t, url, "-json", "status", "p")
	var doc struct {
		Tasks map[string]struct {
			Leases []struct {
				Holder string
				Rows   int
				Until  time.Time
			}
		}
		Members []struct{ Group, Name, State string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || r.code != 0 {
		t.Fatalf("status -json: %+v: %v", r, err)
	}
	ls := doc.Tasks["reward"].Leases
	if len(ls) != 1 || ls[0].Holder != "worker-a" || ls[0].Rows != 2 || time.Until(ls[0].Until) < 50*time.Second {
		t.Errorf("leases: %+v, want 2 rows held by worker-a for about a minute", ls)
	}
	if len(doc.Members) != 1 || doc.Members[0].Name != "worker-a" || doc.Members[0].State != "alive" {
		t.Errorf("members: %+v, want worker-a alive", doc.Members)
	}
}
