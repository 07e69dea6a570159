package tq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tqgo/tqgo/backends/metadata"
)

// Consumption, TransferQueue's controller done as a queue. A Task is one
// consumer's handle on a (partition, task): its claims lease rows that are
// ready for it (every field it names committed, not acknowledged by the
// task, not leased to another of its consumers) until a deadline, and
// the consumer acknowledges what it processed. A lease that ends without
// an ack (a consumer that died, a Nack) makes its rows ready again, with
// their delivery count raised: delivery is at least once, and a row whose
// Deliveries is above 1 may have been processed before.

// DefaultLease is how long a claim's lease lasts unless the task says.
const DefaultLease = time.Minute

// ErrLeaseLost: an Ack, Nack or Extend named rows the lease no longer
// holds (its lease expired and the row was delivered again, or it was
// reset or cleared). The other rows of the call were settled. A
// *LeaseLostError names the rows.
var ErrLeaseLost = errors.New("tq: lease lost")

// LeaseLostError names the rows a settle found its lease no longer holds.
type LeaseLostError struct {
	Op        string // "ack", "nack", "extend", "retry", "drop"
	Partition string
	Task      string
	Keys      []string
}

func (e *LeaseLostError) Error() string {
	return fmt.Sprintf("tq: %s on partition %q task %q: lease lost on %d rows (%q...): the lease ended or was reset or cleared, and the rows are another consumer's (a handler slower than its lease: extend it, or LeaseFor a longer one)",
		e.Op, e.Partition, e.Task, len(e.Keys), e.Keys[0])
}
func (e *LeaseLostError) Is(target error) bool { return target == ErrLeaseLost }

// Task is one consumer's handle on the consumption of a partition by a
// named task. Many Tasks (goroutines, processes) may consume one task:
// each row is leased to one at a time. A Task is safe for concurrent use.
type Task struct {
	c         *Client
	partition string
	name      string
	fields    []string
	lease     time.Duration
	maxDel    int
	sampler   Sampler
	ranks     *metadata.Batch
	lengthTag string
	stale     *staleness
	stall     *stallOpts
	budget    *tokenBudget
	deadline  *groupDeadline
	holder    string
	version   atomic.Int64
	stats     taskStats
}

type staleness struct {
	tag  string
	k    int64
	drop bool
}

type taskStats struct {
	skipped, dropped atomic.Int64
}

// TaskOption configures a Task.
type TaskOption func(*Task) error

// MinLease is the shortest lease of LeaseFor and Extend.
const MinLease = time.Millisecond

// LeaseFor sets how long a claim's lease lasts (default DefaultLease). A d
// below MinLease fails with ErrInvalid.
func LeaseFor(d time.Duration) TaskOption {
	return func(t *Task) error {
		if d < MinLease {
			return fmt.Errorf("%w: lease %v, shorter than %v", ErrInvalid, d, MinLease)
		}
		t.lease = d
		return nil
	}
}

// MaxDeliveries makes a row dead once it was delivered n times without an
// ack (default 0: never). Dead rows are never delivered again until Retry.
// n outside 1..MaxDeliveryLimit fails with ErrInvalid.
func MaxDeliveries(n int) TaskOption {
	return func(t *Task) error {
		if n < 1 || n > MaxDeliveryLimit {
			return fmt.Errorf("%w: max deliveries %d outside 1..%d", ErrInvalid, n, MaxDeliveryLimit)
		}
		t.maxDel = n
		return nil
	}
}

// WithSampler sets the task's sampler (default Sequential).
func WithSampler(s Sampler) TaskOption {
	return func(t *Task) error {
		if s == nil {
			return fmt.Errorf("%w: nil sampler", ErrInvalid)
		}
		t.sampler = s
		return nil
	}
}

// WithGroups makes the task claim only complete groups of size rows (see
// Groups): shorthand for WithSampler(Groups(by, size)), checked: size
// outside 1..MaxGroupSize fails with ErrInvalid.
func WithGroups(by GroupBy, size int) TaskOption {
	return func(t *Task) error {
		if !by.valid() || by.sep == "" && by.tag == "" {
			return fmt.Errorf("%w: groups by nothing", ErrInvalid)
		}
		if size < 1 || size > MaxGroupSize {
			return fmt.Errorf("%w: group size %d outside 1..%d", ErrInvalid, size, MaxGroupSize)
		}
		t.sampler = Groups(by, size)
		return nil
	}
}

// Ranks makes the Task rank rank of ranks data-parallel consumers of the
// task: each claim of a rank receives its share of a batch that all ranks
// share (the first rank to claim selects it with the task's sampler), the
// shares disjoint and covering the batch, units (groups) kept whole, and
// balanced by Karmarkar-Karp's largest differencing over the sum of each
// unit's lengthTag (its row count when lengthTag is ""). The same rows
// give every rank the same split. Every rank must claim the same n.
// ranks outside 1..MaxRanks, or rank outside 0..ranks-1, fails with
// ErrInvalid.
func Ranks(ranks, rank int, lengthTag string) TaskOption {
	return func(t *Task) error {
		if ranks < 1 || ranks > MaxRanks || rank < 0 || rank >= ranks {
			return fmt.Errorf("%w: rank %d of %d ranks (ranks 1..%d)", ErrInvalid, rank, ranks, MaxRanks)
		}
		t.ranks = &metadata.Batch{Ranks: ranks, Rank: rank}
		t.lengthTag = lengthTag
		return nil
	}
}

