package tq

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Quiet silences the client's log: nothing is logged, not even warnings.
// It is WithLogger(slog.New(slog.DiscardHandler)).
func Quiet() Option { return WithLogger(slog.New(slog.DiscardHandler)) }

// defaultLogger is a client's logger unless WithLogger or Quiet says
// otherwise: warnings and errors, through the handler of slog.Default()
// as it is when each record is logged (by default, the standard log
// package's, on stderr).
func defaultLogger() *slog.Logger { return slog.New(defaultHandler{}) }

// defaultHandler hands records at Warn and above to slog.Default()'s
// handler, looked up at each record, so a program that sets slog's
// default after opening a client still gets tq's warnings.
type defaultHandler struct {
	with []func(slog.Handler) slog.Handler // WithAttrs and WithGroup, in order
}

func (h defaultHandler) target() slog.Handler {
	t := slog.Default().Handler()
	for _, f := range h.with {
		t = f(t)
	}
	return t
}

func (h defaultHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && slog.Default().Handler().Enabled(ctx, l)
}

func (h defaultHandler) Handle(ctx context.Context, r slog.Record) error {
	return h.target().Handle(ctx, r)
}

func (h defaultHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return h.plus(func(t slog.Handler) slog.Handler { return t.WithAttrs(as) })
}

func (h defaultHandler) WithGroup(name string) slog.Handler {
	return h.plus(func(t slog.Handler) slog.Handler { return t.WithGroup(name) })
}

func (h defaultHandler) plus(f func(slog.Handler) slog.Handler) slog.Handler {
	return defaultHandler{with: append(h.with[:len(h.with):len(h.with)], f)}
}

// Limits of the client's event log.
const (
	// logEvery is how often one kind of event of one task (or partition)
	// is logged at most; the events passed over are counted in the next
	// record's "suppressed".
	logEvery = time.Second
	// logKeys is how many keys one record names at most; "rows" counts
	// them all.
	logKeys = 8
)

// eventLog logs a client's events (a retry, a lease lost, rows given up
// on) once per occurrence, rate-limited per event, partition and task so
// a hot loop cannot flood the log.
type eventLog struct {
	mu   sync.Mutex
	last map[eventKey]*eventSeen
}

type eventKey struct{ event, partition, task string }

type eventSeen struct {
	at         time.Time
	suppressed int
}

// event logs msg at level with the attributes partition, task, keys
// (the first logKeys of them), rows (how many keys), cause and args, or
// counts it as suppressed when the same event of the same partition and
// task was logged less than logEvery ago.
func (c *Client) event(level slog.Level, event, partition, task string, keys []string, cause error, msg string, args ...any) {
	lg := c.opts.logger
	ctx := context.Background()
	if !lg.Enabled(ctx, level) {
		return
	}
	e := &c.events
	now := time.Now()
	k := eventKey{event, partition, task}
	e.mu.Lock()
	if e.last == nil {
		e.last = map[eventKey]*eventSeen{}
	}
	s := e.last[k]
	if s != nil && now.Sub(s.at) < logEvery {
		s.suppressed++
		e.mu.Unlock()
		return
	}
	suppressed := 0
	if s == nil {
		if len(e.last) >= 1024 { // forget the quiet ones
			for k, s := range e.last {
				if now.Sub(s.at) >= logEvery && s.suppressed == 0 {
					delete(e.last, k)
				}
			}
		}
		s = &eventSeen{}
		e.last[k] = s
	}
	suppressed, s.suppressed, s.at = s.suppressed, 0, now
	e.mu.Unlock()

	attrs := make([]any, 0, 12+len(args))
	attrs = append(attrs, "event", event, "partition", partition)
	if task != "" {
		attrs = append(attrs, "task", task)
	}
	if keys != nil {
		attrs = append(attrs, "keys", keys[:min(len(keys), logKeys):min(len(keys), logKeys)], "rows", len(keys))
	}
	if cause != nil {
		attrs = append(attrs, "cause", cause)
	}
	attrs = append(attrs, args...)
	if suppressed > 0 {
		attrs = append(attrs, "suppressed", suppressed)
	}
	lg.Log(ctx, level, msg, attrs...)
}
