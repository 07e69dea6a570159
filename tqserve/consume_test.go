package tqserve_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/tqgo/tqgo/tq"
	"github.com/tqgo/tqgo/tqserve"
	"github.com/tqgo/tqgo/tqserve/tqpb"
)

// settleOps records the ops of the Settle calls the server receives.
type settleOps struct {
	mu  sync.Mutex
	ops []tqpb.SettleRequest_Op
}

func (s *settleOps) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	if r, ok := req.(*tqpb.SettleRequest); ok {
		s.mu.Lock()
		s.ops = append(s.ops, r.GetOp())
		s.mu.Unlock()
	}
	return next(ctx, req)
}

func (s *settleOps) take() []tqpb.SettleRequest_Op {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.ops
	s.ops = nil
	return out
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// A Consume worker whose last lease's ack rode on its next Wait (which
// then waits for rows) sends no second ack when Consume stops, only the
// Wait's UNWAIT, and logs no settle failure (with ClearAcked a second ack
// would find the rows cleared).
func TestConsumeStopAcksNothingTwice(t *testing.T) {
	ops := &settleOps{}
	s := startServer(t, "memory://tqserve-consume-stop", tqserve.WithInterceptor(ops.intercept))
	var logs syncBuf
	c := loggedClient(t, s.URL, &logs)
	ctx := context.Background()
	const rows = 2
	task := clearAckedTask(t, c, rows)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		errc <- task.Consume(cctx, rows, func(context.Context, *tq.Lease) error { return nil })
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := task.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Consumed == rows {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rows not acked after 10s: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the worker's Wait waits now
	ops.take()
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Consume: %v", err)
	}
	var acks int
	for _, op := range ops.take() {
		if op == tqpb.SettleRequest_ACK {
			acks++
		}
	}
	if acks != 0 || strings.Contains(logs.String(), "settle failed") {
		t.Fatalf("stopping an idle Consume, whose last ack rode on its Wait, sent %d Settle ACK calls; logs:\n%s", acks, logs.String())
	}
}

// A handler that acks some of its lease's rows itself: Consume acks only
// the rest, so no ack comes back lost (with ClearAcked the rows the
// handler acked are cleared) and the lease keeps them acked.
func TestConsumeAcksOnlyWhatHandlerLeft(t *testing.T) {
	s := startServer(t, "memory://tqserve-consume-partial")
	var logs syncBuf
	c := loggedClient(t, s.URL, &logs)
	ctx := context.Background()
	const rows = 4
	task := clearAckedTask(t, c, rows)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	seen := 0
	err := task.Consume(cctx, 2, func(hctx context.Context, l *tq.Lease) error {
		if err := l.Ack(hctx, l.Keys()[0]); err != nil { // the first row now, the rest by Consume
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		seen += l.Len()
		if seen == rows {
			go func() { time.Sleep(300 * time.Millisecond); cancel() }() // the last lease's ack rides on a Wait
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "no longer held") || strings.Contains(logs.String(), "settle failed") {
		t.Fatalf("Consume re-acked the rows its handler acked itself:\n%s", logs.String())
	}
}

// loggedClient opens a client of url that logs to logs, closed at the
// test's end.
func loggedClient(t *testing.T, url string, logs *syncBuf) *tq.Client {
	t.Helper()
	c, err := tq.Open(t.Context(), url, tq.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
