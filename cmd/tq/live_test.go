package main

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

// liveEngines are the queues the live commands run against: memory (a
// queue shared with the test in this process) and a private redis-server.
func liveEngines(t *testing.T, run func(t *testing.T, url string)) {
	t.Run("memory", func(t *testing.T) { run(t, sharedQueue(t)) })
	t.Run("redis", func(t *testing.T) { run(t, redistest.Start(t).URL()+"?prefix=livetest") })
}

// consumed is what liveQueue did: the keys worker-a holds leased, the key
// it acked, the key ready for reward, and the key lacking reward's field.
type consumed struct {
	leased        []string
	acked, ready  string
	lacking       string
	until         time.Time
	granted       time.Time
	leaseDelivery int
}

// liveQueue puts rows r0..r3 with field x and r4 with y only into
// partition p; worker-a's task reward (field x) claims 3, acks one and
// holds two; it returns the client, open until the test ends.
func liveQueue(t *testing.T, url string) consumed {
	t.Helper()
	c, err := tq.Open(t.Context(), url, tq.WithName("worker-a"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	keys := []string{"r0", "r1", "r2", "r3"}
	if err := c.BatchPut(t.Context(), "p", keys, tq.Batch{"x": tq.Stacked([]float32{1, 2, 3, 4})}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Put(t.Context(), "p", "r4", map[string]any{"y": []float32{5}}, nil); err != nil {
		t.Fatal(err)
	}
	tk, err := c.Task("p", "reward", []string{"x"}, tq.LeaseFor(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	l, err := tk.Claim(t.Context(), 3)
	if err != nil || l.Len() != 3 {
		t.Fatalf("claim: %v, %v", l, err)
	}
	got := l.Keys()
	if err := l.Ack(t.Context(), got[0]); err != nil {
		t.Fatal(err)
	}
	var ready string
	for _, k := range keys {
		if !slices.Contains(got, k) {
			ready = k
		}
	}
	leased := slices.Clone(got[1:])
	slices.Sort(leased)
	return consumed{leased: leased, acked: got[0], ready: ready, lacking: "r4", until: l.Until(), granted: l.Granted(), leaseDelivery: 1}
}

// leases lists a task's leases as XPENDING does: the holder, its rows and
// their keys, deliveries and the lease's end; an unknown task is an error
// naming the tasks there are.
func TestLeases(t *testing.T) {
	liveEngines(t, func(t *testing.T, url string) {
		q := liveQueue(t, url)
		r := runTQ(t, url, "leases", "p", "reward")
		if r.code != 0 {
			t.Fatalf("leases: %+v", r)
		}
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "HOLDER") || !strings.Contains(lines[0], "HELD") {
			t.Fatalf("leases: want a header (with HELD) and one lease:\n%s", r.stdout)
		}
		for _, want := range []string{"worker-a", `"` + q.leased[0] + `" "` + q.leased[1] + `"`, q.until.UTC().Format(time.RFC3339)[:16]} {
			if !strings.Contains(lines[1], want) {
				t.Errorf("lease line %q lacks %q", lines[1], want)
			}
		}
		r = runTQ(t, url, "-json", "leases", "p", "reward")
		var doc struct {
			Partition, Task string
			Leases          []struct {
				ID, Holder string
				Rows       int
				Keys       []string
				Deliveries int
				Until      time.Time
				Granted    time.Time
			}
		}
		if err := json.Unmarshal([]byte(r.stdout), &doc); r.code != 0 || err != nil {
			t.Fatalf("leases -json: %+v: %v", r, err)
		}
		if len(doc.Leases) == 1 && (q.granted.IsZero() || doc.Leases[0].Granted.Sub(q.granted).Abs() > time.Second) {
			t.Errorf("lease granted at %v, the claim's lease says %v", doc.Leases[0].Granted, q.granted)
		}
		if len(doc.Leases) != 1 {
			t.Fatalf("leases -json: %+v, want one lease", doc)
		}
		l := doc.Leases[0]
		if l.Holder != "worker-a" || l.Rows != 2 || !slices.Equal(l.Keys, q.leased) || l.Deliveries != 1 || l.ID == "" ||
			l.Until.Sub(q.until).Abs() > time.Second {
			t.Errorf("lease %+v, want worker-a holding %q once delivered until %v", l, q.leased, q.until)
		}
		r = runTQ(t, url, "leases", "p", "nope")
		if r.code != 1 || !strings.Contains(r.stderr, `no task "nope"`) || !strings.Contains(r.stderr, "reward") {
			t.Errorf("leases of an unknown task: %+v", r)
		}
	})
}

// top -once prints one frame: the task's rows by state, its lag and next
// lease end, and the holder of its leases; -n 2 -json prints two frames,
// the second with rates.
func TestTopOnce(t *testing.T) {
	liveEngines(t, func(t *testing.T, url string) {
		liveQueue(t, url)
		r := runTQ(t, url, "top", "-once", "p")
		if r.code != 0 {
			t.Fatalf("top -once: %+v", r)
		}
		if strings.Contains(r.stdout, "\x1b[") {
			t.Errorf("top -once wrote terminal escapes:\n%q", r.stdout)
		}
		var taskLine, holderLine string
		for _, l := range strings.Split(r.stdout, "\n") {
			f := strings.Fields(l)
			if len(f) >= 3 && f[0] == "p" && f[2] == "reward" {
				taskLine = l
			}
			if len(f) >= 3 && f[0] == "p" && f[1] == "reward" && f[2] == "worker-a" {
				holderLine = l
			}
		}
		// PARTITION ROWS TASK READY* LEASED ACKED DEAD DROPPED CLAIMS/S ACKS/S LAG OLDEST-LEASE NEXT-LEASE-END
		if f := strings.Fields(taskLine); len(f) < 10 || !slices.Equal(f[:10], []string{"p", "5", "reward", "2", "2", "1", "0", "0", "-", "-"}) {
			t.Errorf("top's task line %q, want 5 rows, 2 ready (r4 counted too), 2 leased, 1 acked, no rates yet:\n%s", taskLine, r.stdout)
		}
		if f := strings.Fields(taskLine); len(f) != 13 || f[11] == "-" || f[12] == "-" {
			t.Errorf("top's task line %q, want the oldest lease's age and the next lease end:\n%s", taskLine, r.stdout)
		} else if age, err := time.ParseDuration(f[11]); err != nil || age < 0 || age > time.Minute {
			t.Errorf("top's oldest lease age %q: %v", f[11], err)
		}
		if f := strings.Fields(holderLine); len(f) < 5 || f[3] != "1" || f[4] != "2" {
			t.Errorf("top's holder line %q, want worker-a with 1 lease of 2 rows:\n%s", holderLine, r.stdout)
		}

		// No partition named: every partition.
		if r := runTQ(t, url, "top", "-once"); r.code != 0 || !strings.Contains(r.stdout, "worker-a") {
			t.Errorf("top -once of every partition: %+v", r)
		}
		r = runTQ(t, url, "top", "-once", "nope")
		if r.code != 1 || !strings.Contains(r.stderr, `no partition "nope"`) {
			t.Errorf("top of an unknown partition: %+v", r)
		}

		r = runTQ(t, url, "-json", "top", "-n", "2", "-interval", "10ms", "p")
		if r.code != 0 {
			t.Fatalf("top -n 2: %+v", r)
		}
		type frame struct {
			Partitions []struct {
				Partition string
				Tasks     []struct {
					Task                 string
					Ready, Leased, Acked int
					ClaimsPerSec         *float64   `json:"claims_per_sec"`
					AcksPerSec           *float64   `json:"acks_per_sec"`
					OldestReady          *time.Time `json:"oldest_ready"`
					NextLeaseEnd         *time.Time `json:"next_lease_end"`
					Consumers            []struct {
						Holder       string
						Leases, Rows int
					}
				}
			}
		}
		dec := json.NewDecoder(strings.NewReader(r.stdout))
		var frames []frame
		for dec.More() {
			var f frame
			if err := dec.Decode(&f); err != nil {
				t.Fatalf("top -json: %v:\n%s", err, r.stdout)
			}
			frames = append(frames, f)
		}
		if len(frames) != 2 {
			t.Fatalf("top -n 2: %d frames:\n%s", len(frames), r.stdout)
		}
		for i, f := range frames {
			if len(f.Partitions) != 1 || len(f.Partitions[0].Tasks) != 1 {
				t.Fatalf("frame %d: %+v", i, f)
			}
			tk := f.Partitions[0].Tasks[0]
			if tk.Task != "reward" || tk.Ready != 2 || tk.Leased != 2 || tk.Acked != 1 || tk.NextLeaseEnd == nil ||
				len(tk.Consumers) != 1 || tk.Consumers[0].Holder != "worker-a" || tk.Consumers[0].Rows != 2 {
				t.Errorf("frame %d: %+v", i, tk)
			}
			if (tk.ClaimsPerSec != nil) != (i == 1) {
				t.Errorf("frame %d: claims per second %v, want one only from the second frame", i, tk.ClaimsPerSec)
			}
			if i == 1 && *tk.ClaimsPerSec != 0 {
				t.Errorf("frame 1: %v claims per second, nothing claimed between frames", *tk.ClaimsPerSec)
			}
		}
	})
}

// rows -task shows the task's state and deliveries of each row; with
// -fields, a row lacking the task's field is waiting.
func TestRowsTask(t *testing.T) {
	liveEngines(t, func(t *testing.T, url string) {
		q := liveQueue(t, url)
		r := runTQ(t, url, "rows", "-task", "reward", "-fields", "x", "p")
		if r.code != 0 {
			t.Fatalf("rows -task: %+v", r)
		}
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(lines) != 6 || !strings.HasPrefix(lines[0], "INDEX") || !strings.Contains(lines[0], "STATE") {
			t.Fatalf("rows -task: want a header and 5 rows:\n%s", r.stdout)
		}
		want := map[string][2]string{
			q.acked:     {"acked", "1"},
			q.leased[0]: {"leased(worker-a,", "1"},
			q.leased[1]: {"leased(worker-a,", "1"},
			q.ready:     {"ready", "0"},
			q.lacking:   {"waiting", "0"},
		}
		for _, l := range lines[1:] {
			f := strings.Fields(l)
			w, ok := want[strings.Trim(f[1], `"`)]
			if !ok || !strings.HasPrefix(f[2], w[0]) || f[3] != w[1] {
				t.Errorf("row %q, want state %s and %s deliveries", l, w[0], w[1])
			}
		}

		r = runTQ(t, url, "-json", "rows", "-task", "reward", "p")
		var doc struct {
			Rows []struct {
				Key         string
				Consumption *struct {
					Task, State, Holder string
					Deliveries          int
				}
			}
		}
		if err := json.Unmarshal([]byte(r.stdout), &doc); r.code != 0 || err != nil || len(doc.Rows) != 5 {
			t.Fatalf("rows -task -json: %+v: %v", r, err)
		}
		for _, row := range doc.Rows {
			c := row.Consumption
			switch {
			case c == nil:
				t.Errorf("row %q: no consumption", row.Key)
			case row.Key == q.lacking && c.State != "ready":
				t.Errorf("row %q without -fields: %+v, want ready (every row in no other state)", row.Key, c)
			case slices.Contains(q.leased, row.Key) && (c.State != "leased" || c.Holder != "worker-a" || c.Deliveries != 1):
				t.Errorf("row %q: %+v, want leased by worker-a", row.Key, c)
			}
		}
		r = runTQ(t, url, "rows", "-task", "nope", "p")
		if r.code != 1 || !strings.Contains(r.stderr, `no task "nope"`) {
			t.Errorf("rows -task of an unknown task: %+v", r)
		}
		r = runTQ(t, url, "rows", "-fields", "x", "p")
		if r.code != 2 || !strings.Contains(r.stderr, "-fields needs -task") {
			t.Errorf("rows -fields without -task: %+v", r)
		}
	})
}

func TestDeliveredSince(t *testing.T) {
	before := map[string]uint64{"a": 1, "b": 3, "gone": 2}
	now := map[string]uint64{"a": 2, "b": 1, "new": 2}
	// a: one more; b: reset, then delivered once; new: twice.
	if n := deliveredSince(before, now); n != 4 {
		t.Errorf("deliveredSince = %d, want 4", n)
	}
}

// top without -n runs until interrupted, which ends it with exit status 0
// and the frames printed so far (plain: stdout is no terminal).
func TestTopUntilInterrupted(t *testing.T) {
	url := sharedQueue(t)
	liveQueue(t, url)
	t.Setenv(urlEnv, url)
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	code := run(ctx, []string{"top", "-interval", "20ms", "-timeout", "100ms", "p"}, &out, &errOut)
	if code != 0 || errOut.Len() != 0 {
		t.Fatalf("top interrupted: exit %d, stderr %q", code, errOut.String())
	}
	// Past -timeout: it bounds each frame, not the run.
	if n := strings.Count(out.String(), "tq top "); n < 2 || strings.Contains(out.String(), "\x1b[") {
		t.Errorf("top interrupted after 1s: %d frames (escapes: %v)", n, strings.Contains(out.String(), "\x1b["))
	}
}

// top's rates: between two frames, the deliveries made (a claim of one
// row) and the rows acked, over the time between them.
func TestTopRates(t *testing.T) {
	url := sharedQueue(t)
	liveQueue(t, url)
	var out bytes.Buffer
	s := &session{url: url, stdout: &out, stderr: &out}
	defer func() {
		if s.client != nil {
			s.client.Close()
		}
	}()
	_, first, err := s.topFrame(t.Context(), []string{"p"}, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tq.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tk, err := c.Task("p", "reward", []string{"x"})
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
	f, _, err := s.topFrame(t.Context(), []string{"p"}, first, false)
	if err != nil {
		t.Fatal(err)
	}
	secs := f.Time.Sub(first.at).Seconds()
	tj := f.Partitions[0].Tasks[0]
	if tj.ClaimsPerSec == nil || tj.AcksPerSec == nil {
		t.Fatalf("second frame without rates: %+v", tj)
	}
	if got := *tj.ClaimsPerSec * secs; got < 0.99 || got > 1.01 {
		t.Errorf("claims per second × %.3fs = %.3f, want 1 (one row claimed)", secs, got)
	}
	if got := *tj.AcksPerSec * secs; got < 0.99 || got > 1.01 {
		t.Errorf("acks per second × %.3fs = %.3f, want 1 (one row acked)", secs, got)
	}
}
