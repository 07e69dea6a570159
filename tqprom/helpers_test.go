package tqprom_test

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest"
	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/tq"
	"github.com/tqgo/tqgo/tqprom"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) } // ants starts its default pool at init

// setup returns a collector registered with a fresh pedantic registry, and
// a memory client that traces through it.
func setup(t *testing.T, opts ...tqprom.Option) (*tqprom.Collector, *prometheus.Registry, *tq.Client) {
	t.Helper()
	col, reg := registered(t, opts...)
	c, err := tq.Open(t.Context(), "memory://", tq.WithTracer(col))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return col, reg, c
}

// registered returns a collector registered with a fresh pedantic
// registry.
func registered(t *testing.T, opts ...tqprom.Option) (*tqprom.Collector, *prometheus.Registry) {
	t.Helper()
	col, err := tqprom.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := col.Register(reg); err != nil {
		t.Fatal(err)
	}
	return col, reg
}

// faultyClient is a client over a memory engine wrapped by f, with opts,
// closed when t ends.
func faultyClient(t *testing.T, f *backendtest.Faulty, opts ...tq.Option) *tq.Client {
	t.Helper()
	eng := backendtest.Wrap(backends.Engine{Data: memory.New(), Meta: memory.NewMetaStore(), Local: true}, f)
	c, err := tq.New(eng, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// putRows writes rows k0..k<n-1> with a field "x" and a tag "version".
func putRows(t *testing.T, c *tq.Client, partition string, n int, version int64) []string {
	t.Helper()
	keys := make([]string, n)
	xs := make([]float32, n)
	tags := make([]tq.Tag, n)
	for i := range keys {
		keys[i] = "k" + string(rune('0'+i))
		xs[i] = float32(i)
		tags[i] = tq.Tag{"version": version}
	}
	if err := c.BatchPut(t.Context(), partition, keys, tq.Batch{"x": tq.Stacked(xs)}, tags); err != nil {
		t.Fatal(err)
	}
	return keys
}

// compare gathers reg once and checks its families named by names
// against the exposition text want (their HELP and TYPE lines are filled
// in from what was gathered, so that only samples are spelled out).
func compare(t *testing.T, reg *prometheus.Registry, want string, names ...string) {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var b strings.Builder
	for _, name := range names {
		var lines []string
		for _, line := range strings.Split(want, "\n") {
			line = strings.TrimSpace(line)
			if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
				lines = append(lines, line)
			}
		}
		i := slices.IndexFunc(fams, func(f *dto.MetricFamily) bool { return f.GetName() == name })
		switch {
		case i < 0 && len(lines) > 0:
			t.Errorf("no %s gathered, want:\n%s", name, strings.Join(lines, "\n"))
		case i >= 0:
			f := fams[i]
			b.WriteString("# HELP " + name + " " + escapeHelp(f.GetHelp()) + "\n")
			b.WriteString("# TYPE " + name + " " + strings.ToLower(f.GetType().String()) + "\n")
			for _, line := range lines {
				b.WriteString(line + "\n")
			}
		}
	}
	gathered := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return fams, nil })
	if err := testutil.GatherAndCompare(gathered, strings.NewReader(b.String()), names...); err != nil {
		t.Error(err)
	}
}

func escapeHelp(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(s)
}

// family gathers reg and returns the family name, or nil.
func family(t *testing.T, reg prometheus.Gatherer, name string) *dto.MetricFamily {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f
		}
	}
	return nil
}

// sample returns the metric of family name whose labels are labels
// (name=value pairs), or nil.
func sample(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) *dto.Metric {
	t.Helper()
	f := family(t, reg, name)
	if f == nil {
		return nil
	}
	for _, m := range f.GetMetric() {
		if hasLabels(m, labels) {
			return m
		}
	}
	return nil
}

func hasLabels(m *dto.Metric, pairs []string) bool {
	got := map[string]string{}
	for _, lp := range m.GetLabel() {
		got[lp.GetName()] = lp.GetValue()
	}
	if len(got) != len(pairs)/2 {
		return false
	}
	for i := 0; i+1 < len(pairs); i += 2 {
		if v, ok := got[pairs[i]]; !ok || v != pairs[i+1] {
			return false
		}
	}
	return true
}

// recorder is a tracer that sums what each op's calls reported, and
// passes every call on to a Collector.
type recorder struct {
	*tqprom.Collector
	mu   sync.Mutex
	ends map[string]tq.CallEnd
}

func (r *recorder) TraceEnd(ctx context.Context, c *tq.Client, call tq.Call, end tq.CallEnd) {
	r.mu.Lock()
	s := r.ends[call.Op]
	s.Rows += end.Rows
	s.Cells += end.Cells
	s.Bytes += end.Bytes
	s.RoundTrips += end.RoundTrips
	r.ends[call.Op] = s
	r.mu.Unlock()
	r.Collector.TraceEnd(ctx, c, call, end)
}

func labelOf(m *dto.Metric, name string) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}

// gather collects c through a pedantic registry of its own.
func gather(t *testing.T, c prometheus.Collector) []*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// exported returns the names of the metrics c describes.
func exported(t *testing.T, c prometheus.Collector) []string {
	t.Helper()
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	var names []string
	for d := range ch {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no fqName in %s", d)
		}
		names = append(names, m[1])
	}
	if len(names) == 0 {
		t.Fatal("the collector describes no metric")
	}
	return names
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)