// TokenBudget makes each claim of the task lease rows up to a total
// length rather than a row count (n still bounds the rows): it offers the
// units the task's sampler chooses, in its order (whole groups with
// WithGroups), while the sum of lengthTag over their rows stays within
// tokens; a row whose lengthTag is not a positive number counts 0. The
// first unit is offered even when it alone is longer, so a long sample is
// never starved. A unit another consumer took meanwhile is not replaced,
// so a lease may hold fewer tokens than the budget, never more (but for
// that first unit). With Ranks, the batch so chosen is split as ever.
// An empty lengthTag or tokens < 1 fails with ErrInvalid.
func TokenBudget(lengthTag string, tokens int) TaskOption {
	return func(t *Task) error {
		if lengthTag == "" || tokens < 1 {
			return fmt.Errorf("%w: token budget of %d over tag %q", ErrInvalid, tokens, lengthTag)
		}
		t.budget = &tokenBudget{tag: lengthTag, tokens: tokens}
		return nil
	}
}

type tokenBudget struct {
	tag    string
	tokens int
}

// cut keeps the units of ready, in order, while their total length stays
// within the budget (the first unit whatever its length).
func (b *tokenBudget) cut(ready []Candidate, units [][]int) [][]int {
	total := 0.0
	for i, u := range units {
		w := 0.0
		for _, p := range u {
			if p < 0 || p >= len(ready) {
				return units // the caller reports it
			}
			w += rowLength(ready[p].row, b.tag)
		}
		if i > 0 && total+w > float64(b.tokens) {
			return units[:i]
		}
		total += w
	}
	return units
}

// ConsumerName names the holder of the task's leases (default: the
// client's name, see WithName), as TaskStatus.Leases shows them: a worker
// pool may name each worker. Names are checked as WithName checks them.
func ConsumerName(name string) TaskOption {
	return func(t *Task) error {
		if err := checkHolder(name); err != nil {
			return err
		}
		t.holder = name
		return nil
	}
}

// Staleness bounds the policy version of what the task consumes: a row
// whose versionTag is below the task's version (SetVersion) minus k is
// skipped and, with drop, dropped for the task (consumed without
// delivery); Stats counts both. A row without the tag is never stale.
func Staleness(versionTag string, k int64, drop bool) TaskOption {
	return func(t *Task) error {
		if versionTag == "" || k < 0 {
			return fmt.Errorf("%w: staleness bound %d on tag %q", ErrInvalid, k, versionTag)
		}
		t.stale = &staleness{tag: versionTag, k: k, drop: drop}
		return nil
	}
}

// Task returns a handle on the consumption of partition by the task name,
// whose rows are ready once every one of fields is committed. An empty
// name, no fields, a bad field or partition name, or a bad option fails
// with ErrInvalid.
func (c *Client) Task(partition, name string, fields []string, opts ...TaskOption) (*Task, error) {
	if err := checkPartition(partition); err != nil {
		return nil, err
	}
	if name == "" {
		return nil, fmt.Errorf("%w: empty task name on partition %q (name the task)", ErrInvalid, partition)
	}
	if len(fields) == 0 {
		return nil, fmt.Errorf("%w: task %q on partition %q names no fields (pass the fields its consumers read)", ErrInvalid, name, partition)
	}
	for _, f := range fields {
		if err := checkField(f); err != nil {
			return nil, err
		}
	}
	t := &Task{c: c, partition: partition, name: name, fields: slices.Clone(fields), lease: DefaultLease, sampler: Sequential(), holder: c.opts.name}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: task %q on partition %q: nil task option", ErrInvalid, name, partition)
		}
		if err := o(t); err != nil {
			return nil, fmt.Errorf("task %q on partition %q: %w", name, partition, err)
		}
	}
	if _, ok := t.sampler.(groups); t.deadline != nil && (!ok || t.budget != nil) {
		return nil, fmt.Errorf("%w: task %q: a group deadline needs WithGroups (and no TokenBudget)", ErrInvalid, name)
	}
	return t, nil
}

// Name is the task's name; Partition its partition.
func (t *Task) Name() string      { return t.name }
func (t *Task) Partition() string { return t.partition }

// SetVersion sets the task's current policy version, for Staleness.
func (t *Task) SetVersion(v int64) { t.version.Store(v) }

// TaskStats counts what this Task's claims passed over.
type TaskStats struct {
	// Skipped sums, over claims, the stale rows each passed over without
	// dropping them: a row stays ready, so each claim counts it again.
	Skipped int64
	// Dropped is the rows the claims dropped (stale, or by the sampler):
	// each is counted once, by the claim that dropped it, but for the
	// drops of a claim whose result the caller never had (a Wait's claim
	// in flight when the Wait ended; a tq:// claim whose reply was lost,
	// undone): they stand, and Status counts them.
	Dropped int64
}

// Stats returns what this Task's claims skipped and dropped so far.
func (t *Task) Stats() TaskStats {
	return TaskStats{Skipped: t.stats.skipped.Load(), Dropped: t.stats.dropped.Load()}
}

// ClaimOption configures one claim.
type ClaimOption func(*claimOpts) error

type claimOpts struct {
	min    int
	data   bool
	fields []string
	acking *Lease
}

// Acking makes the claim first acknowledge every row of l, a lease of the
// same Task (as l.Ack() does), in the claim's own request where the
// engine allows: through a tq server a worker's loop is then one call per
// claim, where Ack then Claim take two (a Wait's ack rides on its first
// claim, before it waits).
// If the ack fails the claim leases nothing and returns the ack's error
// (a *LeaseLostError is not a failure here: rows l no longer held went to
// another consumer when its lease ended; they are logged, not returned).
// A Wait whose context ends while its first claim is in flight returns
// the context's error and the ack may still apply: the caller cannot
// tell, and may ack l again (acking a row twice is not an error).
// A nil l, or an empty lease, acks nothing.
func Acking(l *Lease) ClaimOption {
	return func(o *claimOpts) error {
		o.acking = l
		return nil
	}
}

