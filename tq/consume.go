package tq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"time"
)

// Handler processes the rows of one lease for Task.Consume. It returns nil
// when every row is done (Consume acknowledges them), an error to have
// them delivered again after a backoff (Consume nacks them, the error's
// text their reason: see Lease.NackErr), or an error wrapped by Permanent
// to give up on them (Consume drops them for the task: consumed, never
// delivered again, counted in TaskStatus.Dropped; the dropped rows keep
// the error as their reason). A panic is taken for an error, its stack
// logged, its value the reason. ctx ends when Consume's
// does, or with cause ErrLeaseLost when the lease could not be kept
// (another consumer may have the rows now: stop, and return). The handler
// may Ack rows itself as it finishes them; it should not Nack or Extend.
type Handler func(ctx context.Context, l *Lease) error

// ErrPermanent is matched by an error Permanent wrapped.
var ErrPermanent = errors.New("tq: permanent failure")

// Permanent marks a Handler's error as one that retrying cannot cure (a
// row that does not parse, say): Consume drops the lease's rows instead of
// returning them. It returns nil for a nil err.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string        { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error        { return e.err }
func (e *permanentError) Is(target error) bool { return target == ErrPermanent }

// ConsumeOption configures Task.Consume.
type ConsumeOption func(*consumeOpts) error

type consumeOpts struct {
	workers       int
	backoff, most time.Duration
	claim         []ClaimOption
}

// Workers runs k handlers at once, each on a lease of its own (default 1).
func Workers(k int) ConsumeOption {
	return func(o *consumeOpts) error {
		if k < 1 {
			return fmt.Errorf("%w: %d workers", ErrInvalid, k)
		}
		o.workers = k
		return nil
	}
}

// Backoff sets the delay before rows a handler failed on are delivered
// again: first after the row's first delivery, doubling with each further
// delivery, up to most (default 1 s, up to 1 min).
func Backoff(first, most time.Duration) ConsumeOption {
	return func(o *consumeOpts) error {
		if first <= 0 || most < first {
			return fmt.Errorf("%w: backoff %v up to %v", ErrInvalid, first, most)
		}
		o.backoff, o.most = first, most
		return nil
	}
}

// ClaimWith passes claim options (AtLeast, WithData) to every Wait of
// Consume.
func ClaimWith(opts ...ClaimOption) ConsumeOption {
	return func(o *consumeOpts) error {
		o.claim = append(o.claim, opts...)
		return nil
	}
}

