package metadata

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tqgo/tqgo/backends"
)

// Queue is the consumption state of a MetaStore's partitions: for each
// (partition, task), which rows the task's consumers were delivered, which
// of them are leased to whom and until when, and which are acknowledged.
// Every MetaStore is a Queue (MetaStore embeds it), so consumption lives
// beside the rows it is about and follows the MetaStore's outcome rules:
// an error matching backends.ErrOutcomeUnknown may have applied; any other applied
// nothing. Implementations are safe for concurrent use, also, for a store
// other processes reach, by many processes: no row is leased to two
// consumers of a task at once.
//
// # Row states
//
// A committed row is, for each task, in one state:
//
//   - ready: never delivered, or back after a Nack, an expired lease or a
//     Reset (no state is kept for a row that was never delivered);
//   - leased to one lease token until a deadline;
//   - acked: consumed, never delivered to the task again;
//   - dead: delivered MaxDeliveries times without an ack (see
//     ClaimRequest), never delivered again until Retry;
//   - dropped: consumed without delivery (a sampler's or a caller's Drop),
//     never delivered again.
//
// Time is the store's clock: a store with a server judges deadlines by
// the server's clock, so clients on machines whose clocks differ agree.
// An expired lease makes the row ready, or dead once it has been
// delivered its MaxDeliveries. Expiry is lazy: a lease whose deadline
// passed still names its token until the row is delivered again,
// retried, dropped or reset, and until then its holder may still Ack,
// Nack or Extend it (the work was done, and nobody else has the row).
//
// Rows a Delete or DeletePartition removes leave the consumption of every
// task: their state is gone once the delete returns, and a lease on them
// is lost.
type Queue interface {
	// Claim leases rows of partition to a new lease token of req.Task. It
	// calls pick with the partition's committed rows the task may be
	// given, in index order: every row that is ready for the task (and
	// not delayed by a Nack) by the store's knowledge (a store with a server may pass rows it knows
	// only from a cached view, some of which another consumer may hold:
	// Claim skips those), each with its Delivery so far. pick returns
	// the units to lease in order of preference and the rows to drop.
	// Claim then, atomically, drops the rows of Picked.Drop that are
	// still ready and leases whole units in order, skipping any unit one
	// of whose rows is no longer ready or that would bring the rows
	// leased past req.Rows, until req.Rows are leased; if fewer than
	// req.Min rows would be leased, it leases none (and still drops).
	// A store may call pick more than once (a view that was stale); only
	// its last result counts. pick must be quick and must not call the
	// store: a store may hold a lock across it.
	//
	// With req.Batch set, the ranks of a data-parallel task share batches
	// (see Batch). Claim fails with an error wrapping backends.ErrInvalid, changing
	// nothing, when req is malformed (see ClaimRequest.Check), and returns
	// pick's error as it is.
	Claim(ctx context.Context, partition string, req ClaimRequest, pick Pick) (Claimed, error)
	// Settle acknowledges, returns or renews rows of a lease, or retries
	// or drops dead rows (see SettleOp). It applies req.Op to each row of
	// req.Indexes in the state the op needs and reports the others in
	// SettleResult.Lost, changing nothing of them; an index of no
	// committed row of the partition is Lost too. A malformed req (see
	// SettleRequest.Check) fails with backends.ErrInvalid, changing nothing.
	Settle(ctx context.Context, partition string, req SettleRequest) (SettleResult, error)
	// Consumption returns, for each of tasks (every task with state in
	// the partition when none is named), the Delivery of every row of the
	// partition that has state: every row delivered at least once, or
	// dropped, in index order. A ready row that was never delivered has
	// no state and is not listed. Expired leases are reported as the
	// next Claim would find them (ready, or dead). A task with no state
	// maps to an empty slice when named and is absent otherwise.
	Consumption(ctx context.Context, partition string, tasks ...string) (map[string][]Delivery, error)
	// View returns List's rows and Consumption's deliveries of tasks as of
	// one moment: no change applies between the two, so every delivery
	// names a row of Rows. Errors as Consumption's.
	View(ctx context.Context, partition string, tasks ...string) (View, error)
	// Reset forgets task's consumption of the rows of indexes, or of
	// every row of the partition when indexes is nil (an empty, non-nil
	// indexes forgets nothing): they are ready
	// again with no deliveries, leases on them are lost, and open
	// batches of the task (see Batch) are forgotten. An empty task name
	// fails with backends.ErrInvalid.
	Reset(ctx context.Context, partition, task string, indexes []uint64) error
	// Wait returns nil once the partition may have rows for a claim that
	// it had not when mark was taken: after a commit, delete, settle or
	// reset of the partition (by any process) that mark did not see, or
	// once mark.Wake has passed. A store may return nil spuriously, but
	// while nothing changes it sends a server no more than one request
	// per second. It returns ctx.Err() when ctx ends first. What a store
	// starts for a Wait (a goroutine blocked on a server) may outlive it
	// by a second, for the next Wait, and ends by then or at Close.
	Wait(ctx context.Context, partition string, mark Mark) error
}

