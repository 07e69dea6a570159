package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/tqgo/tqgo/backends/file"
	"github.com/tqgo/tqgo/tqserve"
)

// defineServe: tq serve -listen ADDR -engine URL. -timeout bounds opening
// the engine. It serves until
// SIGTERM or SIGINT, then stops gracefully: calls in flight finish, and
// Waits end early (clients look again).
func defineServe(fs *flag.FlagSet) action {
	listen := fs.String("listen", "127.0.0.1:7070", "`ADDR` to serve gRPC on (HOST:PORT; :PORT for every interface)")
	engine := fs.String("engine", "", "the engine `URL` to serve (redis://…, redis+cluster://…, file:///dir, memory://; default -url, $TQ_URL)")
	token := fs.String("token", os.Getenv("TQ_TOKEN"), "bearer `TOKEN` every call must carry (default $TQ_TOKEN; empty: none)")
	cert := fs.String("tls-cert", "", "TLS certificate `FILE` (PEM); with -tls-key, serve over TLS")
	key := fs.String("tls-key", "", "TLS key `FILE` (PEM)")
	cells := fs.String("cells-url", "", "the engine `URL` clients reach cells at themselves (default: -engine for redis, none for file and memory, whose cells the server carries)")
	advertise := fs.String("advertise", "", "the `HOST:PORT` clients reach this server at, its own (not a load balancer's), which it gives callers it sends to another server (default: -listen, its host name for every interface)")
	ownership := fs.Duration("ownership", tqserve.DefaultOwnership, "how long this server's ownership of a partition lasts unless renewed: how long a killed server's partitions go unserved (servers sharing a Redis)")
	reclaim := fs.Duration("reclaim-after", tqserve.DefaultReclaimAfter, "abort puts left uncommitted this long (their client died) and delete the cells nothing references, in the partitions this server serves; longer than the longest put (0: never)")
	standby := fs.Bool("standby", true, "file:// held by another server: wait for it and take over when it stops or dies")
	metrics := fs.String("metrics", "", "`ADDR` to serve Prometheus metrics on at /metrics (empty: none)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the serving to `FILE` (go tool pprof), complete once the server stops")
	return func(ctx context.Context, s *session, _ []string) error {
		if *engine == "" {
			*engine = s.url
		}
		if *engine == "" {
			return usagef("serve: no -engine URL (nor -url, $%s)", urlEnv)
		}
		if (*cert == "") != (*key == "") {
			return usagef("serve: -tls-cert and -tls-key go together")
		}
		// Before the engine opens: opening replays its partitions' logs.
		gc := tuneGC(os.Getenv, "")
		opts := []tqserve.ServerOption{tqserve.WithOwnership(*ownership), tqserve.WithReclaim(*reclaim)}
		if *advertise != "" {
			opts = append(opts, tqserve.WithAdvertise(*advertise))
		}
		if *token != "" {
			opts = append(opts, tqserve.WithToken(*token))
		}
		if *cert != "" {
			opts = append(opts, tqserve.WithTLS(*cert, *key))
		}
		if *cells != "" {
			opts = append(opts, tqserve.WithCellsURL(*cells))
		}
		reg := prometheus.NewRegistry()
		if *metrics != "" {
			m := newServeMetrics()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), m.calls, m.seconds)
			opts = append(opts, tqserve.WithInterceptor(m.intercept))
		}
		ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
		defer stop()
		// -timeout bounds opening the engine; serving lasts until a signal.
		octx, cancel := ctx, context.CancelFunc(func() {})
		if s.timeout > 0 {
			octx, cancel = context.WithTimeout(ctx, s.timeout)
		}
		srv, err := tqserve.NewServer(octx, *engine, opts...)
		timedOut := errors.Is(octx.Err(), context.DeadlineExceeded)
		cancel()
		for said := false; err != nil && *standby && errors.Is(err, file.ErrLocked); said = true {
			// Another server holds the directory: serve once it is gone
			// (the kernel releases a dead process's lock). Clients that
			// name both servers reach whichever listens.
			if !said {
				fmt.Fprintf(s.stderr, "tq serve: standing by: %v\n", err)
			}
			if werr := sleepCtx(ctx, time.Second); werr != nil {
				return nil // stopped while standing by
			}
			srv, err = tqserve.NewServer(ctx, *engine, opts...)
		}
		if err != nil {
			if timedOut {
				return fmt.Errorf("timed out after %v (-timeout) opening the engine: %w", s.timeout, err)
			}
			return err
		}
		lis, err := net.Listen("tcp", *listen)
		if err != nil {
			_ = srv.Close()
			return err
		}
		var hs *http.Server
		if *metrics != "" {
			ml, err := net.Listen("tcp", *metrics)
			if err != nil {
				_ = srv.Close()
				_ = lis.Close()
				return err
			}
			mux := http.NewServeMux()
			mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
			hs = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
			go func() { _ = hs.Serve(ml) }()
			fmt.Fprintf(s.stderr, "tq serve: metrics on http://%s/metrics\n", ml.Addr())
		}
		if *cpuprofile != "" {
			stopProfile, err := startCPUProfile(*cpuprofile)
			if err != nil {
				if hs != nil {
					_ = hs.Close()
				}
				_ = srv.Close()
				_ = lis.Close()
				return err
			}
			defer stopProfile()
		}
		fmt.Fprintf(s.stderr, "tq serve: garbage collector: %s\n", gc)
		fmt.Fprintf(s.stderr, "tq serve: serving %s on %s (pid %d)\n", s.redact(*engine), lis.Addr(), os.Getpid())
		done := make(chan error, 1)
		go func() { done <- srv.Serve(lis) }()
		select {
		case err = <-done:
		case <-ctx.Done():
			// A second SIGTERM or interrupt kills the process at once:
			// Reset, not stop, which would leave main's NotifyContext
			// catching os.Interrupt.
			stop()
			signal.Reset(syscall.SIGTERM, os.Interrupt)
			fmt.Fprintf(s.stderr, "tq serve: stopping: letting calls in flight finish (up to %v; a second signal kills)\n", tqserve.GracefulFor)
			srv.GracefulStop()
			err = <-done
		}
		if hs != nil {
			_ = hs.Close()
		}
		return errors.Join(err, srv.Close())
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// startCPUProfile profiles this process's CPU into path until the
// returned stop.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("-cpuprofile %s: %w", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}

// serveMetrics count the server's calls by method and outcome.
type serveMetrics struct {
	calls   *prometheus.CounterVec
	seconds *prometheus.HistogramVec
}

func newServeMetrics() *serveMetrics {
	return &serveMetrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tq_server_calls_total", Help: "Calls the tq server answered, by method and gRPC status code.",
		}, []string{"method", "code"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tq_server_call_seconds", Help: "Time the tq server took to answer a call, by method (Wait: how long it waited).",
			Buckets: prometheus.ExponentialBuckets(50e-6, 4, 10),
		}, []string{"method"}),
	}
}

func (m *serveMetrics) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := next(ctx, req)
	m.seconds.WithLabelValues(info.FullMethod).Observe(time.Since(start).Seconds())
	m.calls.WithLabelValues(info.FullMethod, grpcstatus.Code(err).String()).Inc()
	return resp, err
}
