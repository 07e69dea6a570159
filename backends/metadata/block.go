package metadata

import (
	"context"
	"errors"
	"fmt"

	"github.com/tqgo/tqgo/backends"
)

// MaxBlock bounds the indexes of one block (see Blocker).
const MaxBlock = 4096

// Blocker is an optional interface of a MetaStore that reserves global
// indexes ahead of the puts that take them, so that a put of new keys
// writes its cells first and then makes one call, PutNew, that reserves
// and commits its rows at once: through a server, two round trips (the
// cells, PutNew) where Prepare, the cells and Commit are three.
//
// A block is indexes base..base+n-1 for new rows whose cells are of a
// set of fields. The caller writes the cells of a put of new keys under
// backends.StorageKey(index, field, 0), index from the block, then calls
// PutNew. Until a PutNew takes an index, the block is the caller's: the
// store never hands that index out otherwise, nor deletes its cells. A
// block ends when PutNew has taken every index, when the caller releases
// it, or when Garbage aborts it (it is abandoned: no PutNew took an index
// of it for olderThan); the cells of its indexes nothing took are then
// garbage, returned by Garbage until swept, with generation 0 and no
// backend tag (those of a release: only those it names written).
type Blocker interface {
	// Block reserves n indexes (1 to MaxBlock) for new rows whose cells
	// are of fields (sorted, distinct, at least one) and returns the
	// block: its first index and its token, which PutNew and
	// ReleaseBlock repeat. It fails with backends.ErrInvalid for bad
	// arguments; with backends.ErrConflict while the partition's
	// Capacity bounds bytes (a PutNew writes its cells before the
	// capacity counts them: such puts go by Prepare) or the partition
	// holds as many live blocks as the store allows (1,024 for this
	// module's stores); and with errors.ErrUnsupported when the store has
	// no blocks. Its errors never match backends.ErrOutcomeUnknown: a
	// Block whose outcome is unknown reserved at most indexes nobody
	// uses, which Garbage aborts in time.
	Block(ctx context.Context, partition string, fields []string, n int) (IndexBlock, error)
	// PutNew is, atomically, Prepare of keys and fields (sizes as
	// Prepare's) giving key i index base+i of the live block token names
	// and generation 0 of each field, then Commit of updates (one per
	// key, in order, at its index, setting every one of fields at
	// generation 0: at least one), for keys none of which has a row. It
	// fails, applying nothing: with backends.ErrInvalid for updates that
	// are not so, or keys repeated; with a *FullError when the Capacity
	// has no room for the rows; with backends.ErrConflict when a key has
	// a row (put it by Prepare), the Capacity bounds bytes, or the
	// indexes are not all untaken indexes of one live block whose fields
	// hold fields (the block ended: Garbage aborted it, and its cells are
	// garbage); with backends.ErrReservationLost (which matches
	// ErrConflict) when the block holding base is another than token
	// names, or the store knows neither the block nor the put's cells:
	// the block was lost with metadata a failover replaced, its indexes
	// may be another row's now, and the caller must not delete the cells
	// by storage key; so is one Garbage aborted and whose garbage was
	// swept since, which the store can no longer tell from one lost. A
	// refusal leaves a live block's indexes the caller's: PutNew may be
	// made again (after a FullError, once there is room). A lost reply
	// is settled as Commit's; an error matching
	// backends.ErrOutcomeUnknown may have applied, and the caller must
	// neither use those indexes again nor delete their cells.
	PutNew(ctx context.Context, partition string, token, base uint64, keys, fields []string, sizes []int64, updates []RowUpdate) (CommitResult, error)
	// ReleaseBlock ends the block b: its indexes nothing took are handed
	// out never again, and the cells of those of written (indexes the
	// caller wrote cells under and may not have deleted) become garbage.
	// A block the store does not hold as b (used up, aborted, or another
	// at that index) is no error, and nothing changes.
	ReleaseBlock(ctx context.Context, partition string, b IndexBlock, written []uint64) error
}

// IndexBlock names a block of indexes: its first index, and a token
// that tells it from any other block a store may hold at that index (one
// it handed out again after a failover lost this one).
type IndexBlock struct {
	Base, Token uint64
}

// Block reserves a block through q (see Blocker); a q that is not a
// Blocker fails with errors.ErrUnsupported.
func Block(ctx context.Context, q MetaStore, partition string, fields []string, n int) (IndexBlock, error) {
	if b, ok := q.(Blocker); ok {
		return b.Block(ctx, partition, fields, n)
	}
	return IndexBlock{}, errors.ErrUnsupported
}

// PutNew puts new keys through q (see Blocker); a q that is not a Blocker
// fails with errors.ErrUnsupported.
func PutNew(ctx context.Context, q MetaStore, partition string, token, base uint64, keys, fields []string, sizes []int64, updates []RowUpdate) (CommitResult, error) {
	if b, ok := q.(Blocker); ok {
		return b.PutNew(ctx, partition, token, base, keys, fields, sizes, updates)
	}
	return CommitResult{}, errors.ErrUnsupported
}

// ReleaseBlock releases a block through q (see Blocker); a q that is not
// a Blocker fails with errors.ErrUnsupported.
func ReleaseBlock(ctx context.Context, q MetaStore, partition string, b IndexBlock, written []uint64) error {
	if bl, ok := q.(Blocker); ok {
		return bl.ReleaseBlock(ctx, partition, b, written)
	}
	return errors.ErrUnsupported
}

// CheckBlock checks Block's arguments: n in 1..MaxBlock, fields sorted,
// distinct and not empty.
func CheckBlock(fields []string, n int) error {
	if n < 1 || n > MaxBlock {
		return fmt.Errorf("%w: a block of %d indexes (1 to %d)", backends.ErrInvalid, n, MaxBlock)
	}
	if len(fields) == 0 {
		return fmt.Errorf("%w: a block of no fields", backends.ErrInvalid)
	}
	for i := 1; i < len(fields); i++ {
		if fields[i-1] >= fields[i] {
			return fmt.Errorf("%w: a block's fields must be sorted and distinct", backends.ErrInvalid)
		}
	}
	return nil
}