// AtLeast makes a claim lease nothing unless m rows are ready (for a group
// task, whole groups holding m rows): a Wait with AtLeast(n) waits for a
// full batch. Claim's and Wait's default is 1.
func AtLeast(m int) ClaimOption {
	return func(o *claimOpts) error {
		o.min = m
		return nil
	}
}

// WithData makes a claim also read the leased rows' fields (the task's
// fields when none are named) into Lease.Data. A claim whose read fails
// returns its error and hands the rows back: ready again at once, their
// delivery counts not raised by it (a rank's share of a batch lapses
// with the batch's lease).
func WithData(fields ...string) ClaimOption {
	return func(o *claimOpts) error {
		o.data, o.fields = true, fields
		return nil
	}
}

// Lease is what a claim leased: rows of one partition, held for the task
// until Until unless extended. Meta names them for BatchGetByMeta, which
// reads them without another lookup. A Lease is safe for concurrent use.
type Lease struct {
	task  *Task
	token string
	// Meta is the leased rows' metadata, in the order they were chosen
	// (a group's rows together).
	Meta *BatchMeta
	// Deliveries is each row's delivery count, this one included: above 1,
	// the row may have been processed before.
	Deliveries []int
	// Data holds the rows' fields when the claim asked WithData.
	Data Batch
	// Partial, when not nil, flags each row (as Meta.Rows) of a group
	// released incomplete past its GroupDeadline: the trainer may weight
	// it (a GRPO advantage over fewer responses).
	Partial []bool

	granted    time.Time  // when the claim leased the rows (see Granted)
	mu         sync.Mutex // guards until and acked
	until      time.Time
	acked      map[uint64]bool // rows acknowledged through this Lease; nil: none
	ackApplied bool            // an ack of every row of the lease applied

	indexOnce sync.Once
	index     map[string]uint64 // key -> index, made when first needed
}

// Until is when the lease ends, unless extended (as a time of this
// process: a server engine's lease ends by the server's clock).
func (l *Lease) Until() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// Granted is when the claim leased the rows (as a time of this process,
// as Until is); zero for a lease of no rows.
func (l *Lease) Granted() time.Time { return l.granted }

// Len is the number of leased rows; 0 for a claim that found none ready.
func (l *Lease) Len() int { return len(l.Meta.Rows) }

// Keys returns the leased rows' keys in order.
func (l *Lease) Keys() []string { return l.Meta.Keys() }

// allAcked reports whether every row of keys was acknowledged through l.
func (l *Lease) allAcked(keys []string) bool {
	index := l.keyIndex()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		i, ok := index[k]
		if !ok || !l.acked[i] {
			return false
		}
	}
	return true
}

// unacked returns the keys of the rows not acknowledged through l, and
// whether that is every row.
func (l *Lease) unacked() ([]string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.acked) == 0 {
		return l.Keys(), true
	}
	var out []string
	for _, r := range l.Meta.Rows {
		if !l.acked[r.Index] {
			out = append(out, r.Key)
		}
	}
	return out, false
}

// Claim leases up to n rows ready for the task now, at least AtLeast's m
// (default 1); with fewer ready it returns an empty Lease and no error.
// For a group task, n and m count rows in whole groups: m rounds up to
// whole groups (but no further than the whole groups n holds), and n
// smaller than a group fails; with a partial GroupDeadline, m is not
// rounded up (a partial group holds fewer rows), and is at most the rows
// of the whole groups n holds. For a Ranks task, n and m are the whole batch's, and the Lease
// is this rank's share of it, which may be empty (a batch of fewer units
// than ranks): it is still this rank's turn of that batch, and the next
// claim goes on to the next batch. n outside 1..MaxClaim or a bad option
// fails with ErrInvalid. An error
// matching ErrOutcomeUnknown may have leased rows the caller did not
// learn of: they are delivered again once the lease ends.
func (t *Task) Claim(ctx context.Context, n int, opts ...ClaimOption) (*Lease, error) {
	return t.claim(ctx, "Claim", n, false, opts)
}

// Wait is Claim that, with fewer than AtLeast's m rows ready (default 1),
// waits until they are, or until ctx ends (then it returns ctx's error,
// never ErrOutcomeUnknown, at most about 100 ms after ctx ends, however
// slow the engine) or the client is closed (ErrClosed). A lease that a
// Wait whose ctx ended took without returning it (a request in flight, a
// registered claim fulfilled as ctx ended) is handed back in the
// background: its rows are ready again at once, their delivery counts not
// raised by it. A rank's Wait returns once a batch
// is there for it, its share possibly empty (see Claim): ranks that step
// in lockstep (an all-reduce per batch) each get one Lease per batch.
// It does not poll: a waiter on the memory engine wakes on the commit that
// makes rows ready, one on a server engine blocks on the server.
func (t *Task) Wait(ctx context.Context, n int, opts ...ClaimOption) (*Lease, error) {
	return t.claim(ctx, "Wait", n, true, opts)
}

