package tq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
)

// ErrUnavailable is matched by the error of a call whose engine could not
// reach its server, or found it not serving (restarting, loading its
// data, failing over), for longer than the client's RetryPolicy allows.
// Unless the error also matches ErrOutcomeUnknown, the call applied
// nothing and may be made again.
var ErrUnavailable = backends.ErrUnavailable

// RetryPolicy says how a Client retries an engine request that failed
// without applying anything because the server was unavailable (an error
// matching ErrUnavailable and not ErrOutcomeUnknown): a server restarting,
// a connection refused, a network timeout. The request is made again,
// after a backoff, until it succeeds, fails another way, the call's
// context ends, the client is closed, or For has passed since its first
// failure; then the call returns the last error, saying how long it
// retried. A write whose outcome is unknown is never retried: its engine
// settles it, or the call returns ErrOutcomeUnknown.
//
// The retry is per engine request, not per call: a BatchPut whose cells
// were written and whose commit met a restart retries the commit only.
// Every retry is counted in CallEnd.Retries; the first of a run of
// failures, and the recovery, are logged at Warn and Info (see WithLogger).
type RetryPolicy struct {
	// Initial is the first backoff (0: DefaultRetry's, 10 ms). Each next
	// one doubles, up to Max (0: DefaultRetry's, 1 s). Each wait is drawn
	// at random between half the backoff and the whole, so that the
	// clients of a restarted server do not all come back at once.
	Initial, Max time.Duration
	// For is how long a request is retried after its first failure (0:
	// DefaultRetry's, one minute); a negative For turns retrying off.
	For time.Duration
}

// DefaultRetry is the RetryPolicy of a Client unless WithRetry says
// otherwise: a server restart of up to a minute is ridden out.
var DefaultRetry = RetryPolicy{Initial: 10 * time.Millisecond, Max: time.Second, For: time.Minute}

// NoRetry turns retrying off: a call fails on its engine's first failure.
var NoRetry = RetryPolicy{For: -1}

// WithRetry sets the client's RetryPolicy (default DefaultRetry). Zero
// fields take DefaultRetry's values; a negative Initial or Max, or Max
// below Initial, fails with ErrInvalid.
func WithRetry(p RetryPolicy) Option {
	return func(o *options) error {
		if p.Initial < 0 || p.Max < 0 {
			return fmt.Errorf("%w: retry backoff %v..%v is negative", ErrInvalid, p.Initial, p.Max)
		}
		if p.Initial == 0 {
			p.Initial = DefaultRetry.Initial
		}
		if p.Max == 0 {
			p.Max = max(DefaultRetry.Max, p.Initial)
		}
		if p.For == 0 {
			p.For = DefaultRetry.For
		}
		if p.Max < p.Initial {
			return fmt.Errorf("%w: retry backoff max %v below initial %v", ErrInvalid, p.Max, p.Initial)
		}
		o.retry = p
		return nil
	}
}

// retryable reports whether a request that failed with err applied
// nothing and may succeed if made again.
func retryable(err error) bool {
	return errors.Is(err, backends.ErrUnavailable) && !errors.Is(err, backends.ErrOutcomeUnknown)
}

// retrier makes engine requests again by a RetryPolicy.
type retrier struct {
	policy  RetryPolicy
	log     *slog.Logger
	closing context.Context // ends when the client's Close begins
	// failing is set while some request is failing, so that a run of
	// failures is logged once, and its recovery once.
	failing atomic.Bool
}

type retriesKey struct{}

// retries counts the retries of one traced call.
type retries struct{ n atomic.Int64 }

func (r *retrier) count(ctx context.Context) {
	if c, _ := ctx.Value(retriesKey{}).(*retries); c != nil {
		c.n.Add(1)
	}
}

