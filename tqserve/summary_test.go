package tqserve_test

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/tq"
	"github.com/tqgo/tqgo/tqserve"
)

// replySizes is a server interceptor that records the size of each reply
// by method.
type replySizes struct {
	mu    sync.Mutex
	sizes map[string][]int
}

func (r *replySizes) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	out, err := next(ctx, req)
	if m, ok := out.(proto.Message); ok && err == nil {
		r.mu.Lock()
		r.sizes[info.FullMethod] = append(r.sizes[info.FullMethod], proto.Size(m))
		r.mu.Unlock()
	}
	return out, err
}

// take returns the largest reply of each method since the last take.
func (r *replySizes) take() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for m, ns := range r.sizes {
		for _, n := range ns {
			out[m] = max(out[m], n)
		}
	}
	r.sizes = map[string][]int{}
	return out
}

// fillPartition puts n rows (field x, tag v 1) into part, and leases 4
// of them to task "train", acking 2.
func fillPartition(t *testing.T, c *tq.Client, part string, n int) {
	t.Helper()
	ctx := t.Context()
	keys := make([]string, n)
	xs := make([]int64, n)
	tags := make([]tq.Tag, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%06d", i)
		xs[i] = int64(i)
		tags[i] = tq.Tag{"v": int64(1)}
	}
	if err := c.BatchPut(ctx, part, keys, tq.Batch{"x": tq.ValuesOf(xs)}, tags); err != nil {
		t.Fatal(err)
	}
	task, err := c.Task(part, "train", []string{"x"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := task.Claim(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Ack(ctx, l.Keys()[:2]...); err != nil {
		t.Fatal(err)
	}
}

// A Status, a task's status, a paced producer's look and a rate
// limiter's look through a server carry counts, not rows: no View is
// called, and their replies are as small over a partition of thousands
// of rows as over one of a few.
func TestSummaryCarriesNoRows(t *testing.T) {
	rec := &replySizes{sizes: map[string][]int{}}
	s := startServer(t, "memory://tqserve-summary-size", tqserve.WithInterceptor(rec.intercept))
	c := openClient(t, s.URL)
	ctx := t.Context()
	look := func(part string) map[string]int {
		t.Helper()
		rec.take()
		st, err := c.Status(ctx, part)
		if err != nil {
			t.Fatal(err)
		}
		if ts := st.Tasks["train"]; ts.Leased != 2 || ts.Acked != 2 || len(ts.Leases) != 1 {
			t.Fatalf("%s: status of train %+v, want 2 leased (one lease) and 2 acked", part, ts)
		}
		task, err := c.Task(part, "train", []string{"x"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := task.Status(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.Pace(ctx, part, "v", 1, 0, "train"); err != nil {
			t.Fatal(err)
		}
		if err := c.AwaitInsert(ctx, part, "train", tq.Ratio{SamplesPerInsert: 1, MinSize: 1 << 20, ErrorBuffer: 1}, 1); err != nil {
			t.Fatal(err)
		}
		return rec.take()
	}
	const few, many = 10, 5000
	fillPartition(t, c, "few", few)
	fillPartition(t, c, "many", many)
	small, big := look("few"), look("many")
	t.Logf("largest replies over %d rows: %v; over %d: %v", few, small, many, big)
	const view, summary = "/tqgo.v1.Meta/View", "/tqgo.v1.Meta/Summary"
	if _, ok := big[view]; ok {
		t.Errorf("a View was called: replies %v", big)
	}
	if big[summary] == 0 {
		t.Fatalf("no Summary was called: replies %v", big)
	}
	for m, n := range big {
		// A few bytes more for counts in thousands than in units.
		if n > small[m]+32 || n > 1024 {
			t.Errorf("%s: a reply of %d bytes over %d rows, %d over %d", m, n, many, small[m], few)
		}
	}
	// What the replies would carry as Views: the rows.
	if _, err := openMeta(t, s.URL).View(ctx, "many"); err != nil {
		t.Fatal(err)
	}
	n := rec.take()[view]
	t.Logf("a View of %d rows: %d bytes", many, n)
	if n < 10*many {
		t.Errorf("a View of %d rows is %d bytes: the comparison above measures nothing", many, n)
	}
}

// viewOnly is a MetaStore that is no Summarizer: tq computes every
// summary from its View.
type viewOnly struct{ metadata.MetaStore }

// A Status and a task's status through a server's Summary are what the
// client computes from the partition's View.
func TestSummaryMatchesView(t *testing.T) {
	for name, eng := range engines(t) {
		t.Run(name, func(t *testing.T) {
			s := startServer(t, eng(t))
			e, err := backends.Open(t.Context(), s.URL)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = e.Close() })
			meta := e.Meta.(metadata.MetaStore)
			if _, ok := meta.(metadata.Summarizer); !ok {
				t.Fatalf("%T is no Summarizer", meta)
			}
			open := func(m metadata.MetaStore) *tq.Client {
				c, err := tq.New(backends.Engine{Data: e.Data, Meta: m}, tq.Quiet())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = c.Close() })
				return c
			}
			// One MetaStore under both: the same clock skew converts the
			// times of both.
			viaSummary, viaView := open(meta), open(viewOnly{meta})
			ctx := t.Context()
			const part = "p"
			var keys []string
			var tags []tq.Tag
			for i := range 6 {
				keys = append(keys, fmt.Sprintf("a/%d", i))
				tags = append(tags, tq.Tag{"v": int64(i)})
			}
			xs := tq.ValuesOf([]int64{0, 1, 2, 3, 4, 5})
			if err := viaSummary.BatchPut(ctx, part, keys, tq.Batch{"x": xs}, tags); err != nil {
				t.Fatal(err)
			}
			if err := viaSummary.BatchPut(ctx, part, []string{"b/0", "b/1"},
				tq.Batch{"x": tq.ValuesOf([]int64{6, 7}), "y": tq.ValuesOf([]int64{0, 1})}, nil); err != nil {
				t.Fatal(err)
			}
			train, err := viaSummary.Task(part, "train", []string{"x"}, tq.LeaseFor(time.Minute), tq.MaxDeliveries(1), tq.ConsumerName("w1"))
			if err != nil {
				t.Fatal(err)
			}
			l, err := train.Claim(ctx, 2)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Ack(ctx, l.Keys()[0]); err != nil {
				t.Fatal(err)
			}
			l, err = train.Claim(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Nack(ctx, 0); err != nil { // dead: one delivery at most
				t.Fatal(err)
			}
			if err := train.Drop(ctx, "b/1"); err != nil {
				t.Fatal(err)
			}
			groups, err := viaSummary.Task(part, "groups", []string{"x"}, tq.WithGroups(tq.GroupKeyPrefix("/"), 4))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := groups.Claim(ctx, 4); err != nil { // a's first 4; a's last 2 and b's 2 wait
				t.Fatal(err)
			}
			if _, err := viaSummary.Task(part, "y", []string{"y"}); err != nil {
				t.Fatal(err)
			}

			got, err := viaSummary.Status(ctx, part)
			if err != nil {
				t.Fatal(err)
			}
			want, err := viaView.Status(ctx, part)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Status through the summary:\n %+v\nfrom the View:\n %+v", got, want)
			}
			if tr := got.Tasks["train"]; tr.Leased != 1 || tr.Acked != 1 || tr.Dead != 1 || tr.Dropped != 1 || len(got.Tasks["groups"].Groups) != 2 {
				t.Errorf("Status %+v: want train with 1 leased, acked, dead and dropped, and 2 groups waiting", got)
			}
			for _, name := range []string{"train", "groups", "y"} {
				var fields []string
				if name == "y" {
					fields = []string{"y"}
				} else {
					fields = []string{"x"}
				}
				ts, err := viaSummary.Task(part, name, fields)
				if err != nil {
					t.Fatal(err)
				}
				tv, err := viaView.Task(part, name, fields)
				if err != nil {
					t.Fatal(err)
				}
				got, err := ts.Status(ctx)
				if err != nil {
					t.Fatal(err)
				}
				want, err := tv.Status(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s: status through the summary:\n %+v\nfrom the View:\n %+v", name, got, want)
				}
				if name == "y" && (got.Ready != 2 || got.Waiting != 6) {
					t.Errorf("y: status %+v, want 2 ready and 6 waiting for y", got)
				}
			}
		})
	}
}

// A client whose server does not know Summary (an older server) gets the
// same status from the View, summarized by itself.
func TestSummaryFromOlderServer(t *testing.T) {
	var refused atomic.Int64
	older := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		if info.FullMethod == "/tqgo.v1.Meta/Summary" {
			refused.Add(1)
			return nil, status.Error(codes.Unimplemented, "unknown method Summary")
		}
		return next(ctx, req)
	}
	s := startServer(t, "memory://tqserve-summary-older", tqserve.WithInterceptor(older))
	c := openClient(t, s.URL)
	fillPartition(t, c, "p", 10)
	st, err := c.Status(t.Context(), "p")
	if err != nil {
		t.Fatal(err)
	}
	if ts := st.Tasks["train"]; st.Rows != 10 || ts.Leased != 2 || ts.Acked != 2 || ts.Ready != 6 {
		t.Errorf("status %+v: want 10 rows, train with 6 ready, 2 leased and 2 acked", st)
	}
	if err := c.Pace(t.Context(), "p", "v", 1, 0, "train"); err != nil {
		t.Fatal(err)
	}
	if refused.Load() != 2 {
		t.Errorf("the server refused %d Summary calls, want 2 (Status, Pace)", refused.Load())
	}
}