func (t *Task) claim(ctx context.Context, op string, n int, wait bool, opts []ClaimOption) (_ *Lease, err error) {
	c := t.c
	ctx, tr := c.trace(ctx, op, t.partition, n)
	defer func() { tr.done(err) }()
	o := claimOpts{min: 1}
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: nil claim option", ErrInvalid)
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	switch {
	case n < 1 || n > MaxClaim:
		return nil, fmt.Errorf("%w: task %q on partition %q: claim of %d rows (1..%d)", ErrInvalid, t.name, t.partition, n, MaxClaim)
	case o.min < 1 || o.min > n:
		return nil, fmt.Errorf("%w: at least %d of %d rows", ErrInvalid, o.min, n)
	}
	if g, ok := t.sampler.(groups); ok {
		// Whole groups only: m rounds up to whole groups, but no further
		// than the whole groups n holds.
		if n < g.size {
			return nil, fmt.Errorf("%w: claim of %d rows, fewer than a group of %d", ErrInvalid, n, g.size)
		}
		whole := n / g.size * g.size
		if t.deadline == nil || !t.deadline.partial {
			o.min = min((o.min+g.size-1)/g.size*g.size, whole)
		} else {
			// A group released past its deadline may hold fewer rows: m
			// is not rounded up, but complete groups alone must meet it.
			o.min = min(o.min, whole)
		}
	}
	for _, f := range o.fields {
		if err := checkField(f); err != nil {
			return nil, err
		}
	}
	var ack *metadata.SettleRequest // the ack riding on the first claim
	if a := o.acking; a != nil {
		if a.task != t {
			return nil, fmt.Errorf("%w: task %q on partition %q: Acking a lease of another Task (%q on %q)", ErrInvalid, t.name, t.partition, a.task.name, a.task.partition)
		}
		if a.token != "" {
			ack = &metadata.SettleRequest{Task: t.name, Op: metadata.Ack, Lease: a.token, Indexes: a.indexes(nil)}
		}
	}
	release, err := c.enter(ctx, op, t.partition)
	if err != nil {
		return nil, err
	}
	defer release()
	q := c.meta
	if wait {
		var stop func()
		ctx, stop = c.untilClosed(ctx)
		defer stop()
	}
	req := metadata.ClaimRequest{Task: t.name, Lease: t.lease, Rows: n, Min: o.min, MaxDeliveries: t.maxDel, Batch: t.ranks,
		Select: metadata.Select{Fields: t.fields}, Holder: t.holder}
	switch s := t.sampler.(type) {
	case sequential:
	case groups:
		req.Select.Group = metadata.Group{Tag: s.by.tag, Sep: s.by.sep, Size: s.size}
		if d := t.deadline; d != nil {
			req.Select.Group.Deadline, req.Select.Group.Partial = d.d, d.partial
		}
	default:
		req.Custom = true
	}
	if t.budget != nil {
		// The budget cuts what the sampler offers: the claim picks here.
		req.Custom, req.Select.Group = true, metadata.Group{}
	}
	if s := t.stale; s != nil {
		req.Select.Stale = metadata.Stale{Tag: s.tag, Drop: s.drop}
		req.Floor = float64(t.version.Load() - s.k)
	}
	if wait {
		// A shared engine keeps the claim registered while the Wait
		// waits, and fulfils it with the change that makes rows ready:
		// the lease needs no second request.
		req.Hold = waitHold
	}
	var watch *stallWatch      // a Wait's progress, once it has waited
	var next *metadata.Claimed // the registered claim's lease, taken by its wake-up
	for {
		var skipped int64
		picks := 0
		pick := func(rows []*metadata.Row, ds []metadata.Delivery) (metadata.Picked, error) {
			picks++
			return t.pick(rows, ds, askFor(n, picks, len(rows)), &skipped)
		}
		var got metadata.Claimed
		left := false // the Wait left its claim in flight, to be handed back
		switch {
		case next != nil:
			got, next, err = *next, nil, nil
		case wait:
			got, left, err = t.waitClaim(ctx, q, req, pick, o.acking, ack)
			ack = nil
		case ack != nil:
			got, err = t.ackClaim(ctx, tr, q, o.acking, *ack, req, pick)
			ack = nil
		default:
			got, err = q.Claim(ctx, t.partition, req, pick)
		}
		if err != nil {
			if !left && req.Replaces != "" {
				// The claim that was to replace the registered one did
				// not go through: cancel that one, or a commit would
				// lease rows to a waiter that is gone.
				t.unwait(ctx, q, req.Replaces)
			}
			if wait && ctx.Err() != nil {
				// Cut off by its context: its error, never an outcome
				// its deadline made unknown.
				err = ctx.Err()
			}
			return nil, closedErr(ctx, err)
		}
		if !req.Custom && got.Skipped > 0 {
			skipped = int64(got.Skipped) // the engine chose, and counted
		}
		t.stats.skipped.Add(skipped)
		t.stats.dropped.Add(int64(got.Dropped))
		c.cleared(ctx, tr, t.partition, got.Cleared)
		if len(got.Rows) > 0 || !wait {
			l := t.leaseOf(got)
			tr.add(len(l.Meta.Rows), 0, 0)
			if o.data && l.Len() > 0 {
				fields := o.fields
				if len(fields) == 0 {
					fields = t.fields
				}
				if l.Data, err = c.getFresh(ctx, tr, t.partition, l.Meta.Keys(), fields, nil); err != nil {
					// The caller never gets the lease: hand its rows back
					// undelivered rather than sit on them until the lease
					// ends (or, if that fails too, until it ends).
					t.handBack(ctx, q, t.shareless(l.token, l.indexes(nil)))
					_ = c.backs.await(ctx) // back before the error, unless ctx ends first
					if wait && ctx.Err() != nil {
						return nil, closedErr(ctx, ctx.Err())
					}
					return nil, err
				}
			}
			return l, nil
		}
		if watch == nil {
			watch = t.newStallWatch()
		}
		if err := watch.check(ctx, o.min); err != nil {
			t.unwait(ctx, q, got.Waiting)
			return nil, err
		}
		taken, took, err := t.waitFor(ctx, q, got, watch.deadline())
		if err != nil {
			return nil, closedErr(ctx, err)
		}
		if ctx.Err() != nil {
			// Ended as the wait did: the registered claim, fulfilled or
			// not, goes back rather than to a caller that is gone.
			t.unwait(ctx, q, got.Waiting)
			return nil, closedErr(ctx, ctx.Err())
		}
		if took {
			// The wake-up brought the registered claim's lease: it is
			// the next claim's answer.
			next = &taken
		}
		req.Replaces = got.Waiting // the next claim takes its lease, or replaces it
	}
}

