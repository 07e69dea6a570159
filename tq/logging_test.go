package tq_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tqgo/tqgo/tq"
)

// recorder is a slog.Handler that keeps every record, with its
// attributes as strings.
type recorder struct {
	mu   sync.Mutex
	recs []logRec
}

type logRec struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *recorder) WithGroup(string) slog.Handler            { return r }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	l := logRec{level: rec.Level, msg: rec.Message, attrs: map[string]string{}}
	rec.Attrs(func(a slog.Attr) bool {
		l.attrs[a.Key] = fmt.Sprint(a.Value.Any())
		return true
	})
	r.mu.Lock()
	r.recs = append(r.recs, l)
	r.mu.Unlock()
	return nil
}

// events returns the records of event.
func (r *recorder) events(event string) []logRec {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []logRec
	for _, l := range r.recs {
		if l.attrs["event"] == event {
			out = append(out, l)
		}
	}
	return out
}

func (r *recorder) all() []logRec {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]logRec(nil), r.recs...)
}

// setSlogDefault makes h slog's default for the test.
func setSlogDefault(t *testing.T, h slog.Handler) {
	old := slog.Default()
	slog.SetDefault(slog.New(h))
	t.Cleanup(func() { slog.SetDefault(old) })
}

// provokeEvents consumes, on c's partition "p", task "work": a row its
// handler fails on once ("fail-0": a retry, then a redelivery), one it
// fails for good ("bad-0"), one it fails on its last delivery ("dead-0",
// task "strict" with MaxDeliveries(1)), and one whose lease is lost
// while the handler runs ("lost-0", task "reset").
func provokeEvents(t *testing.T, c *tq.Client) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	putA(t, c, "p", []string{"ok-0", "fail-0", "bad-0"})
	putA(t, c, "q", []string{"dead-0"})
	putA(t, c, "r", []string{"lost-0"})
	work := task(t, c, "p", "work")
	strict := task(t, c, "q", "strict", tq.MaxDeliveries(1))
	reset := task(t, c, "r", "reset", tq.LeaseFor(90*time.Millisecond))
	var resetOnce atomic.Bool
	h := func(ctx context.Context, l *tq.Lease) error {
		switch k := l.Keys()[0]; {
		case k == "fail-0" && l.Deliveries[0] == 1:
			return errors.New("transient trouble")
		case k == "bad-0":
			return tq.Permanent(errors.New("does not parse"))
		case k == "dead-0":
			return errors.New("always fails")
		case k == "lost-0" && !resetOnce.Swap(true):
			if err := c.ResetConsumption(ctx, "r", "reset"); err != nil {
				return err
			}
			<-ctx.Done()
			return context.Cause(ctx)
		}
		return nil
	}
	var wg sync.WaitGroup
	for _, tk := range []*tq.Task{work, strict, reset} {
		wg.Go(func() {
			if err := tk.Consume(ctx, 1, h, tq.Backoff(20*time.Millisecond, 20*time.Millisecond)); err != nil {
				t.Errorf("Consume: %v", err)
			}
		})
	}
	waitStatus(t, work, func(s tq.TaskStatus) bool { return s.Acked == 2 && s.Dropped == 1 })
	waitStatus(t, strict, func(s tq.TaskStatus) bool { return s.Dead == 1 })
	waitStatus(t, reset, func(s tq.TaskStatus) bool { return s.Acked == 1 })
	cancel()
	wg.Wait()
}

// Each consumption event is logged once, at Warn, with its partition,
// task, keys and cause.
func TestLogEventsOnceWithSubject(t *testing.T) {
	rec := &recorder{}
	c, err := tq.Open(t.Context(), "memory://", tq.WithLogger(slog.New(rec)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	provokeEvents(t, c)
	for _, want := range []struct{ event, partition, task, key, cause string }{
		{"retry", "p", "work", "fail-0", "transient trouble"},
		{"redelivered", "p", "work", "fail-0", ""},
		{"gave up", "p", "work", "bad-0", "does not parse"},
		{"dead", "q", "strict", "dead-0", "always fails"},
		{"lease lost", "r", "reset", "lost-0", "lost"},
	} {
		got := rec.events(want.event)
		if len(got) != 1 {
			t.Errorf("event %q logged %d times, want once: %+v", want.event, len(got), got)
			continue
		}
		l := got[0]
		if l.level != slog.LevelWarn {
			t.Errorf("event %q logged at %v, want Warn", want.event, l.level)
		}
		if l.attrs["partition"] != want.partition || l.attrs["task"] != want.task || l.attrs["keys"] != "["+want.key+"]" || l.attrs["rows"] != "1" {
			t.Errorf("event %q: attributes %v, want partition %q, task %q, keys [%s], rows 1", want.event, l.attrs, want.partition, want.task, want.key)
		}
		if !strings.Contains(l.attrs["cause"], want.cause) || (want.cause != "") != (l.attrs["cause"] != "") {
			t.Errorf("event %q: cause %q, want one saying %q", want.event, l.attrs["cause"], want.cause)
		}
	}
}

// By default a client logs warnings through slog.Default()'s handler,
// and nothing below Warn.
func TestLogDefaultIsSlogDefaultAtWarn(t *testing.T) {
	rec := &recorder{}
	setSlogDefault(t, rec)
	c, err := tq.Open(t.Context(), "memory://")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	provokeEvents(t, c)
	if n := len(rec.events("retry")); n != 1 {
		t.Errorf("the default logger logged %d retries through slog's default, want 1", n)
	}
	for _, l := range rec.all() {
		if l.level < slog.LevelWarn {
			t.Errorf("the default logger logged below Warn: %v %q", l.level, l.msg)
		}
	}
}

// Quiet logs nothing, not even through slog's default.
func TestLogQuiet(t *testing.T) {
	rec := &recorder{}
	setSlogDefault(t, rec)
	c, err := tq.Open(t.Context(), "memory://", tq.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	provokeEvents(t, c)
	if all := rec.all(); len(all) != 0 {
		t.Errorf("a quiet client logged %d records: %+v", len(all), all)
	}
}

// A handler failing in a hot loop is logged at most once a second, the
// records passed over counted in the next one's "suppressed".
func TestLogRateLimited(t *testing.T) {
	rec := &recorder{}
	c, err := tq.Open(t.Context(), "memory://", tq.WithLogger(slog.New(rec)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	putA(t, c, "p", []string{"hot"})
	tk := task(t, c, "p", "work")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var calls atomic.Int64
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		done <- tk.Consume(ctx, 1, func(context.Context, *tq.Lease) error {
			if calls.Add(1) == 50 {
				cancel()
			}
			return errors.New("hot failure")
		}, tq.Backoff(time.Microsecond, time.Microsecond))
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	n := len(rec.events("retry"))
	if limit := int(took/time.Second) + 1; n < 1 || n > limit {
		t.Errorf("%d failures over %v logged %d times, want 1..%d", calls.Load(), took, n, limit)
	}
}
