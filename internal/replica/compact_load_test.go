package replica_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest/toylog"
	"github.com/tqgo/tqgo/internal/replica"
	"github.com/tqgo/tqgo/tq"
)

// A partition compacted after every write while puts, overwrites,
// deletes, cleared fields, claims (ranks' too), acks, nacks and
// extensions go on from
// several goroutines: its snapshots, encoded while it changes, give a new
// process the state the writer has (and, under -race, the encoding reads
// nothing the partition changes meanwhile).
func TestCompactionUnderLoad(t *testing.T) {
	ctx := context.Background()
	srv := toylog.NewServer(nil)
	a := client(t, srv, nil, replica.CompactAfter(1))
	put(t, a, "p", keys(40, "base-")...)
	stop := time.Now().Add(time.Second)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; time.Now().Before(stop); i++ {
			fresh := keys(6, fmt.Sprint("n", i, "-"))
			if err := a.BatchPut(ctx, "p", fresh, tq.Batch{"x": tq.Stacked(make([]int64, 6))}, nil); err != nil {
				t.Error(err)
				return
			}
			// Rows committed and snapshotted, written again.
			if err := a.BatchPut(ctx, "p", keys(40, "base-")[i%8*5:i%8*5+5], tq.Batch{"x": tq.Stacked(make([]int64, 5))}, nil); err != nil {
				t.Error(err)
				return
			}
			switch i % 3 {
			case 2:
				// A field added to rows: they change their set of
				// fields (the counts a task's status reads keep them).
				if err := a.BatchPut(ctx, "p", keys(40, "base-")[i%8*5:i%8*5+2], tq.Batch{"y": tq.Stacked(make([]int64, 2))}, nil); err != nil {
					t.Error(err)
					return
				}
			case 0:
				if err := a.Clear(ctx, "p", fresh[:3]); err != nil {
					t.Error(err)
					return
				}
			case 1:
				if err := a.ClearFields(ctx, "p", fresh[3:4], "x"); err != nil {
					t.Error(err)
					return
				}
			}
		}
	})
	// claims loops Claim(4) on task until stop, settling each lease with
	// rows by settle. Settles of rows deleted meanwhile may fail: what
	// they leave is compared below, not their errors.
	claims := func(task *tq.Task, err error, settle func(i int, l *tq.Lease, ks []string)) {
		if err != nil {
			t.Error(err)
			return
		}
		for i := 0; time.Now().Before(stop); i++ {
			l, err := task.Claim(ctx, 4)
			if err != nil {
				t.Error(err)
				return
			}
			if ks := l.Keys(); len(ks) > 0 {
				settle(i, l, ks)
			}
		}
	}
	for w := range 3 {
		wg.Go(func() {
			task, err := a.Task("p", fmt.Sprint("t", w%2), []string{"x"})
			claims(task, err, func(i int, l *tq.Lease, ks []string) {
				switch i % 4 {
				case 0:
					_ = l.Ack(ctx, ks...)
				case 1:
					_ = l.Nack(ctx, 0, ks...)
				case 2:
					_ = l.Extend(ctx, time.Minute, ks...)
					_ = l.Ack(ctx, ks[:1]...)
				case 3:
					_ = l.NackErr(ctx, time.Hour, fmt.Errorf("no"), ks...)
				}
			})
		})
	}
	// Tasks' statuses, counted by their fields from the counts the
	// partition keeps (under its lock, while snapshots are encoded off
	// it): a task that claims and one with no state.
	wg.Go(func() {
		var tasks []*tq.Task
		for _, tf := range []struct {
			name   string
			fields []string
		}{{"t0", []string{"x"}}, {"s", []string{"x", "y"}}} {
			task, err := a.Task("p", tf.name, tf.fields)
			if err != nil {
				t.Error(err)
				return
			}
			tasks = append(tasks, task)
		}
		for i := 0; time.Now().Before(stop); i++ {
			if _, err := tasks[i%2].Status(ctx); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for rank := range 2 {
		// Ranks sharing batches (a batch's rows, units and takers).
		wg.Go(func() {
			task, err := a.Task("p", "r", []string{"x"}, tq.Ranks(2, rank, ""))
			claims(task, err, func(i int, l *tq.Lease, ks []string) {
				if i%2 == 0 {
					_ = l.Ack(ctx, ks...)
				}
			})
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	tail, err := srv.Engine().Log.Read(ctx, "p", backends.Pos{}, 0)
	if err != nil || tail.Snapshot == nil {
		t.Fatalf("the log holds no snapshot (%v)", err)
	}
	b := client(t, srv, nil)
	list := func(c *tq.Client) []string {
		m, err := c.List(ctx, "p")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range m.Rows {
			fs := slices.Sorted(func(yield func(string) bool) {
				for f := range r.Fields {
					if !yield(f) {
						return
					}
				}
			})
			out = append(out, fmt.Sprint(r.Key, r.Index, fs))
		}
		return out
	}
	status := func(c *tq.Client) map[string]tq.TaskStatus {
		st, err := c.Status(ctx, "p")
		if err != nil {
			t.Fatal(err)
		}
		for name, ts := range st.Tasks {
			for i := range ts.Leases {
				ts.Leases[i].Until, ts.Leases[i].Granted = time.Time{}, time.Time{}
			}
			if ts.LastDead != nil {
				ts.LastDead.At = time.Time{}
			}
			ts.OldestReady = time.Time{}
			st.Tasks[name] = ts
		}
		return st.Tasks
	}
	if got, want := list(b), list(a); !slices.Equal(got, want) {
		t.Errorf("a new process lists %d rows, the writer %d:\n%v\n%v", len(got), len(want), got, want)
	}
	if got, want := status(b), status(a); !reflect.DeepEqual(got, want) {
		t.Errorf("a new process sees tasks\n%+v\nthe writer\n%+v", got, want)
	}
	// Each task's own status, by its fields.
	for _, tf := range []struct {
		name   string
		fields []string
	}{{"t0", []string{"x"}}, {"t1", []string{"x"}}, {"r", []string{"x"}}, {"s", []string{"x", "y"}}} {
		var sts [2]tq.TaskStatus
		for i, c := range []*tq.Client{a, b} {
			task, err := c.Task("p", tf.name, tf.fields)
			if err != nil {
				t.Fatal(err)
			}
			if sts[i], err = task.Status(ctx); err != nil {
				t.Fatal(err)
			}
			for j := range sts[i].Leases {
				sts[i].Leases[j].Until, sts[i].Leases[j].Granted = time.Time{}, time.Time{}
			}
			if sts[i].LastDead != nil {
				sts[i].LastDead.At = time.Time{}
			}
			sts[i].OldestReady = time.Time{}
		}
		if !reflect.DeepEqual(sts[1], sts[0]) {
			t.Errorf("task %s by %v: a new process sees\n%+v\nthe writer\n%+v", tf.name, tf.fields, sts[1], sts[0])
		}
	}
}