// ackClaim acknowledges the rows of ack (a's) and claims, in one request
// where q can. An ack that failed alone hands back what the claim leased.
func (t *Task) ackClaim(ctx context.Context, tr *callTrace, q metadata.MetaStore, a *Lease, ack metadata.SettleRequest, req metadata.ClaimRequest, pick metadata.Pick) (metadata.Claimed, error) {
	res, got, err := metadata.SettleClaim(ctx, q, t.partition, ack, req, pick)
	t.c.cleared(ctx, tr, t.partition, res.Cleared) // an ack that applied cleared them, whatever followed
	if err != nil {
		// The settle failed alone: what the claim did is handed back (a
		// lease, or a Wait's registered claim).
		if got.Lease != "" {
			t.handBack(ctx, q, t.shareless(got.Lease, leasedIndexes(got)))
		}
		if got.Waiting != "" && got.Waiting != got.Lease {
			t.handBack(ctx, q, metadata.SettleRequest{Task: t.name, Op: metadata.Unwait, Lease: got.Waiting})
		}
		return metadata.Claimed{}, err
	}
	a.noteAcked(ack.Indexes, res.Lost)
	if lost := lostError("ack", t.partition, t.name, res.Lost, a.Meta.Rows); lost != nil {
		t.c.event(slog.LevelWarn, "ack lost", t.partition, t.name, nil, lost, "tq: rows acked with a claim were no longer held")
	}
	return got, nil
}

// leasedIndexes are the indexes of a claim's rows.
func leasedIndexes(c metadata.Claimed) []uint64 {
	out := make([]uint64, len(c.Rows))
	for i, r := range c.Rows {
		out[i] = r.Index
	}
	return out
}

// waitHold is how long a Wait's claim stays registered with a shared
// engine; the Wait registers it again before it lapses.
const waitHold = 30 * time.Second

// waitFor waits for what an empty claim's mark says may change: until the
// hold of its registered claim is nearly over, or until look (if not
// zero), at most. If ctx ends first, the registered claim is cancelled
// (and its lease, had it just been fulfilled, returned). Where q hands
// over the registered claim's lease with the wake-up (a
// metadata.WaitTaker), waitFor returns it (took).
func (t *Task) waitFor(ctx context.Context, q metadata.MetaStore, got metadata.Claimed, look time.Time) (_ metadata.Claimed, took bool, _ error) {
	wctx := ctx
	end := look
	if got.Waiting != "" {
		if hold := time.Now().Add(waitHold - time.Second); end.IsZero() || hold.Before(end) {
			end = hold
		}
	}
	if !end.IsZero() {
		var cancel context.CancelFunc
		wctx, cancel = context.WithDeadline(ctx, end)
		defer cancel()
	}
	taken, took, err := metadata.WaitTake(wctx, q, t.partition, got.Mark)
	if err == nil || ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return taken, took, nil // changed, or the hold is ending: claim (again)
	}
	t.unwait(ctx, q, got.Waiting)
	return metadata.Claimed{}, false, err
}

// unwait cancels the claim an empty claim registered (token; "" for
// none), and hands back the lease it was fulfilled with, if it was. It
// waits for that up to handBackGrace, then leaves it to the background
// (see handBack): a Wait whose context ended returns within the grace,
// however slow the engine.
func (t *Task) unwait(ctx context.Context, q metadata.MetaStore, token string) {
	if token == "" {
		return
	}
	done := t.handBack(ctx, q, metadata.SettleRequest{Task: t.name, Op: metadata.Unwait, Lease: token})
	grace := time.NewTimer(handBackGrace)
	defer grace.Stop()
	select {
	case <-done:
	case <-grace.C:
	}
}

// handBackGrace is how long a Wait whose context ended waits for the
// cancel of its registered claim before leaving it to the background: a
// healthy engine's one round trip, so that the claim is gone when the
// Wait returns, as a caller expects.
const handBackGrace = 100 * time.Millisecond

// handBackFor bounds a hand-back of a lease its caller never received,
// and a Wait's claim whose caller left while it was in flight: long
// enough for a lost reply to be settled (a fence), bounded so that Close,
// which waits for them, ends.
const handBackFor = 15 * time.Second

// shareless is the hand-back of the rows of indexes leased to token: none
// for a rank's share of a batch, whose rows the other ranks hold under
// the same lease (they lapse with it).
func (t *Task) shareless(token string, indexes []uint64) metadata.SettleRequest {
	if t.ranks != nil && t.ranks.Ranks > 1 {
		indexes = nil
	}
	return metadata.SettleRequest{Task: t.name, Op: metadata.Unwait, Lease: token, Indexes: indexes}
}