// do makes the request f until it succeeds, fails in a way not worth
// retrying, or the policy gives up.
func do[T any](ctx context.Context, r *retrier, op string, f func() (T, error)) (T, error) {
	v, err := f()
	if err == nil || r == nil || r.policy.For < 0 || !retryable(err) || ctx.Err() != nil {
		return v, err
	}
	first := time.Now()
	backoff := r.policy.Initial
	attempts := 1
	if !r.failing.Swap(true) {
		r.log.Warn("tq: engine unavailable; retrying", "event", "unavailable", "op", op, "for", r.policy.For, "cause", err)
	}
	for {
		wait := backoff/2 + rand.N(backoff/2+1)
		if left := r.policy.For - time.Since(first); wait > left {
			wait = left
		}
		if wait <= 0 {
			r.failing.Store(false)
			r.log.Error("tq: engine unavailable; gave up", "event", "gave up", "op", op, "attempts", attempts, "after", time.Since(first).Round(time.Millisecond), "cause", err)
			return v, &retryError{op: op, attempts: attempts, elapsed: time.Since(first), err: err}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			r.failing.Store(false)
			// The caller's context's error, not the engine's: a call whose
			// context ended is not told to retry.
			return v, fmt.Errorf("%w (%s: the engine was unavailable: %v)", ctx.Err(), op, err)
		case <-r.closing.Done():
			t.Stop()
			r.failing.Store(false)
			return v, fmt.Errorf("%w (%s: the engine was unavailable: %v)", ErrClosed, op, err)
		case <-t.C:
		}
		r.count(ctx)
		attempts++
		v, err = f()
		if err == nil || !retryable(err) || ctx.Err() != nil {
			if r.failing.Swap(false) {
				r.log.Info("tq: engine reachable again", "op", op, "attempts", attempts, "after", time.Since(first).Round(time.Millisecond))
			}
			return v, err
		}
		backoff = min(2*backoff, r.policy.Max)
	}
}

// retryError is a request's last failure once the policy gave up on it.
type retryError struct {
	op       string
	attempts int
	elapsed  time.Duration
	err      error
}

func (e *retryError) Error() string {
	return fmt.Sprintf("%v (%s tried %d times over %v)", e.err, e.op, e.attempts, e.elapsed.Round(time.Millisecond))
}
func (e *retryError) Unwrap() error { return e.err }

// do0 is do for a request that returns only an error.
func do0(ctx context.Context, r *retrier, op string, f func() error) error {
	_, err := do(ctx, r, op, func() (struct{}, error) { return struct{}{}, f() })
	return err
}

// retryStore is an engine's Store whose requests are retried. Staged
// cells are written once: a failed Write may have published some, which
// the caller deletes.
type retryStore struct {
	backends.Store
	r *retrier
}

func (s retryStore) Write(ctx context.Context, cells []backends.Cell) error {
	for _, c := range cells {
		if c.Staged != nil {
			return s.Store.Write(ctx, cells)
		}
	}
	return do0(ctx, s.r, "write", func() error { return s.Store.Write(ctx, cells) })
}

func (s retryStore) Read(ctx context.Context, cells []backends.ReadCell) error {
	return do0(ctx, s.r, "read", func() error { return s.Store.Read(ctx, cells) })
}

func (s retryStore) Delete(ctx context.Context, cells []backends.Cell) error {
	return do0(ctx, s.r, "delete", func() error { return s.Store.Delete(ctx, cells) })
}

// retryMeta is a MetaStore whose requests are retried. Every request a
// MetaStore fails without applying may be made again: that is its outcome
// contract (see metadata.MetaStore).
type retryMeta struct {
	metadata.MetaStore
	r *retrier
}

func (m retryMeta) Claim(ctx context.Context, partition string, req metadata.ClaimRequest, pick metadata.Pick) (metadata.Claimed, error) {
	return do(ctx, m.r, "claim", func() (metadata.Claimed, error) { return m.MetaStore.Claim(ctx, partition, req, pick) })
}