// Consume waits for leases of up to n rows of the task and hands each to
// h, until ctx ends, then returns nil once every handler has returned and
// its lease is settled (see Handler for what its result does). A handler
// running when ctx ends gets ctx's end through its own context; what it
// returns still settles its rows (nil acknowledges them, Permanent drops
// them), but a failure gives them back at once, with no backoff (their
// reason: "consume stopped before its handler finished: " and the
// handler's error). While a
// handler runs, its lease is extended by the task's lease duration every
// third of it, so a handler slower than the lease keeps its rows; a
// consumer that dies stops extending, and its rows go to another once the
// lease ends. An empty lease (a rank's empty share) is acknowledged
// without calling h. A lease its handler finished while Consume goes on
// is acknowledged by the worker's next claim, in its request (Acking):
// through a tq server a worker's loop is one call per lease.
//
// Consume returns early with the first error that retrying will not cure:
// ErrClosed, a *StallError (see Stall), an engine unavailable past the
// client's RetryPolicy, an error settling a lease that is neither
// ErrLeaseLost nor ErrOutcomeUnknown (those are logged: the rows come
// back once the lease ends). Then its other workers stop, their handlers'
// contexts cancelled, and their leases are settled first.
func (t *Task) Consume(ctx context.Context, n int, h Handler, opts ...ConsumeOption) error {
	o := consumeOpts{workers: 1, backoff: time.Second, most: time.Minute}
	for _, opt := range opts {
		if opt == nil {
			return fmt.Errorf("%w: nil consume option", ErrInvalid)
		}
		if err := opt(&o); err != nil {
			return err
		}
	}
	if h == nil || n < 1 {
		return fmt.Errorf("%w: consume %d rows with handler %v", ErrInvalid, n, h != nil)
	}
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	fail := func(err error) {
		once.Do(func() { first = err; stop(err) })
	}
	for range o.workers {
		wg.Go(func() {
			// A lease its handler finished: its ack rides on the worker's
			// next Wait (Acking), one request where the engine allows;
			// acked alone if the worker stops first.
			var done *Lease
			defer func() {
				if done != nil {
					if err := t.ackDone(ctx, done); err != nil {
						fail(err)
					}
				}
			}()
			for ctx.Err() == nil {
				opts := o.claim
				if done != nil {
					opts = append(slices.Clip(o.claim), Acking(done))
				}
				l, err := t.Wait(ctx, n, opts...)
				if done != nil && done.settledByAck() {
					done = nil // its ack rode on the Wait's first claim
				}
				switch {
				case err != nil && ctx.Err() != nil:
					return
				case errors.Is(err, ErrOutcomeUnknown):
					// Rows it may have leased come back when the lease
					// ends; the ack it carried goes again with the next
					// (acking a row twice is no error).
					t.c.event(slog.LevelWarn, "claim outcome unknown", t.partition, t.name, nil, err,
						"tq: consume: a claim's outcome is unknown; rows it may have leased come back when the lease ends")
					continue
				case err != nil:
					fail(err)
					return
				}
				done = nil
				if again := maxDeliveries(l); again > 1 {
					t.c.event(slog.LevelWarn, "redelivered", t.partition, t.name, l.Keys(), nil,
						"tq: consume: rows delivered again", "deliveries", again)
				}
				if done, err = t.handle(ctx, l, h, &o); err != nil {
					fail(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// handle runs h on l, extending l while it runs, and settles l by h's
// result (at once, with no backoff, when Consume is stopping or the lease
// was lost), but for an ack while Consume goes on: it returns l, whose
// ack rides on the worker's next Wait. It returns an error only for a
// failure Consume should stop on.
func (t *Task) handle(ctx context.Context, l *Lease, h Handler, o *consumeOpts) (ack *Lease, _ error) {
	if l.Len() == 0 {
		return nil, l.Ack(ctx)
	}
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	var keep sync.WaitGroup
	keep.Go(func() { t.keepLease(hctx, l, done, cancel) })
	err := t.runHandler(hctx, l, h)
	close(done)
	keep.Wait()
	// Settle even when ctx ended: the rows go back at once instead of
	// when the lease ends.
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), t.lease)
	defer scancel()
	// The rows the handler did not acknowledge itself (nil: every row).
	keys, all := l.unacked()
	if all {
		keys = nil
	} else if len(keys) == 0 {
		return nil, nil
	}
	var serr error
	switch {
	case errors.Is(context.Cause(hctx), ErrLeaseLost):
		t.c.event(slog.LevelWarn, "lease lost", t.partition, t.name, l.Keys(), context.Cause(hctx),
			"tq: consume: lease lost while the handler ran; its rows are another's now (a handler slower than the lease the engine could not extend?)")
		// Rows the lease may still hold go back at once; those it lost
		// are reported lost, and are another's.
		serr = l.NackErr(sctx, 0, context.Cause(hctx), keys...)
	case err == nil && ctx.Err() == nil && all:
		return l, nil // acked by the next Wait
	case err == nil:
		// Done, though Consume is stopping: acknowledged (sctx outlives
		// ctx, bounded by the lease).
		serr = l.Ack(sctx, keys...)
	case errors.Is(err, ErrPermanent):
		t.c.event(slog.LevelWarn, "gave up", t.partition, t.name, l.Keys(), err,
			"tq: consume: handler failed for good (Permanent); dropping its rows")
		// Nacked with a delay no other consumer claims through, then
		// dropped: should the drop fail, the rows come back after it.
		if serr = l.NackErr(sctx, max(t.lease, time.Minute), err, keys...); serr == nil {
			if all {
				keys = l.Keys()
			}
			serr = t.Drop(sctx, keys...)
		}
	case ctx.Err() != nil:
		// Stopping, the handler not done: the rows go back at once, for
		// another consumer, saying so.
		serr = l.NackErr(sctx, 0, fmt.Errorf("consume stopped before its handler finished: %w", err), keys...)
	default:
		d := o.backoff
		for i := 1; i < maxDeliveries(l) && d < o.most; i++ {
			d *= 2
		}
		d = min(d, o.most)
		if t.maxDel > 0 && maxDeliveries(l) >= t.maxDel {
			t.c.event(slog.LevelWarn, "dead", t.partition, t.name, l.Keys(), err,
				"tq: consume: handler failed on the rows' last delivery; they are dead (see Task.Dead, Task.Retry)",
				"deliveries", maxDeliveries(l), "max_deliveries", t.maxDel)
		} else {
			t.c.event(slog.LevelWarn, "retry", t.partition, t.name, l.Keys(), err,
				"tq: consume: handler failed; its rows are delivered again after a backoff",
				"deliveries", maxDeliveries(l), "backoff", d)
		}
		serr = l.NackErr(sctx, d, err, keys...)
	}
	return nil, t.settled(l, serr)
}

// settled returns serr, the error settling l, if Consume should stop on
// it; it logs one that Consume goes on after (the rows come back when the
// lease ends).
func (t *Task) settled(l *Lease, serr error) error {
	if serr == nil || errors.Is(serr, ErrLeaseLost) || errors.Is(serr, ErrOutcomeUnknown) {
		if serr != nil {
			t.c.event(slog.LevelWarn, "settle failed", t.partition, t.name, l.Keys(), serr,
				"tq: consume: settling a lease failed; its rows come back when it ends")
		}
		return nil
	}
	return serr
}

// ackDone acknowledges l, a lease whose handler finished, when the worker
// stops before a Wait took its ack: bounded by the lease, even if ctx
// ended. Errors as settled's.
func (t *Task) ackDone(ctx context.Context, l *Lease) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.lease)
	defer cancel()
	return t.settled(l, l.Ack(sctx))
}

func maxDeliveries(l *Lease) int {
	m := 1
	for _, d := range l.Deliveries {
		m = max(m, d)
	}
	return m
}

// runHandler calls h, taking a panic for an error.
func (t *Task) runHandler(ctx context.Context, l *Lease, h Handler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			t.c.event(slog.LevelError, "panic", t.partition, t.name, l.Keys(), fmt.Errorf("%v", p),
				"tq: consume: handler panicked", "stack", string(debug.Stack()))
			err = fmt.Errorf("tq: handler panicked: %v", p)
		}
	}()
	return h(ctx, l)
}

// keepLease extends l by the task's lease every third of it until done
// closes. When the lease is lost, or cannot be extended before it ends,
// it cancels the handler's context with ErrLeaseLost.
func (t *Task) keepLease(ctx context.Context, l *Lease, done <-chan struct{}, cancel context.CancelCauseFunc) {
	every := max(t.lease/3, time.Millisecond)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		keys, all := l.unacked()
		if len(keys) == 0 {
			return // the handler acknowledged every row
		}
		if all {
			keys = nil // the whole lease, in the fewest bytes
		}
		// An extend that cannot get through before the lease ends is
		// too late: another consumer may have the rows by then.
		ectx, ecancel := context.WithDeadline(ctx, l.Until())
		err := l.Extend(ectx, t.lease, keys...)
		ecancel()
		var lost *LeaseLostError
		if errors.As(err, &lost) && l.allAcked(lost.Keys) {
			err = nil // rows the handler acknowledged meanwhile, not lost
		}
		switch {
		case err == nil:
		case errors.Is(err, ErrLeaseLost):
			cancel(err)
			return
		case ctx.Err() != nil:
			return
		case time.Now().After(l.Until()):
			cancel(fmt.Errorf("%w: could not extend it before it ended: %w", ErrLeaseLost, err))
			return
		default:
			t.c.event(slog.LevelWarn, "extend failed", t.partition, t.name, l.Keys(), err,
				"tq: consume: extending a lease failed; trying again before it ends")
		}
	}
}