// handBack sends req (an Unwait: see metadata.Unwait) in the background,
// bounded by handBackFor, logging a failure (the rows then come back when
// the lease ends), and returns a channel closed when it is done. The
// client's later calls wait for it (handBacks). The caller holds the
// client's life (c.enter): Close waits for it.
func (t *Task) handBack(ctx context.Context, q metadata.MetaStore, req metadata.SettleRequest) <-chan struct{} {
	c := t.c
	c.bg.Add(1)
	c.backs.begin()
	done := make(chan struct{})
	go func() {
		defer c.bg.Done()
		defer c.backs.end()
		defer close(done)
		t.handBackNow(ctx, q, req)
	}()
	return done
}

// handBackNow is handBack, in the caller's goroutine.
func (t *Task) handBackNow(ctx context.Context, q metadata.MetaStore, req metadata.SettleRequest) {
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), handBackFor)
	defer cancel()
	if _, err := q.Settle(hctx, t.partition, req); err != nil {
		t.c.opts.logger.Warn("tq: handing back a lease its caller never received; its rows come back when it ends",
			"partition", t.partition, "task", t.name, "rows", len(req.Indexes), "err", err)
	}
}

// waitClaim is q.Claim for a Wait. The claim runs on a context of its
// own, bounded by handBackFor, and waitClaim returns ctx's error as soon
// as ctx ends, never an outcome made unknown by the caller's deadline:
// what the claim did then (a lease, a registered claim, the fulfilled
// claim it replaced) is handed back undelivered in the background once
// its reply, or the fence settling a lost one, tells.
// It reports left when it returned without the claim's result.
func (t *Task) waitClaim(ctx context.Context, q metadata.MetaStore, req metadata.ClaimRequest, pick metadata.Pick, a *Lease, ack *metadata.SettleRequest) (_ metadata.Claimed, left bool, _ error) {
	if err := ctx.Err(); err != nil {
		t.unwait(ctx, q, req.Replaces)
		return metadata.Claimed{}, true, err
	}
	type result struct {
		got metadata.Claimed
		err error
	}
	var (
		mu   sync.Mutex // guards gone, and the send on ch
		gone bool       // the caller left: the claim's result is handed back
	)
	ch := make(chan result, 1)
	handed := make(chan struct{}) // closed when the claim, and any hand-back of it, are done
	c := t.c
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		defer close(handed)
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), handBackFor)
		defer cancel()
		var got metadata.Claimed
		var err error
		if ack != nil {
			// No trace: the caller, who holds it, may have left.
			got, err = t.ackClaim(cctx, nil, q, a, *ack, req, pick)
		} else {
			got, err = q.Claim(cctx, t.partition, req, pick)
		}
		mu.Lock()
		if !gone {
			ch <- result{got, err}
			mu.Unlock()
			return
		}
		mu.Unlock()
		defer c.backs.end()
		t.abandoned(cctx, q, req, got, err)
	}()
	select {
	case r := <-ch:
		return r.got, false, r.err
	case <-ctx.Done():
	}
	mu.Lock()
	select {
	case r := <-ch:
		mu.Unlock()
		return r.got, false, r.err // it came as ctx ended: the caller has it
	default:
	}
	gone = true
	c.backs.begin() // the claim and what it did, handed back: see abandoned
	mu.Unlock()
	// As unwait does: wait a healthy engine's round trip for the claim and
	// its hand-back, so that what it registered or leased is gone when
	// the Wait returns, as a caller (and another client it then tells)
	// expects; a slower engine's is left to the background.
	grace := time.NewTimer(handBackGrace)
	defer grace.Stop()
	select {
	case <-handed:
	case <-grace.C:
	}
	return metadata.Claimed{}, true, ctx.Err()
}

// abandoned hands back what a Wait's claim did after its caller left.
func (t *Task) abandoned(ctx context.Context, q metadata.MetaStore, req metadata.ClaimRequest, got metadata.Claimed, err error) {
	if err != nil {
		if req.Replaces != "" {
			t.handBackNow(ctx, q, metadata.SettleRequest{Task: t.name, Op: metadata.Unwait, Lease: req.Replaces})
		}
		if errors.Is(err, ErrOutcomeUnknown) {
			t.c.opts.logger.Warn("tq: a Wait's claim in flight when the Wait ended has an unknown outcome; rows it may have leased come back when the lease ends",
				"partition", t.partition, "task", t.name, "err", err)
		}
		return
	}
	t.c.cleared(ctx, nil, t.partition, got.Cleared)
	if got.Lease != "" {
		idx := make([]uint64, len(got.Rows))
		for i, r := range got.Rows {
			idx[i] = r.Index
		}
		t.handBackNow(ctx, q, t.shareless(got.Lease, idx))
	}
	if got.Waiting != "" && got.Waiting != got.Lease {
		t.handBackNow(ctx, q, metadata.SettleRequest{Task: t.name, Op: metadata.Unwait, Lease: got.Waiting})
	}
}

// untilClosed is ctx, ended by the client's Close as well: Close waits
// for calls in flight, so a call that may wait long (Wait) must end when
// Close begins.
func (c *Client) untilClosed(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(c.closing, func() { cancel(ErrClosed) })
	return ctx, func() { stop(); cancel(nil) }
}

// closedErr is ErrClosed for an error of a call Close ended, else err.
func closedErr(ctx context.Context, err error) error {
	if errors.Is(context.Cause(ctx), ErrClosed) {
		return ErrClosed
	}
	return err
}