// State is a row's consumption state for one task.
type State uint8

const (
	Ready State = iota
	Leased
	Acked
	Dead
	Dropped
	numStates
)

var stateNames = [numStates]string{"ready", "leased", "acked", "dead", "dropped"}

func (s State) String() string {
	if s >= numStates {
		return "State(" + strconv.Itoa(int(s)) + ")"
	}
	return stateNames[s]
}

// Delivery is a row's consumption by one task.
type Delivery struct {
	Index uint64
	State State
	// Deliveries is how many times the row was leased to the task.
	Deliveries int
	// Lease is the token holding a Leased row, or that acked an Acked
	// one, or that returned (Nack) a Ready or Dead one not delivered
	// since ("" otherwise).
	Lease string
	// Holder is the ClaimRequest.Holder of Lease's claim ("" for none).
	Holder string
	// Until is, for a Leased row, when its lease ends; for a Ready row
	// that a Nack delayed, when it may be claimed again; zero otherwise.
	// It is a time of the process that received it: a store with a
	// server converts the server's remaining time into local time.
	Until time.Time
	// Granted is, for a Leased row, when the claim that holds it leased
	// it (an Extend keeps it), a time as Until is; zero otherwise.
	Granted time.Time
	// Max is the MaxDeliveries of the claim that last leased the row (0:
	// no limit).
	Max int
	// Reason is why the row last went back: the Reason of the last Nack
	// that gave one, or "lease ended" for a lease that ended unsettled;
	// At is when, a time as Until is. An ack or a Retry clears them; a
	// drop keeps them. "" and zero: none.
	Reason string
	At     time.Time
}

// ClaimRequest says what a Claim may lease.
type ClaimRequest struct {
	Task  string        // the consuming task; not empty
	Lease time.Duration // how long the lease lasts; at least a microsecond
	// Rows is the most rows to lease (> 0), and Min the fewest worth
	// leasing (1 to Rows): with fewer available, Claim leases none.
	Rows, Min int
	// MaxDeliveries, if > 0, is the number of deliveries after which a
	// row whose lease ends without an ack (a Nack, an expiry) is dead
	// instead of ready.
	MaxDeliveries int
	// Batch, if set, makes the claim one rank's of a data-parallel task.
	Batch *Batch
	// Select is what makes a row ready for the task and, unless Custom,
	// how the claim chooses among ready rows: the store chooses, and
	// does not call pick. Every claim of a task gives the same Select (a
	// store may index the task's ready rows for it).
	Select Select
	// Floor is the claim's staleness bound, with Select.Stale: a row
	// whose version tag is below it is stale.
	Floor float64
	// Custom claims choose with pick, among the oldest ready rows (a
	// window the store may grow when the pick leases too few).
	Custom bool
	// Hold, if > 0, makes a claim that leases nothing stay registered
	// (Claimed.Waiting) for up to Hold: a store whose writers learn of
	// changes from a log fulfils it with the change that makes rows ready
	// (the waiter then needs no second request); others may ignore it.
	// A claim with a Batch is never registered: a rank's Wait wakes on
	// the change that gives it a share (its Mark) and claims again.
	Hold time.Duration
	// Holder names the consumer the lease is for (a process, a worker:
	// the caller's choice), for people: Consumption reports it with each
	// leased row (Delivery.Holder). It is at most MaxHolder bytes of
	// printable text; "" names no one.
	Holder string
	// Replaces names a registered claim of the caller's (a Waiting token)
	// that this claim replaces: cancelled if still waiting; if it was
	// fulfilled, this claim returns that lease and leases nothing more.
	Replaces string
	// Token, if set, is the claim's token (its lease's, or its
	// registration's: Claimed.Lease, Claimed.Waiting), as NewLease(Holder)
	// makes one: chosen by a caller that must name the claim should its
	// reply be lost (a tq server's client, which then undoes it). Every
	// attempt a store makes of the claim uses it. Empty: the store makes
	// one.
	Token string
}

