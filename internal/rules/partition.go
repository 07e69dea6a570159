package rules

import (
	"errors"
	"slices"

	"github.com/google/btree"

	"github.com/tqgo/tqgo/backends/metadata"
)

// ErrIndexes: a Prepare found more new keys than the global indexes
// reserved for it (another client removed a row since the caller looked).
// Nothing was applied; prepare again.
var ErrIndexes = errors.New("rules: too few indexes reserved")

// Partition is the state of one partition: its rows (see rows.go) and
// every task's consumption of them (see consume.go). It is not safe for
// concurrent use: the caller holds a lock.
//
// Every method that changes the state takes the time, in microseconds
// since the Unix epoch by the clock that judges the partition's leases
// (the server's), and applies it after any time given before: the
// partition's clock never goes back.
type Partition struct {
	now int64 // the latest time given

	rows      map[string]*row
	byIndex   map[uint64]*row // committed rows
	committed int
	// sorted is the committed rows by index, built by List and kept
	// until a change it cannot follow (nil).
	sorted []*metadata.Row
	// pending counts the reservations of rows, so aborts and sweeps skip
	// the scan of rows when there are none.
	pending int
	// garbage is every cell known unreferenced and not yet swept, in the
	// order they became so (a commit's Superseded and Stale are one run).
	garbage []metadata.Ref
	// orphans are the reservations of removed rows: aborted, but their
	// put may still be writing them, so they become garbage only once
	// old enough (Abort).
	orphans []pendingRef
	// uncommitted are the rows Prepare made that were never committed,
	// by index (byIndex has the others).
	uncommitted map[uint64]*row
	// far are pending reservations of live rows pushed out of their
	// fieldGen's window; almost always empty.
	far []pendingRef
	// wins are the windows of the fields with reservations pending in
	// them (fieldGen.w), usedWins of them in use, and freeWins the places
	// of the others, for the next (see newWindow): their places are not
	// part of the state.
	wins     []pendWindow
	freeWins []uint32
	usedWins int

	// seq counts the changes that may make rows ready for a task
	// (commits, deletes, Nacks, Retries, Resets, a batch opened), for
	// Wait's marks.
	seq uint64
	// consumed counts acknowledgements and drops (every task's), for
	// waiters on consumption (metadata.Mark.Consumed); inserted the rows
	// committed for the first time. Both only grow.
	consumed, inserted uint64
	tasks              map[string]*task
	// voids are record IDs a fence voided, with the log time of the
	// fence: a record appended later with one of them applies nothing.
	voids map[uint64]int64

	// capacity bounds the partition; held counts the new rows of puts
	// in progress that hold room of it, bytes the size of every row's
	// newest writes (see capacity.go).
	capacity metadata.Capacity
	held     int
	bytes    int64

	// blocks are the live blocks of indexes reserved ahead (see
	// blocks.go), by base.
	blocks []*block

	// quiet is set while Replay applies a record whose result nobody
	// reads: the rules skip building it (not part of the state).
	quiet bool
	// fulfilled are the standing claims served since TakeFulfilled.
	fulfilled []Claimed
	// undone are the claim tokens a Settle Undo named, with its log time:
	// a claim of one coming later leases nothing (kept voidFor).
	undone map[string]int64
	// byNumber indexes the committed rows by the number in a tag, per
	// tag Oldest was asked of (see there).
	byNumber map[string]*btree.BTreeG[verKey]
	// sum indexes the committed rows for Summary, once asked (see there);
	// each task's counts (task.cnt) are kept from then too.
	sum *summaryIndex
}

// New returns an empty partition.
func New() *Partition {
	return &Partition{rows: map[string]*row{}, byIndex: map[uint64]*row{}, tasks: map[string]*task{}}
}

func (p *Partition) tick(now int64) {
	if now > p.now {
		p.now = now
		p.expireVoids()
	}
}

// Tick moves the partition's clock to now, if later: for a read (such as
// Consumption) that should see what expired by then.
func (p *Partition) Tick(now int64) { p.tick(now) }

// Now returns the partition's clock: the latest time given.
func (p *Partition) Now() int64 { return p.now }

// Seq returns the partition's change count (see metadata.Mark).
func (p *Partition) Seq() uint64 { return p.seq }

// Consumed returns how many acknowledgements and drops the partition has
// applied, of every task, ever (see metadata.Mark.Consumed).
func (p *Partition) Consumed() uint64 { return p.consumed }

// Counts returns the rows ever committed anew, and each of tasks' (every
// task's when none) rows ever acknowledged or dropped.
func (p *Partition) Counts(tasks ...string) (inserted uint64, consumed map[string]uint64) {
	consumed = map[string]uint64{}
	for _, name := range tasks {
		consumed[name] = 0
	}
	for name, t := range p.tasks {
		if _, want := consumed[name]; want || len(tasks) == 0 {
			consumed[name] = t.consumed
		}
	}
	return p.inserted, consumed
}

func (p *Partition) consume(t *task) {
	t.consumed++
	p.consumed++
}

func (p *Partition) bump() { p.seq++ }

// Empty reports whether the partition holds nothing worth keeping: no
// row (committed or prepared), no garbage, no orphan, no live block, no void or undone
// claim token, no task with a standing claim, and no open batch whose end
// is to come (a rank that has not taken its turn of it will). A log whose
// state is Empty may be emptied, and every reader then starts from the
// empty state: what it drops must be nothing another reader still acts
// on. Served claims may go: their rows are gone, so a claim that replaces
// one finds nothing to lease.
func (p *Partition) Empty() bool { return p.EmptyAt(p.now) }

// EmptyAt is Empty as of log time now (not before the partition's clock):
// voids and undone claim tokens that expire by then count for nothing,
// nor batches that end by then.
func (p *Partition) EmptyAt(now int64) bool {
	now = max(now, p.now)
	if len(p.rows) > 0 || len(p.garbage) > 0 || len(p.orphans) > 0 || len(p.blocks) > 0 || !p.capacity.Zero() {
		return false
	}
	if p.lastExpiry() > now {
		return false
	}
	for _, t := range p.tasks {
		if len(t.standing) > 0 || slices.ContainsFunc(t.batches, func(b *openBatch) bool { return t.live(b, now) }) {
			return false
		}
	}
	return true
}

// EmptyFrom reports whether the partition will be Empty once its voids
// and undone claim tokens expire and nothing else happens, and from what
// log time (the partition's clock when it is Empty now): a log whose
// state holds nothing else may be emptied then.
func (p *Partition) EmptyFrom() (int64, bool) {
	at := max(p.lastExpiry(), p.now)
	return at, p.EmptyAt(at)
}

// lastExpiry is the log time the last void or undone token expires at (0
// with none).
func (p *Partition) lastExpiry() int64 {
	return max(expiry(p.voids), expiry(p.undone))
}