// askFor is the n a claim of n rows asks its sampler for at its pick-th
// pick among ready rows: n at first, so that the claim's cost follows n
// and not the partition's ready rows (what the sampler offers beyond n,
// see offered, covers rows another consumer took meanwhile), then four
// times more at each pick, up to every ready row. The engine picks again
// when its view was stale or it found the candidates taken, which a server
// engine's cache of other processes' leases can miss for many rows at
// once: the asks grow so that such a claim still fills within its
// attempts, and only as far as the misses require.
func askFor(n, pick, ready int) int {
	ask := n
	for range pick - 1 {
		if ask >= ready {
			break
		}
		ask *= 4
	}
	return max(n, min(ask, ready))
}

// pick is the task's metadata.Pick for a claim that asks the sampler for
// n rows (see askFor): the rows with every field of the task, less stale
// ones, as the sampler chooses among them.
func (t *Task) pick(rows []*metadata.Row, ds []metadata.Delivery, n int, skippedOut *int64) (metadata.Picked, error) {
	var (
		ready = make([]Candidate, 0, len(rows))
		pos   = make([]int, 0, len(rows)) // position in rows of each candidate
		drop  []int
	)
	floor := t.version.Load()
	var skipped int64
	for i, r := range rows {
		if !hasFields(r, t.fields) {
			continue
		}
		if s := t.stale; s != nil {
			if v, ok := tagNumber(r.Tag[s.tag]); ok && v < float64(floor-s.k) {
				if s.drop {
					drop = append(drop, i) // counted as Dropped, once
				} else {
					skipped++
				}
				continue
			}
		}
		ready = append(ready, Candidate{row: r, deliveries: ds[i].Deliveries})
		pos = append(pos, i)
	}
	*skippedOut = skipped // the last pick of a claim counts
	units, sdrop, err := t.sample(ready, n)
	if err != nil {
		return metadata.Picked{}, err
	}
	if t.budget != nil {
		units = t.budget.cut(ready, units)
	}
	out := metadata.Picked{Units: make([][]int, len(units)), Drop: drop}
	total := 0
	for _, u := range units {
		total += len(u)
	}
	flat := make([]int, 0, total) // every unit's positions, one allocation
	for i, u := range units {
		start := len(flat)
		for _, p := range u {
			if p < 0 || p >= len(pos) {
				return metadata.Picked{}, fmt.Errorf("%w: sampler returned position %d of %d", ErrInvalid, p, len(pos))
			}
			flat = append(flat, pos[p])
		}
		out.Units[i] = flat[start:len(flat):len(flat)]
	}
	for _, p := range sdrop {
		if p < 0 || p >= len(pos) {
			return metadata.Picked{}, fmt.Errorf("%w: sampler dropped position %d of %d", ErrInvalid, p, len(pos))
		}
		out.Drop = append(out.Drop, pos[p])
	}
	return out, nil
}

func hasFields(r *metadata.Row, fields []string) bool {
	for _, f := range fields {
		if _, ok := r.Fields[f]; !ok {
			return false
		}
	}
	return true
}

// leaseOf turns what the engine leased into the caller's Lease: for a rank,
// its share of the batch.
func (t *Task) leaseOf(got metadata.Claimed) *Lease {
	l := &Lease{task: t, token: got.Lease, until: got.Until}
	rows, dels := got.Rows, got.Deliveries
	partial := partialRows(got)
	if t.ranks != nil && t.ranks.Ranks > 1 && len(rows) > 0 {
		// The whole batch is split, as every rank splits it; the share
		// keeps the rows the batch's lease still holds.
		share := splitRanks(rows, got.Units, t.ranks.Ranks, t.lengthTag)[t.ranks.Rank]
		rows, dels = nil, nil
		var flags []bool
		for _, p := range share {
			if d := got.Deliveries[p]; d.State == metadata.Leased && d.Lease == got.Lease {
				rows, dels = append(rows, got.Rows[p]), append(dels, d)
				if partial != nil {
					flags = append(flags, partial[p])
				}
			}
		}
		partial = flags
		if len(rows) == 0 {
			l.token = "" // nothing of this rank's to settle
		}
	}
	l.Meta = batchMeta(t.partition, rows)
	if slices.Contains(partial, true) {
		l.Partial = partial
	}
	l.Deliveries = make([]int, len(dels))
	for i, d := range dels {
		l.Deliveries[i] = d.Deliveries
		if l.granted.IsZero() || d.Granted.Before(l.granted) {
			l.granted = d.Granted
		}
	}
	return l
}

// keyIndex returns the lease's map of key to index, made on first use.
func (l *Lease) keyIndex() map[string]uint64 {
	l.indexOnce.Do(func() {
		l.index = make(map[string]uint64, len(l.Meta.Rows))
		for _, r := range l.Meta.Rows {
			l.index[r.Key] = r.Index
		}
	})
	return l.index
}

// indexes returns the indexes of keys (every row when keys is empty), or
// an error matching ErrInvalid for a key the lease does not have.
func (l *Lease) indexesOf(keys []string) ([]uint64, error) {
	if len(keys) > 0 {
		l.keyIndex()
	}
	for _, k := range keys {
		if _, ok := l.index[k]; !ok {
			return nil, fmt.Errorf("%w: task %q on partition %q: key %q is not in the lease (settle only the keys it holds: Lease.Keys)", ErrInvalid, l.task.name, l.task.partition, k)
		}
	}
	return l.indexes(keys), nil
}