// Select says which rows are ready for a task, and how its claims choose
// among them.
type Select struct {
	// Fields are the fields a row must have committed to be ready.
	Fields []string
	// Group, when its Size is > 0, makes claims take complete groups.
	Group Group
	// Stale, when its Tag is set, bounds the version of what is taken.
	Stale Stale
}

// Group: rows sharing a group id (the value of tag Tag, or the key up to
// its last Sep) are leased Size at a time, whole, in the order of each
// group's first ready row; a row in no group is never leased. More than
// Size ready rows of one id make several groups, in index order. A
// value's kind is part of the id (int64 1 and uint64 1 differ); lists and
// maps group by their text.
//
// With a Deadline, a group that has waited that long incomplete (since
// the commit that made its oldest ready row ready: the last that gave the
// row a field, by the store's clock) is overdue: with
// Partial, a claim leases it as it is, a unit of fewer than Size rows
// flagged in Claimed.Partial, after the complete groups, oldest first;
// without, it keeps waiting, listed as overdue (see View.Groups) so that
// a producer can write its missing members.
type Group struct {
	Tag, Sep string
	Size     int
	Deadline time.Duration
	Partial  bool
}

// Stale: a row whose numeric tag Tag is below a claim's Floor is stale:
// passed over (Skipped), or with Drop dropped. A row without a numeric
// Tag is never stale.
type Stale struct {
	Tag  string
	Drop bool
}

// Batch is a data-parallel claim: Ranks consumers of one task (in one
// process or many), numbered 0 to Ranks-1, take shares of the same
// batches. Claim gives rank Rank the oldest open batch of the task whose
// share Rank has not taken; when there is none, it selects a new batch
// (with pick, req.Rows and req.Min, as a plain claim does), opens it
// with the share of Rank taken, and returns it. A batch's rows are leased
// to the batch's token when it is selected; each rank's claim of its
// share renews the lease of the batch's rows still held to now plus
// req.Lease. Claimed.Rows and Claimed.Units are the whole batch as it was
// selected, for every rank alike; Claimed.Deliveries say which rows the
// batch's token still holds (Leased, Lease the token: another rank may
// have settled its own, a lease may have been reset). The caller splits
// the whole batch into shares (the same rows must give every rank the
// same split), keeps the rows of its share still held, and settles them
// with the batch's token. A batch is closed once every rank took its
// share, or once its lease ended: past the latest end a rank's claim of
// it gave, none of its rows still leased to its token (rows the ranks
// settled before then do not close it: a rank whose share is empty still
// takes its turn).
// Whether a claim takes a share or opens a batch is decided atomically
// with its lease, so each rank takes the batches in the order they were
// opened and the k-th claims of the ranks are shares of one batch (unless
// a batch closed by expiry before a rank came for it). Every claim of one
// task must give the same Ranks.
type Batch struct {
	Ranks, Rank int
}

// Pick chooses what a Claim leases from the rows it may lease (see
// Queue.Claim): positions into rows and deliveries, which are parallel.
type Pick func(rows []*Row, deliveries []Delivery) (Picked, error)

// Picked is a Pick's choice: Units in order of preference, each a set of
// positions leased together or not at all (one row each for a plain
// sequential claim, a group's rows for a group claim), and Drop, the
// positions to drop. A position may appear once in all.
type Picked struct {
	Units [][]int
	Drop  []int
}

// Claimed is what a Claim leased.
type Claimed struct {
	Lease string // the lease token: random, never reused; "" when nothing was leased
	// Rows are the leased rows and Deliveries their deliveries, this one
	// counted; Units are the leased units as positions into Rows. Rows
	// are read-only, as every Row a MetaStore returns. A rank's share of
	// a batch is the exception: see Batch.
	Rows       []*Row
	Deliveries []Delivery
	Units      [][]int
	// Until is when the lease ends, as a time of this process.
	Until time.Time
	// Dropped is how many rows of Picked.Drop (or stale rows) the claim
	// dropped; Skipped how many stale rows it passed over without
	// dropping them (with Stale.Drop, none: they count as Dropped).
	Dropped, Skipped int
	// Cleared are the rows the partition's Capacity.ClearAcked removed
	// because the claim's drops completed their consumption: the caller
	// deletes their cells, as after Delete; none where the store deletes
	// them itself (a tq server).
	Cleared []*Row
	// Partial, when not nil, is one flag per unit: set for a group
	// released incomplete past its Group.Deadline.
	Partial []bool
	// Waiting is the token of the claim registered by Hold ("" for
	// none): it may be fulfilled later; Wait returns then, and the claim
	// that Replaces it returns the lease.
	Waiting string
	// Mark is where the claim looked, for Wait: its Seq is the count of
	// changes no later than when the claim read the rows it picked from,
	// so any change the claim may not have seen (a commit while it
	// picked, say) wakes a Wait given it at once. Its Wake
	// is set only by a claim that leased nothing (the one a caller waits
	// after).
	Mark Mark
}