// SettleClaim retries as Claim does: a settle and a claim that applied
// nothing may be made again (an ack may be sent twice).
func (m retryMeta) SettleClaim(ctx context.Context, partition string, sr metadata.SettleRequest, req metadata.ClaimRequest, pick metadata.Pick) (metadata.SettleResult, metadata.Claimed, error) {
	var settled metadata.SettleResult
	c, err := do(ctx, m.r, "claim", func() (metadata.Claimed, error) {
		var c metadata.Claimed
		var err error
		settled, c, err = metadata.SettleClaim(ctx, m.MetaStore, partition, sr, req, pick)
		return c, err
	})
	return settled, c, err
}

// WaitTake retries as Wait does: a lease a lost reply took is handed
// back where the claim replacing the registered one lands (see
// metadata.WaitTaker).
func (m retryMeta) WaitTake(ctx context.Context, partition string, mark metadata.Mark) (metadata.Claimed, bool, error) {
	type taken struct {
		c    metadata.Claimed
		took bool
	}
	v, err := do(ctx, m.r, "wait", func() (taken, error) {
		c, took, err := metadata.WaitTake(ctx, m.MetaStore, partition, mark)
		return taken{c, took}, err
	})
	return v.c, v.took, err
}

func (m retryMeta) Settle(ctx context.Context, partition string, req metadata.SettleRequest) (metadata.SettleResult, error) {
	return do(ctx, m.r, "settle", func() (metadata.SettleResult, error) { return m.MetaStore.Settle(ctx, partition, req) })
}

func (m retryMeta) View(ctx context.Context, partition string, tasks ...string) (metadata.View, error) {
	return do(ctx, m.r, "view", func() (metadata.View, error) { return m.MetaStore.View(ctx, partition, tasks...) })
}

func (m retryMeta) Summarize(ctx context.Context, partition string, req metadata.SummaryRequest) (metadata.Summary, error) {
	return do(ctx, m.r, "summary", func() (metadata.Summary, error) { return metadata.Summarize(ctx, m.MetaStore, partition, req) })
}

func (m retryMeta) Consumption(ctx context.Context, partition string, tasks ...string) (map[string][]metadata.Delivery, error) {
	return do(ctx, m.r, "consumption", func() (map[string][]metadata.Delivery, error) {
		return m.MetaStore.Consumption(ctx, partition, tasks...)
	})
}

func (m retryMeta) SetCapacity(ctx context.Context, partition string, c metadata.Capacity) ([]*metadata.Row, error) {
	return do(ctx, m.r, "capacity", func() ([]*metadata.Row, error) { return m.MetaStore.SetCapacity(ctx, partition, c) })
}

func (m retryMeta) Reset(ctx context.Context, partition, task string, indexes []uint64) error {
	return do0(ctx, m.r, "reset", func() error { return m.MetaStore.Reset(ctx, partition, task, indexes) })
}

func (m retryMeta) Wait(ctx context.Context, partition string, mark metadata.Mark) error {
	return do0(ctx, m.r, "wait", func() error { return m.MetaStore.Wait(ctx, partition, mark) })
}

func (m retryMeta) Prepare(ctx context.Context, partition string, keys, fields []string, sizes []int64) ([]metadata.Reservation, error) {
	return do(ctx, m.r, "prepare", func() ([]metadata.Reservation, error) {
		return m.MetaStore.Prepare(ctx, partition, keys, fields, sizes)
	})
}

func (m retryMeta) Commit(ctx context.Context, partition string, updates []metadata.RowUpdate) (metadata.CommitResult, error) {
	return do(ctx, m.r, "commit", func() (metadata.CommitResult, error) { return m.MetaStore.Commit(ctx, partition, updates) })
}

func (m retryMeta) Lookup(ctx context.Context, partition string, keys []string) ([]*metadata.Row, error) {
	return do(ctx, m.r, "lookup", func() ([]*metadata.Row, error) { return m.MetaStore.Lookup(ctx, partition, keys) })
}

func (m retryMeta) List(ctx context.Context, partition string) ([]*metadata.Row, error) {
	return do(ctx, m.r, "list", func() ([]*metadata.Row, error) { return m.MetaStore.List(ctx, partition) })
}

