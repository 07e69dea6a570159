package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/memory"
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
		DeadLeaseEnded                               int `json:"dead_lease_ended"`
		LastDead                                     *struct {
			Key, Reason string
			At          time.Time
		} `json:"last_dead"`
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
	if err := l.NackErr(ctx, 0, errors.New("bad input: row a"), "a"); err != nil { // dead
		t.Fatal(err)
	}
	if err := l.Ack(ctx, "b"); err != nil {
		t.Fatal(err)
	}

	r := runTQ(t, url, "dead", "p", "work")
	if r.code != 0 || !strings.Contains(r.stdout, `"a"`) || strings.Contains(r.stdout, `"b"`) ||
		!strings.Contains(r.stdout, "REASON") || !strings.Contains(r.stdout, `"bad input: row a"`) {
		t.Fatalf("dead: %+v, want a alone, with its reason", r)
	}
	r = runTQ(t, url, "-json", "dead", "p", "work")
	var doc struct {
		Dead []struct {
			Key        string
			Deliveries int
			Reason     string
			At         time.Time
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || len(doc.Dead) != 1 || doc.Dead[0].Key != "a" || doc.Dead[0].Deliveries != 1 ||
		doc.Dead[0].Reason != "bad input: row a" || doc.Dead[0].At.IsZero() {
		t.Fatalf("dead -json: %+v, %v", r, err)
	}
	// status says why rows died: how many of their lease's end, and the
	// last one's reason.
	r = runTQ(t, url, "status", "p")
	if r.code != 0 || !strings.Contains(r.stdout, "LAST DEAD") || !strings.Contains(r.stdout, `"bad input: row a"`) {
		t.Fatalf("status: %+v, want the last dead row's reason", r)
	}
	if ts := status(t, url, "p").Tasks["work"]; ts.Dead != 1 || ts.DeadLeaseEnded != 0 || ts.LastDead == nil ||
		ts.LastDead.Key != "a" || ts.LastDead.Reason != "bad input: row a" || ts.LastDead.At.IsZero() {
		t.Fatalf("status -json: %+v (last dead %+v), want a, dead of its error", ts, ts.LastDead)
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

// status lists the groups a group task waits on: a straggler shows, with
// how long it has waited and whether it is past the deadline.
func TestStatusShowsWaitingGroups(t *testing.T) {
	url := sharedQueue(t)
	c, err := tq.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.BatchPut(t.Context(), "p", []string{"g0", "g1"}, tq.Batch{"x": tq.Stacked([]float32{1, 2})},
		[]tq.Tag{{"uid": "u7"}, {"uid": "u7"}}); err != nil {
		t.Fatal(err)
	}
	tk, err := c.Task("p", "train", []string{"x"}, tq.WithGroups(tq.GroupTag("uid"), 4), tq.GroupDeadline(time.Hour, false))
	if err != nil {
		t.Fatal(err)
	}
	if l, err := tk.Claim(t.Context(), 4); err != nil || l.Len() != 0 {
		t.Fatalf("claim of an incomplete group: %v, %v", l, err)
	}
	r := runTQ(t, url, "status", "p")
	if r.code != 0 {
		t.Fatalf("status: %+v", r)
	}
	for _, want := range []string{"WAITING GROUP", "u7", "WAITING FOR"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status lacks %q:\n%s", want, r.stdout)
		}
	}
	r = runTQ(t, url, "-json", "status", "p")
	var doc struct {
		Tasks map[string]struct {
			Groups []struct {
				ID      string
				Rows    int
				Overdue bool
			}
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || r.code != 0 {
		t.Fatalf("status -json: %+v: %v", r, err)
	}
	if gs := doc.Tasks["train"].Groups; len(gs) != 1 || !strings.HasSuffix(gs[0].ID, "u7") || gs[0].Rows != 2 || gs[0].Overdue {
		t.Errorf("groups: %+v, want u7 waiting with 2 rows, not overdue", gs)
	}
}