// Mark is a point in a partition's history, for Wait: the store's count
// of the partition's changes, and when the earliest lease or Nack delay
// of the task the claim saw ends (zero if none), after which rows may be
// ready with no change at all.
type Mark struct {
	Seq  uint64
	Wake time.Time
	// Consumed is the partition's count of acknowledgements and drops
	// (of every task) when the mark was taken; with Consume set, a Wait
	// given the mark returns also once that count has moved (a waiter on
	// consumption: a paced producer), which a plain Wait ignores.
	Consumed uint64
	Consume  bool
	// Token is the registered claim (Claimed.Waiting) the waiter waits
	// on, if any: its fulfilment ends a Wait too.
	Token string
}

// SettleOp is what Settle does to each row.
type SettleOp uint8

const (
	// Ack consumes a row leased to req.Lease: acked. A row req.Lease
	// already acked is acked again, not Lost: an ack may be sent twice.
	Ack SettleOp = iota + 1
	// Nack ends the lease of a row leased to req.Lease: ready again,
	// after req.Delay if it is > 0, or dead if the row has had its
	// MaxDeliveries. A row req.Lease already returned, and that was not
	// delivered again since, is not Lost: a nack may be sent twice.
	Nack
	// Extend renews the lease of a row leased to req.Lease to now plus
	// req.Delay (> 0).
	Extend
	// Retry makes a dead row ready again with no deliveries; req.Lease
	// must be "".
	Retry
	// Drop makes a ready or dead row dropped; req.Lease must be "".
	Drop
	// Unwait hands back a lease its caller never received: it cancels
	// the registered claim req.Lease (a Waiting token), and returns the
	// rows it leased if it was fulfilled, and the rows of req.Indexes
	// still leased to req.Lease (a claim whose caller gave up before its
	// reply, or could not read its data). A row handed back is as before
	// that delivery: ready at once, its delivery count not raised by it
	// (so never dead for it). A row not leased to req.Lease is left as it
	// is and not reported Lost. A waiter that gives up sends it.
	Unwait
	// EndBatch forgets the task's open batch (see Batch) whose lease
	// token is req.Lease, whatever ranks have not taken their share:
	// their next claims open a new batch. Its rows keep their state. Sent
	// only where every holder of the batch is known to be gone (an
	// embedded engine reopened under its directory's lock), so that the
	// ranks of the next process start in step.
	EndBatch
	// Undo hands back what the claim whose token is req.Lease did (its
	// caller chose the token, ClaimRequest.Token, and lost the reply): its
	// registration, what that was served, and every row leased to the
	// token, all ready again as Unwait leaves them; and a claim with that
	// token that comes after it, within ten minutes (a request held up on
	// its way), leases nothing and does not stand. Rows the claim dropped
	// (ClaimRequest.Drop, or stale) stay dropped: a drop holds nothing,
	// and a claim made again would drop what is still stale. req.Indexes
	// must be empty. Not for a rank's claim: the other ranks share its
	// batch.
	Undo
)

// SettleRequest names rows of one task and what to do with them.
type SettleRequest struct {
	Task    string
	Op      SettleOp
	Lease   string // the lease token, for Ack, Nack and Extend
	Indexes []uint64
	Delay   time.Duration // Nack: delay before ready (>= 0); Extend: new lease (at least a microsecond)
	// Reason, for Nack only, is why the rows go back (a handler's
	// error): the rows' Delivery.Reason from then on. Valid UTF-8 of at
	// most MaxReason bytes; "" keeps the reason the rows had.
	Reason string
}

// ReasonLeaseEnded is the Delivery.Reason of a row whose lease ended
// unsettled.
const ReasonLeaseEnded = "lease ended"

// MaxReason is the most bytes of a SettleRequest.Reason (CutReason cuts
// a longer text to it).
const MaxReason = 512

