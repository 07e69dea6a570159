package backendtest

import (
	"reflect"
	"time"

	"github.com/tqgo/tqgo/backends/metadata"
)

// testSummary: metadata.Summarize gives what the View's Summary gives (a
// Summarizer computes it where the rows are, with the same code), and
// counts rows by state, lease and missing field, and by a task's fields
// with counts alone (a status).
func testSummary(x *qt) {
	p := x.part("summary")
	rs := x.rows(p, "r", 6, "a")
	x.rows(p, "s", 2, "a", "b")
	long := func(n int) metadata.ClaimRequest {
		r := req("t", n)
		r.Lease = time.Minute // no lease ends while the test compares
		return r
	}
	r := long(2)
	r.Holder = "w1"
	x.claim(p, r, each) // r000, r001 leased
	x.ack(p, "t", x.claim(p, long(1), each))
	r = long(1)
	r.MaxDeliveries = 1
	c := x.claim(p, r, each)
	x.settle(p, metadata.SettleRequest{Task: "t", Op: metadata.Nack, Lease: c.Lease, Indexes: indexes(c.Rows)}) // r003 dead
	r004 := x.lookup(p, rs[4])[0]
	x.settle(p, metadata.SettleRequest{Task: "t", Op: metadata.Drop, Indexes: []uint64{r004.Index}})
	ru := long(1)
	ru.Task = "u"
	x.ack(p, "u", x.claim(p, ru, each)) // r000 acked by u

	reqs := []metadata.SummaryRequest{
		{Counts: true},
		{},
		{Tasks: []string{"t"}, Fields: []string{"a", "b"}, Counts: true, Progress: true},
		{Tasks: []string{"t", "u"}, Version: "i"},
		{Tasks: []string{"u", "never"}, Counts: true},
		{Tasks: []string{"t", "never"}, Fields: []string{"a", "b"}, Counts: true},
	}
	sums := make([]metadata.Summary, len(reqs))
	for i, rq := range reqs {
		got, err := metadata.Summarize(x.ctx, x.q, p, rq)
		if err != nil {
			x.t.Fatalf("Summarize(%+v): %v", rq, err)
		}
		v, err := x.q.View(x.ctx, p, rq.Tasks...)
		if err != nil {
			x.t.Fatal(err)
		}
		if want := v.Summary(rq); !reflect.DeepEqual(got, want) {
			x.t.Errorf("Summarize(%+v):\n %+v\nthe View's Summary:\n %+v", rq, got, want)
		}
		sums[i] = got
	}

	all := sums[0]
	if all.Rows != 8 || all.Fields["a"] != 8 || all.Fields["b"] != 2 || len(all.Tasks) != 2 || all.Inserted != 8 {
		x.t.Errorf("Summary of every task: %+v; want 8 rows (8 with a, 2 with b), tasks t and u, 8 inserted", all)
	}
	t := all.Tasks["t"]
	if t.Ready != 3 || t.Waiting != 0 || t.Leased != 2 || t.Acked != 1 || t.Dead != 1 || t.Dropped != 1 || t.Consumed != 2 {
		x.t.Errorf("task t: %+v; want 3 ready, 2 leased, 1 acked, 1 dead, 1 dropped, 2 consumed", t)
	}
	if len(t.Leases) != 1 || t.Leases[0].Holder != "w1" || t.Leases[0].Rows != 2 || t.Leases[0].ID == "" {
		x.t.Errorf("task t's leases: %+v; want one of 2 rows held by w1", t.Leases)
	}
	if n := sums[1].Tasks["t"]; sums[1].Fields["a"] != 0 || n.Leased != 0 || n.Consumed != 2 {
		x.t.Errorf("Summary without counts: %+v; want counters only", sums[1])
	}
	t = sums[2].Tasks["t"]
	if t.Ready != 2 || t.Waiting != 1 || len(t.Missing) != 1 || t.Missing["b"] != 4 || t.Progress == 0 {
		x.t.Errorf("task t waiting for a and b: %+v; want 2 ready, 1 waiting, 4 unconsumed rows missing b", t)
	}
	if sums[3].Oldest != 0 {
		x.t.Errorf("oldest version unconsumed by t or u: %v, want 0", sums[3].Oldest)
	}
	if n, ok := sums[4].Tasks["never"]; !ok || n.Ready != 8 {
		x.t.Errorf("a named task with no state: %+v (listed %v), want every row ready", n, ok)
	}
	// A status: counts by a task's fields, with no digest of the rows.
	if t, n := sums[5].Tasks["t"], sums[5].Tasks["never"]; t.Ready != 2 || t.Waiting != 1 || t.Leased != 2 || n.Ready != 2 || n.Waiting != 6 {
		x.t.Errorf("tasks t and never waiting for a and b, counts alone: %+v, %+v; want t 2 ready, 1 waiting, 2 leased, never 2 ready, 6 waiting", t, n)
	}
}
