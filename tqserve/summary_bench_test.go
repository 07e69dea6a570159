package tqserve_test

import (
	"fmt"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/tq"
)

// BenchmarkSummary: a Status, a task's status, a paced producer's look
// and a rate limiter's look through a
// server at partition sizes, by Summary and, for comparison, by View (the
// client counting every row it is sent), over a memory engine (the rules
// in the server's memory store) and a file one (the rules replayed from
// its log). The partition's rows have a field and a version tag; a task
// holds one lease.
func BenchmarkSummary(b *testing.B) {
	for _, c := range []struct {
		engine string
		n      int
	}{{"memory", 1_000}, {"memory", 100_000}, {"file", 1_000}, {"file", 100_000}} {
		benchSummary(b, c.engine, c.n)
	}
}

func benchSummary(b *testing.B, engine string, n int) {
	url := fmt.Sprintf("memory://tqserve-bench-summary-%d", n)
	if engine == "file" {
		url = "file://" + b.TempDir() + "?sync=never"
	}
	s := startServer(b, url)
	e, err := backends.Open(b.Context(), s.URL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.Close() })
	meta := e.Meta.(metadata.MetaStore)
	open := func(m metadata.MetaStore) *tq.Client {
		c, err := tq.New(backends.Engine{Data: e.Data, Meta: m}, tq.Quiet())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close() })
		return c
	}
	clients := map[string]*tq.Client{"summary": open(meta), "view": open(viewOnly{meta})}
	const part = "p"
	fillRows(b, clients["summary"], part, n)
	for _, how := range []string{"summary", "view"} {
		c := clients[how]
		b.Run(fmt.Sprintf("%s/rows=%d/Status/%s", engine, n, how), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				st, err := c.Status(b.Context(), part)
				if err != nil || st.Rows != n {
					b.Fatalf("status: %+v, %v", st, err)
				}
			}
		})
		// A task's status: its rows counted by its fields.
		b.Run(fmt.Sprintf("%s/rows=%d/TaskStatus/%s", engine, n, how), func(b *testing.B) {
			task, err := c.Task(part, "train", []string{"x"})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := task.Status(b.Context()); err != nil { // the first builds what the next read
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				st, err := task.Status(b.Context())
				if err != nil || st.Ready+st.Leased != n {
					b.Fatalf("task status: %+v, %v", st, err)
				}
			}
		})
		// A look of Pace(v, k, "train") that lets the producer go.
		b.Run(fmt.Sprintf("%s/rows=%d/Pace/%s", engine, n, how), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.Pace(b.Context(), part, "v", 1, 0, "train"); err != nil {
					b.Fatal(err)
				}
			}
		})
		// A look of AwaitInsert that lets the producer go.
		b.Run(fmt.Sprintf("%s/rows=%d/Ratio/%s", engine, n, how), func(b *testing.B) {
			b.ReportAllocs()
			r := tq.Ratio{SamplesPerInsert: 1, MinSize: 1 << 30, ErrorBuffer: 1}
			for b.Loop() {
				if err := c.AwaitInsert(b.Context(), part, "train", r, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// fillRows puts n rows (field x, tag v 1) into part in chunks, and leases
// 4 of them to task "train".
func fillRows(b *testing.B, c *tq.Client, part string, n int) {
	b.Helper()
	const chunk = 5_000
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		keys := make([]string, hi-lo)
		xs := make([]int64, hi-lo)
		tags := make([]tq.Tag, hi-lo)
		for i := range keys {
			keys[i] = fmt.Sprintf("k%07d", lo+i)
			xs[i] = int64(lo + i)
			tags[i] = tq.Tag{"v": int64(1)}
		}
		if err := c.BatchPut(b.Context(), part, keys, tq.Batch{"x": tq.ValuesOf(xs)}, tags); err != nil {
			b.Fatal(err)
		}
	}
	task, err := c.Task(part, "train", []string{"x"})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := task.Claim(b.Context(), 4); err != nil {
		b.Fatal(err)
	}
}