// CutReason returns s cut to at most MaxReason bytes at a UTF-8
// boundary, invalid UTF-8 replaced: a valid SettleRequest.Reason.
func CutReason(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= MaxReason {
		return s
	}
	n := MaxReason
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// SettleResult reports rows Settle did not change.
type SettleResult struct {
	// Lost are the indexes not in the state the op needs (for Ack, Nack
	// and Extend: no longer leased to req.Lease: acked, reset, deleted,
	// or expired and delivered again), in req.Indexes' order.
	Lost []uint64
	// Until, for Extend, is when the renewed leases end, as a time of
	// this process (zero when no row was renewed).
	Until time.Time
	// Cleared are the rows the partition's Capacity.ClearAcked removed
	// because this settle completed their consumption: the caller deletes
	// their cells, as after Delete; none where the store deletes them
	// itself (a tq server).
	Cleared []*Row
}

// Bounds of a claim. A log record holds its numbers as 32-bit ones; the
// bounds keep well within that, and within what a claim allocates for them.
const (
	// MaxClaimRows is the most rows one claim may lease
	// (ClaimRequest.Rows), and so the largest group (Group.Size).
	MaxClaimRows = 1 << 24
	// MaxRanks is the most ranks of a data-parallel task (Batch.Ranks):
	// an open batch keeps a flag per rank.
	MaxRanks = 1 << 16
	// MaxDeliveryLimit is the largest ClaimRequest.MaxDeliveries.
	MaxDeliveryLimit = 1<<31 - 1
)

// Check reports a malformed claim with an error wrapping backends.ErrInvalid:
// one outside the bounds above among others.
func (r *ClaimRequest) Check() error {
	switch {
	case r.Task == "":
		return invalidf("claim: empty task name")
	case r.Lease < time.Microsecond:
		return invalidf("claim: lease %v, less than a microsecond (a record's unit)", r.Lease)
	case r.Rows < 1 || r.Rows > MaxClaimRows:
		return invalidf("claim: rows %d outside 1..%d", r.Rows, MaxClaimRows)
	case r.Min < 1 || r.Min > r.Rows:
		return invalidf("claim: min %d outside 1..%d", r.Min, r.Rows)
	case r.MaxDeliveries < 0 || r.MaxDeliveries > MaxDeliveryLimit:
		return invalidf("claim: max deliveries %d outside 0..%d", r.MaxDeliveries, MaxDeliveryLimit)
	case r.Hold < 0:
		return invalidf("claim: hold %v < 0", r.Hold)
	case r.Batch != nil && (r.Batch.Ranks < 1 || r.Batch.Ranks > MaxRanks || r.Batch.Rank < 0 || r.Batch.Rank >= r.Batch.Ranks):
		return invalidf("claim: rank %d of %d (ranks 1..%d)", r.Batch.Rank, r.Batch.Ranks, MaxRanks)
	case r.Select.Group.Size < 0 || r.Select.Group.Size > 0 && (r.Select.Group.Tag == "") == (r.Select.Group.Sep == ""):
		return invalidf("claim: groups of %d by tag %q or key separator %q (one of them)", r.Select.Group.Size, r.Select.Group.Tag, r.Select.Group.Sep)
	case len(r.Holder) > MaxHolder || strings.ContainsFunc(r.Holder, func(c rune) bool { return !unicode.IsPrint(c) }):
		return invalidf("claim: holder %q: more than %d bytes, or not printable", r.Holder, MaxHolder)
	case r.Select.Group.Size > r.Rows:
		return invalidf("claim: %d rows, fewer than a group of %d", r.Rows, r.Select.Group.Size)
	case r.Token != "" && !IsLease(r.Token, r.Holder):
		return invalidf("claim: token %q: not a token of holder %q (see NewLease)", r.Token, r.Holder)
	case r.Select.Group.Deadline < 0 || r.Select.Group.Deadline > 0 && (r.Select.Group.Size == 0 || r.Select.Group.Deadline < time.Microsecond) || r.Select.Group.Partial && r.Select.Group.Deadline == 0:
		return invalidf("claim: group deadline %v (partial %v) without groups or a deadline", r.Select.Group.Deadline, r.Select.Group.Partial)
	}
	return nil
}

// Check reports a malformed settle with an error wrapping backends.ErrInvalid.
func (r *SettleRequest) Check() error {
	switch {
	case r.Task == "":
		return invalidf("settle: empty task name")
	case r.Op < Ack || r.Op > Undo:
		return invalidf("settle: unknown op %d", r.Op)
	case r.Op == Undo && len(r.Indexes) > 0:
		return invalidf("settle: undo of %d indexes (it names a claim by its token, no row)", len(r.Indexes))
	case (r.Op == Retry || r.Op == Drop) != (r.Lease == ""):
		if r.Lease == "" {
			return invalidf("settle: no lease token")
		}
		return invalidf("settle: retry and drop take no lease token")
	case r.Op == Extend && r.Delay < time.Microsecond:
		return invalidf("settle: extend by %v, less than a microsecond (a record's unit)", r.Delay)
	case r.Delay < 0:
		return invalidf("settle: delay %v < 0", r.Delay)
	case r.Reason != "" && r.Op != Nack:
		return invalidf("settle: a reason for an op other than nack")
	case len(r.Reason) > MaxReason || !utf8.ValidString(r.Reason):
		return invalidf("settle: reason of %d bytes (at most %d of UTF-8)", len(r.Reason), MaxReason)
	}
	return nil
}

// CheckPicked reports a Pick result that names a position outside rows,
// or one twice, with an error wrapping backends.ErrInvalid.
func CheckPicked(p Picked, rows int) error {
	seen := make([]bool, rows)
	mark := func(i int) error {
		if i < 0 || i >= rows {
			return invalidf("pick: position %d of %d rows", i, rows)
		}
		if seen[i] {
			return invalidf("pick: position %d twice", i)
		}
		seen[i] = true
		return nil
	}
	for _, u := range p.Units {
		if len(u) == 0 {
			return invalidf("pick: an empty unit")
		}
		for _, i := range u {
			if err := mark(i); err != nil {
				return err
			}
		}
	}
	for _, i := range p.Drop {
		if err := mark(i); err != nil {
			return err
		}
	}
	return nil
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{backends.ErrInvalid}, args...)...)
}