func (m retryMeta) Partitions(ctx context.Context) ([]string, error) {
	return do(ctx, m.r, "partitions", func() ([]string, error) { return m.MetaStore.Partitions(ctx) })
}

func (m retryMeta) Delete(ctx context.Context, partition string, keys []string) ([]*metadata.Row, error) {
	return do(ctx, m.r, "delete", func() ([]*metadata.Row, error) { return m.MetaStore.Delete(ctx, partition, keys) })
}

func (m retryMeta) DeletePartition(ctx context.Context, partition string) ([]*metadata.Row, error) {
	return do(ctx, m.r, "delete partition", func() ([]*metadata.Row, error) { return m.MetaStore.DeletePartition(ctx, partition) })
}

func (m retryMeta) Garbage(ctx context.Context, partition string, olderThan time.Duration) ([]metadata.Ref, error) {
	return do(ctx, m.r, "garbage", func() ([]metadata.Ref, error) { return m.MetaStore.Garbage(ctx, partition, olderThan) })
}

func (m retryMeta) Swept(ctx context.Context, partition string, refs []metadata.Ref) error {
	return do0(ctx, m.r, "swept", func() error { return m.MetaStore.Swept(ctx, partition, refs) })
}

func (m retryMeta) Abandon(ctx context.Context, partition string, refs []metadata.Ref) error {
	return do0(ctx, m.r, "abandon", func() error { return m.MetaStore.Abandon(ctx, partition, refs) })
}

func (m retryMeta) DeleteFields(ctx context.Context, partition string, keys, fields []string) ([]metadata.Ref, error) {
	return do(ctx, m.r, "delete fields", func() ([]metadata.Ref, error) { return m.MetaStore.DeleteFields(ctx, partition, keys, fields) })
}

// retryColocated is retryMeta over a Colocated store, which stays one.
type retryColocated struct {
	retryMeta
	co metadata.Colocated
}

func (m retryColocated) WriteCommit(ctx context.Context, partition string, cells []backends.Cell, updates []metadata.RowUpdate) (metadata.CommitResult, error) {
	return do(ctx, m.r, "commit", func() (metadata.CommitResult, error) { return m.co.WriteCommit(ctx, partition, cells, updates) })
}

func (m retryColocated) ReadRows(ctx context.Context, partition string, keys []string, plan func(rows []*metadata.Row) ([]backends.ReadCell, error)) ([]*metadata.Row, error) {
	return do(ctx, m.r, "read", func() ([]*metadata.Row, error) { return m.co.ReadRows(ctx, partition, keys, plan) })
}

// withRetry wraps the client's engine in r, keeping what it can do.
func withRetry(data backends.Store, meta metadata.MetaStore, r *retrier) (backends.Store, metadata.MetaStore) {
	if r.policy.For < 0 {
		return data, meta
	}
	rm := retryMeta{MetaStore: meta, r: r}
	if co, ok := meta.(metadata.Colocated); ok {
		return retryStore{Store: data, r: r}, retryColocated{retryMeta: rm, co: co}
	}
	return retryStore{Store: data, r: r}, rm
}

func (m retryMeta) Block(ctx context.Context, partition string, fields []string, n int) (metadata.IndexBlock, error) {
	return do(ctx, m.r, "block", func() (metadata.IndexBlock, error) { return metadata.Block(ctx, m.MetaStore, partition, fields, n) })
}

func (m retryMeta) PutNew(ctx context.Context, partition string, token, base uint64, keys, fields []string, sizes []int64, updates []metadata.RowUpdate) (metadata.CommitResult, error) {
	return do(ctx, m.r, "put new", func() (metadata.CommitResult, error) {
		return metadata.PutNew(ctx, m.MetaStore, partition, token, base, keys, fields, sizes, updates)
	})
}

func (m retryMeta) ReleaseBlock(ctx context.Context, partition string, b metadata.IndexBlock, written []uint64) error {
	return do0(ctx, m.r, "release block", func() error { return metadata.ReleaseBlock(ctx, m.MetaStore, partition, b, written) })
}