func (l *Lease) indexes(keys []string) []uint64 {
	if len(keys) == 0 {
		out := make([]uint64, len(l.Meta.Rows))
		for i, r := range l.Meta.Rows {
			out[i] = r.Index
		}
		return out
	}
	out := make([]uint64, len(keys))
	for i, k := range keys {
		out[i] = l.index[k]
	}
	return out
}

// Ack acknowledges keys (every row of the lease when none are named):
// consumed by the task, never delivered to it again. A key not in the
// lease fails with ErrInvalid, settling nothing; rows the lease no longer
// holds give a *LeaseLostError (ErrLeaseLost), the others acknowledged.
// Acking a row twice is not an error.
func (l *Lease) Ack(ctx context.Context, keys ...string) error {
	return l.settle(ctx, "Ack", metadata.Ack, 0, "", keys)
}

// Nack gives keys (every row when none are named) back: ready for the
// task again after delay (0: at once), or dead if they had the task's
// MaxDeliveries. Errors as Ack's.
func (l *Lease) Nack(ctx context.Context, delay time.Duration, keys ...string) error {
	if delay < 0 {
		return fmt.Errorf("%w: nack delay %v", ErrInvalid, delay)
	}
	return l.settle(ctx, "Nack", metadata.Nack, delay, "", keys)
}

// NackErr is Nack giving why: cause's text (cut to MaxReason bytes at a
// UTF-8 boundary) is kept with the rows as their last error, until a
// later NackErr, an ack or Task.Retry: DeadRow.Reason and
// KeyState.Reason show it. A nil cause is Nack's (the rows keep the
// reason they had). Errors as Nack's.
func (l *Lease) NackErr(ctx context.Context, delay time.Duration, cause error, keys ...string) error {
	if delay < 0 {
		return fmt.Errorf("%w: nack delay %v", ErrInvalid, delay)
	}
	return l.settle(ctx, "Nack", metadata.Nack, delay, reasonOf(cause), keys)
}

// MaxReason is the most bytes of a reason NackErr keeps.
const MaxReason = metadata.MaxReason

// reasonOf is the reason NackErr keeps for cause ("" for nil).
func reasonOf(cause error) string {
	if cause == nil {
		return ""
	}
	s := metadata.CutReason(cause.Error())
	if s == "" {
		s = fmt.Sprintf("%T", cause) // an error with no text still names a failure
	}
	return s
}

// Extend renews the lease of keys (every row when none are named) to now
// plus d, and moves Until when it renewed some row (an Extend that finds
// every row lost leaves Until as it was). Errors as Ack's; a d below
// MinLease fails with ErrInvalid.
func (l *Lease) Extend(ctx context.Context, d time.Duration, keys ...string) error {
	if d < MinLease {
		return fmt.Errorf("%w: extend by %v, less than %v", ErrInvalid, d, MinLease)
	}
	return l.settle(ctx, "Extend", metadata.Extend, d, "", keys)
}

func (l *Lease) settle(ctx context.Context, op string, sop metadata.SettleOp, d time.Duration, reason string, keys []string) (err error) {
	t := l.task
	ctx, tr := t.c.trace(ctx, op, t.partition, len(keys))
	defer func() { tr.done(err) }()
	if l.token == "" {
		if len(keys) == 0 {
			return nil // an empty lease: nothing to settle
		}
		return fmt.Errorf("%w: task %q on partition %q: key %q is not in the lease (an empty one)", ErrInvalid, t.name, t.partition, keys[0])
	}
	idx, err := l.indexesOf(keys)
	if err != nil {
		return err
	}
	release, err := t.c.enter(ctx, op, t.partition)
	if err != nil {
		return err
	}
	defer release()
	q := t.c.meta
	res, err := q.Settle(ctx, t.partition, metadata.SettleRequest{Task: t.name, Op: sop, Lease: l.token, Indexes: idx, Delay: d, Reason: reason})
	if err != nil {
		return err
	}
	t.c.cleared(ctx, tr, t.partition, res.Cleared)
	tr.add(len(idx)-len(res.Lost), 0, 0)
	if sop == metadata.Extend && !res.Until.IsZero() {
		l.mu.Lock()
		l.until = res.Until
		l.mu.Unlock()
	}
	if sop == metadata.Ack {
		l.noteAcked(idx, res.Lost)
	}
	return lostError(strings.ToLower(op), t.partition, t.name, res.Lost, l.Meta.Rows)
}

// settledByAck reports whether every row of l was acknowledged through
// it (an ack that applied), but rows reported lost.
func (l *Lease) settledByAck() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.acked != nil && l.ackApplied
}

// noteAcked records that the rows of idx, but lost, were acknowledged
// through l.
func (l *Lease) noteAcked(idx, lost []uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.acked == nil {
		l.acked = map[uint64]bool{}
	}
	if len(idx) == len(l.Meta.Rows) {
		l.ackApplied = true // an ack of the whole lease applied
	}
	for _, i := range idx {
		l.acked[i] = true
	}
	for _, i := range lost {
		delete(l.acked, i)
	}
}

// lostError names the rows of lost among rows, or is nil.
func lostError(op, partition, task string, lost []uint64, rows []RowInfo) error {
	if len(lost) == 0 {
		return nil
	}
	keyOf := make(map[uint64]string, len(rows))
	for _, r := range rows {
		keyOf[r.Index] = r.Key
	}
	e := &LeaseLostError{Op: op, Partition: partition, Task: task}
	for _, i := range lost {
		e.Keys = append(e.Keys, keyOf[i])
	}
	return e
}