// View is a partition's rows and its tasks' consumption as of one moment
// (see Queue.View).
type View struct {
	Rows  []*Row                // every committed row, by index, as List returns them
	Tasks map[string][]Delivery // as Consumption returns them
	// Mark is the partition's change count as of the view (Wake zero):
	// Wait given it returns once the partition may have changed since.
	Mark Mark
	// Capacity is the partition's, and Used what it holds as Capacity
	// counts it.
	Capacity Capacity
	Used     Usage
	// Inserted counts the rows ever committed anew to the partition, and
	// Consumed, for each of tasks (every task), the rows it ever
	// acknowledged or dropped (since a DeletePartition forgot it): the
	// counts a sample-to-insert ratio is taken on.
	Inserted uint64
	Consumed map[string]uint64
	// Since is, for each of Rows (same positions), when the row last
	// gained a field (its first commit, or one adding a field it had
	// not): when it may have become ready for a task, as a time of this
	// process. A store that does not keep it leaves Since nil (or a time
	// zero): a reader takes it as unknown.
	Since []time.Time
	// Groups are, for each task of tasks (every task) whose claims take
	// groups, the groups waiting incomplete: their id, ready rows, and
	// since when (see GroupWait.Since); oldest first.
	Groups map[string][]GroupWait
}

// GroupWait is a group waiting for its missing members: its ready rows
// past its whole groups of Size (the rows of a group with fewer; with
// 2*Size+1 ready rows, the last by index), its remainder.
type GroupWait struct {
	ID    string
	Rows  int       // ready rows of its remainder (fewer than Size)
	Since time.Time // when its remainder's oldest ready row became ready (its last commit adding a field)
	// Overdue is set once the group has waited its Group.Deadline.
	Overdue bool
}

// MaxHolder is the longest ClaimRequest.Holder.
const MaxHolder = 128

// NewLease returns a new lease token for a claim of holder: random, never
// reused, and naming holder (see HolderOf), so that whoever reads a
// row's Delivery learns who holds it.
func NewLease(holder string) string {
	return holder + "|" + strconv.FormatUint(rand.Uint64()|1<<63, 16)
}

// IsLease reports whether token is one NewLease(holder) could make.
func IsLease(token, holder string) bool {
	digits, ok := strings.CutPrefix(token, holder+"|")
	if !ok || len(digits) != 16 || digits[0] < '8' {
		return false
	}
	return !strings.ContainsFunc(digits, func(c rune) bool { return (c < '0' || c > '9') && (c < 'a' || c > 'f') })
}

// HolderOf returns the holder a lease token names (see NewLease); "" for
// "" or a token that names none.
func HolderOf(token string) string {
	if i := strings.LastIndexByte(token, '|'); i >= 0 {
		return token[:i]
	}
	return ""
}
