package tq

import (
	"context"
	"log/slog"
	"time"

	"github.com/tqgo/tqgo/backends"
)

// Tracer observes a Client's calls, in the manner of pgx's tracers:
// TraceStart runs as a call begins and returns the context the call goes on
// with (one carrying a span, say), and TraceEnd runs as it ends, with that
// context. Both run on the caller's goroutine and must be safe for
// concurrent use; a call waits for them, so they should be quick. Set one
// with WithTracer.
type Tracer interface {
	TraceStart(ctx context.Context, c *Client, call Call) context.Context
	TraceEnd(ctx context.Context, c *Client, call Call, end CallEnd)
}

// Call is what a traced call was asked to do.
type Call struct {
	// Op is the method: "BatchPut", "BatchGet", "BatchGetInto",
	// "BatchGetByMeta", "List", "Lookup", "Partitions", "Clear",
	// "ClearPartition", "ClearFields", "Reclaim", "SetCapacity" (Put is a
	// BatchPut of one row); for consumption "Claim", "Wait" (Keys is n),
	// "Ack", "Nack", "Extend" (Keys is the keys named, 0 for the whole
	// lease), "Status", "TaskStatus", "Dead", "Retry", "Drop",
	// "ResetConsumption", "Stragglers"; "Members", "Pace", "AwaitInsert",
	// "AwaitSample".
	Op        string
	Partition string // "" for Partitions
	Keys      int    // keys the call names (0 for a call of a whole partition)
}

// CallEnd is what a traced call did.
type CallEnd struct {
	Rows  int   // rows written, read, listed, looked up or cleared
	Cells int   // cells written, read or deleted
	Bytes int64 // bytes of the cells written or read
	// RoundTrips counts the requests to the engine's servers the call
	// waited on, each engine request once (several in flight at once
	// count one each), as the engine reports them (see
	// backends.CountRoundTrips): 0 for an in-process engine.
	RoundTrips int64
	// Retries counts the engine requests the call made again after its
	// server was unavailable (see RetryPolicy).
	Retries  int64
	Duration time.Duration
	Err      error // what the call returned
}

// callTrace is one traced call; nil when the client has no tracer, and
// then every method is a no-op.
type callTrace struct {
	c     *Client
	ctx   context.Context
	call  Call
	start time.Time
	rt    backends.RoundTrips
	re    retries
	end   CallEnd
}

// trace starts tracing a call; the caller ends it with done.
func (c *Client) trace(ctx context.Context, op, partition string, keys int) (context.Context, *callTrace) {
	t := c.opts.tracer
	if t == nil {
		return ctx, nil
	}
	tr := &callTrace{c: c, call: Call{Op: op, Partition: partition, Keys: keys}}
	ctx = context.WithValue(tr.rt.Attach(t.TraceStart(ctx, c, tr.call)), retriesKey{}, &tr.re)
	tr.ctx, tr.start = ctx, time.Now()
	return ctx, tr
}

// add counts rows, cells and bytes the call moved.
func (tr *callTrace) add(rows, cells int, bytes int64) {
	if tr != nil {
		tr.end.Rows += rows
		tr.end.Cells += cells
		tr.end.Bytes += bytes
	}
}

// done ends the call with its error.
func (tr *callTrace) done(err error) {
	if tr == nil {
		return
	}
	tr.end.Duration = time.Since(tr.start)
	tr.end.RoundTrips = tr.rt.Load()
	tr.end.Retries = tr.re.n.Load()
	tr.end.Err = err
	tr.c.opts.tracer.TraceEnd(tr.ctx, tr.c, tr.call, tr.end)
}

// SlogTracer is a Tracer that logs every call's end to a slog.Logger:
// at Level, or at Warn when the call failed.
type SlogTracer struct {
	Logger *slog.Logger
	Level  slog.Level
}

// TraceStart implements Tracer.
func (SlogTracer) TraceStart(ctx context.Context, _ *Client, _ Call) context.Context { return ctx }

// TraceEnd implements Tracer.
func (s SlogTracer) TraceEnd(ctx context.Context, _ *Client, call Call, end CallEnd) {
	level := s.Level
	if end.Err != nil {
		level = slog.LevelWarn
	}
	if !s.Logger.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("op", call.Op), slog.String("partition", call.Partition),
		slog.Int("rows", end.Rows), slog.Int("cells", end.Cells), slog.Int64("bytes", end.Bytes),
		slog.Int64("round_trips", end.RoundTrips), slog.Duration("duration", end.Duration),
	}
	if end.Retries > 0 {
		attrs = append(attrs, slog.Int64("retries", end.Retries))
	}
	if end.Err != nil {
		attrs = append(attrs, slog.Any("err", end.Err))
	}
	s.Logger.LogAttrs(ctx, level, "tq call", attrs...)
}

// MultiTracer is a Tracer that passes every call to each of its tracers in
// order (TraceEnd in the same order, each with the context its own
// TraceStart returned): a SlogTracer and a metrics collector together.
type MultiTracer []Tracer

type multiKey struct{}

// TraceStart implements Tracer.
func (m MultiTracer) TraceStart(ctx context.Context, c *Client, call Call) context.Context {
	ctxs := make([]context.Context, len(m))
	for i, t := range m {
		ctxs[i] = t.TraceStart(ctx, c, call)
	}
	return context.WithValue(ctx, multiKey{}, ctxs)
}

// TraceEnd implements Tracer.
func (m MultiTracer) TraceEnd(ctx context.Context, c *Client, call Call, end CallEnd) {
	ctxs, _ := ctx.Value(multiKey{}).([]context.Context)
	for i, t := range m {
		tctx := ctx
		if i < len(ctxs) {
			tctx = ctxs[i]
		}
		t.TraceEnd(tctx, c, call, end)
	}
}
