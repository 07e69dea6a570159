package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tqgo/tqgo/tq"
	"github.com/tqgo/tqgo/tqserve"
)

// metricsCallLimit bounds each call of TestServeMetricsHealth: one that
// has not ended by then hung.
const metricsCallLimit = 10 * time.Second

// tq serve -metrics serves Prometheus text at /metrics whose call metrics
// (tq_server_calls_total, tq_server_call_seconds) count the calls it
// answered, by method and code; the gRPC port answers the health service,
// SERVING for the server ("") and for tqgo.v1.Meta. On SIGTERM the health
// service turns NOT_SERVING (a Watch is told), a Check then fails or
// says NOT_SERVING, and the server exits 0, its Watch still open (cut
// off after tqserve.GracefulFor).
func TestServeMetricsHealth(t *testing.T) {
	addr, maddr := freePort(t), freePort(t)
	srv := serveChild(t, "-engine", "memory://", "-listen", addr, "-metrics", maddr)
	callCtx := func() context.Context {
		ctx, cancel := context.WithTimeout(t.Context(), metricsCallLimit)
		t.Cleanup(cancel)
		return ctx
	}

	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	health := healthpb.NewHealthClient(cc)
	for _, svc := range []string{"", "tqgo.v1.Meta"} {
		r, err := health.Check(callCtx(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health Check of service %q: %v, %v; want SERVING", svc, r.GetStatus(), err)
		}
	}
	watchCtx, endWatch := context.WithCancel(t.Context())
	defer endWatch()
	watch, err := health.Watch(watchCtx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("health Watch: %v", err)
	}
	watched := make(chan healthpb.HealthCheckResponse_ServingStatus, 4)
	go func() {
		defer close(watched)
		for {
			r, err := watch.Recv()
			if err != nil {
				return
			}
			watched <- r.GetStatus()
		}
	}()
	recvWatch := func(want healthpb.HealthCheckResponse_ServingStatus, what string) {
		t.Helper()
		select {
		case s, ok := <-watched:
			if !ok || s != want {
				t.Fatalf("health Watch %s: %v (stream open: %v), want %v", what, s, ok, want)
			}
		case <-time.After(metricsCallLimit):
			t.Fatalf("health Watch %s: nothing within %v, want %v", what, metricsCallLimit, want)
		}
	}
	recvWatch(healthpb.HealthCheckResponse_SERVING, "at first")

	// A put, claims, an ack.
	c, err := tq.Open(callCtx(), "tq://"+addr, tq.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.BatchPut(callCtx(), "p", []string{"k0", "k1", "k2"}, tq.Batch{"x": tq.ValuesOf([]int64{0, 1, 2})}, nil); err != nil {
		t.Fatalf("put: %v", err)
	}
	task, err := c.Task("p", "work", []string{"x"})
	if err != nil {
		t.Fatal(err)
	}
	claim := func() *tq.Lease {
		t.Helper()
		l, err := task.Claim(callCtx(), 1)
		if err != nil || l.Len() != 1 {
			t.Fatalf("claim: %v, %v; want a lease of one row", l, err)
		}
		return l
	}
	claim()
	if err := claim().Ack(callCtx()); err != nil {
		t.Fatalf("ack: %v", err)
	}

	const (
		claimM  = "/tqgo.v1.Meta/Claim"
		settleM = "/tqgo.v1.Meta/Settle"
	)
	m := scrapeMetrics(t, callCtx(), "http://"+maddr+"/metrics")
	for _, typ := range []string{"tq_server_calls_total counter", "tq_server_call_seconds histogram"} {
		if !m.types[typ] {
			t.Errorf("/metrics has no # TYPE %s", typ)
		}
	}
	claims := m.value("tq_server_calls_total", "method", claimM, "code", "OK")
	if claims < 2 {
		t.Errorf("tq_server_calls_total of %s OK is %v after 2 claims, want at least 2", claimM, claims)
	}
	if n := m.value("tq_server_calls_total", "method", settleM, "code", "OK"); n < 1 {
		t.Errorf("tq_server_calls_total of %s OK is %v after an ack, want at least 1", settleM, n)
	}
	if n := m.value("tq_server_call_seconds_count", "method", claimM); n < 2 {
		t.Errorf("tq_server_call_seconds_count of %s is %v after 2 claims, want at least 2", claimM, n)
	}
	var methods []string
	for _, s := range m.samples {
		if s.name == "tq_server_calls_total" {
			methods = append(methods, fmt.Sprintf("%s %s: %v", s.labels["method"], s.labels["code"], s.value))
		}
	}
	t.Logf("tq_server_calls_total after a put, 2 claims and an ack: %s", strings.Join(methods, "; "))
	// One more claim is counted.
	claim()
	m = scrapeMetrics(t, callCtx(), "http://"+maddr+"/metrics")
	if n := m.value("tq_server_calls_total", "method", claimM, "code", "OK"); n < claims+1 {
		t.Errorf("tq_server_calls_total of %s OK is %v after one more claim, want at least %v", claimM, n, claims+1)
	}

	// SIGTERM: the health service turns NOT_SERVING.
	if err := srv.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	recvWatch(healthpb.HealthCheckResponse_NOT_SERVING, "after SIGTERM")
	switch r, err := health.Check(callCtx(), &healthpb.HealthCheckRequest{}); {
	case err != nil:
		t.Logf("health Check after SIGTERM: %v", err)
	case r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING:
		t.Errorf("health Check after SIGTERM: %v, want an error or NOT_SERVING", r.GetStatus())
	}
	// The Watch stays open: the graceful stop cuts it off after
	// tqserve.GracefulFor rather than wait for its client.
	waitExit(t, srv, tqserve.GracefulFor+10*time.Second)
	if _, err := watch.Recv(); err == nil {
		t.Errorf("health Watch: a message after the server exited, want its end")
	}
}

// promSample is a sample of Prometheus's text format.
type promSample struct {
	name   string
	labels map[string]string
	value  float64
}

// promText is a scrape of Prometheus's text format: its samples, and
// its "# TYPE" lines as "NAME TYPE".
type promText struct {
	samples []promSample
	types   map[string]bool
}

// value is the value of the sample name whose labels include these
// (name, value pairs); -1 when there is none.
func (p promText) value(name string, labels ...string) float64 {
	for _, s := range p.samples {
		if s.name != name {
			continue
		}
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			match = match && s.labels[labels[i]] == labels[i+1]
		}
		if match {
			return s.value
		}
	}
	return -1
}

var (
	promLine  = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: \S+)?$`)
	promLabel = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?`)
)

// scrapeMetrics GETs url and parses it as Prometheus's text format,
// failing t if it is not.
func scrapeMetrics(t *testing.T, ctx context.Context, url string) promText {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("GET %s: %s, Content-Type %q; want 200 OK and Prometheus's text format", url, resp.Status, ct)
	}
	p := promText{types: map[string]bool{}}
	for line := range strings.Lines(string(body)) {
		line = strings.TrimSuffix(line, "\n")
		if typ, ok := strings.CutPrefix(line, "# TYPE "); ok {
			p.types[typ] = true
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := promLine.FindStringSubmatch(line)
		if f == nil {
			t.Fatalf("GET %s: a line not of Prometheus's text format: %q", url, line)
		}
		v, err := strconv.ParseFloat(f[3], 64)
		if err != nil {
			t.Fatalf("GET %s: a sample whose value is no number: %q", url, line)
		}
		s := promSample{name: f[1], labels: map[string]string{}, value: v}
		for _, l := range promLabel.FindAllStringSubmatch(f[2], -1) {
			s.labels[l[1]] = l[2]
		}
		p.samples = append(p.samples, s)
	}
	if len(p.samples) == 0 {
		t.Fatalf("GET %s: no samples", url)
	}
	return p
}
