package rules

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
)

// Blocks: global indexes reserved ahead of the puts that take them, so
// that a put of new keys writes its cells first and then reserves and
// commits its rows in one record (PutNew), where Prepare, the cells and
// Commit take two.

// MaxBlock bounds the indexes of one block.
const MaxBlock = metadata.MaxBlock

// maxBlocks bounds the live blocks of a partition: a Block beyond it is
// refused (ErrConflict), so that clients that reserve and never release
// cannot grow the partition without bound before Abort ends their blocks.
const maxBlocks = 1024

// block is indexes base..base+n-1, reserved for new rows whose cells are
// of fields (sorted, distinct). taken marks the offsets a PutNew took or
// a release gave back; at is the log time of its grant or its latest
// PutNew: Abort takes a block idle since the cutoff for abandoned.
type block struct {
	base uint64
	// token is the ID of the block's record: a PutNew or a release names
	// it, so that a block the log lost in a failover, whose indexes the
	// engine then handed out again, is never taken for another's.
	token  uint64
	n      uint32
	fields []string
	at     int64
	taken  []uint64 // a bit per offset
}

func (b *block) isTaken(off uint64) bool { return b.taken[off/64]&(1<<(off%64)) != 0 }
func (b *block) take(off uint64)         { b.taken[off/64] |= 1 << (off % 64) }

// left counts the offsets nothing took.
func (b *block) left() int {
	n := int(b.n)
	for _, w := range b.taken {
		n -= bits.OnesCount64(w)
	}
	return n
}

// garbage appends to refs, for each offset of b nothing took that in
// also names (nil: every one), the cells a put may have written there:
// generation 0 of each of b's fields, with no backend tag.
func (b *block) garbage(refs []metadata.Ref, in func(index uint64) bool) []metadata.Ref {
	for off := range uint64(b.n) {
		if b.isTaken(off) || in != nil && !in(b.base+off) {
			continue
		}
		for _, f := range b.fields {
			refs = append(refs, metadata.Ref{Index: b.base + off, Field: f})
		}
	}
	return refs
}

// Block reserves, at time now, indexes base..base+n-1 (the entry's, from
// the log's counter) for new rows whose cells are of fields. It fails
// with backends.ErrInvalid for n outside 1..MaxBlock or fields empty,
// unsorted or repeated, and with backends.ErrConflict while the
// partition's capacity bounds bytes (a PutNew writes its cells before
// the capacity counts them) or holds maxBlocks live blocks; either way
// the indexes are skipped. A block that overlaps a live one is
// ErrCorrupt. token names the block (its record's ID).
func (p *Partition) Block(now int64, fields []string, base, token uint64, n int) error {
	p.tick(now)
	if err := metadata.CheckBlock(fields, n); err != nil {
		return err
	}
	if p.capacity.Bytes > 0 {
		return fmt.Errorf("%w: the partition's capacity bounds bytes: put by Prepare", backends.ErrConflict)
	}
	if len(p.blocks) >= maxBlocks {
		return fmt.Errorf("%w: the partition holds %d live blocks, the most it may: put by Prepare", backends.ErrConflict, maxBlocks)
	}
	// Indexes come from the engine's counter, each handed out once, but
	// not always in log order: on a Redis Cluster an append draws its
	// indexes before it appends, so a block may come after a live block
	// above it. One that overlaps a live block is a record whose writer
	// did not have its indexes reserved.
	end := base + uint64(n)
	i, _ := slices.BinarySearchFunc(p.blocks, base, func(b *block, x uint64) int { return cmp.Compare(b.base, x) })
	if end < base || i > 0 && p.blocks[i-1].base+uint64(p.blocks[i-1].n) > base || i < len(p.blocks) && p.blocks[i].base < end {
		return fmt.Errorf("%w: a block at %d to %d, overlapping a live block or past the last index", ErrCorrupt, base, end-1)
	}
	p.blocks = slices.Insert(p.blocks, i, &block{base: base, token: token, n: uint32(n), fields: fields, at: p.now, taken: make([]uint64, (n+63)/64)})
	return nil
}

// blockAt returns the live block holding index, or nil.
func (p *Partition) blockAt(index uint64) *block {
	i, found := slices.BinarySearchFunc(p.blocks, index, func(b *block, x uint64) int {
		switch {
		case x < b.base:
			return 1
		case x >= b.base+uint64(b.n):
			return -1
		}
		return 0
	})
	if !found {
		return nil
	}
	return p.blocks[i]
}

// PutNew reserves and commits, at time now, a row for each of keys (none
// of which has a row) at indexes base..base+len(keys)-1 of one live
// block, atomically: Prepare of keys and fields with sizes, the rows
// taking those indexes and generation 0 of each field, then Commit of
// updates. It fails, changing nothing, with backends.ErrInvalid when
// updates are not one per key, in order, at its index, each setting
// every one of fields (at least one) at generation 0, or keys repeat; with backends.ErrConflict when a key
// has a row, or the indexes are not all untaken indexes of one live
// block whose fields hold fields, or the capacity bounds bytes (with
// backends.ErrReservationLost, which matches ErrConflict, when no block
// holds base and the partition knows none of the put's cells as garbage:
// see knowsBlock, or when the block holding base is not the one token
// names); and with a *metadata.FullError when the capacity has no room
// for the rows.
func (p *Partition) PutNew(now int64, base, token uint64, keys, fields []string, sizes []int64, updates []metadata.RowUpdate) (metadata.CommitResult, error) {
	p.tick(now)
	if err := checkPutNew(base, keys, fields, sizes, updates); err != nil {
		return metadata.CommitResult{}, err
	}
	if len(keys) == 0 {
		return metadata.CommitResult{}, nil
	}
	b := p.blockAt(base)
	if b == nil {
		err := backends.ErrReservationLost
		if p.knowsBlock(base, len(keys), fields) {
			err = backends.ErrConflict
		}
		return metadata.CommitResult{}, fmt.Errorf("%w: indexes %d to %d are no live block's", err, base, base+uint64(len(keys))-1)
	}
	if b.token != token {
		// Another's block: the one the caller holds was lost (a failover
		// that lost its record), and the engine handed its indexes out
		// again.
		return metadata.CommitResult{}, fmt.Errorf("%w: indexes %d to %d are another block's", backends.ErrReservationLost, base, base+uint64(len(keys))-1)
	}
	if base+uint64(len(keys)) > b.base+uint64(b.n) {
		return metadata.CommitResult{}, fmt.Errorf("%w: indexes %d to %d are not one block's", backends.ErrConflict, base, base+uint64(len(keys))-1)
	}
	for j := range len(keys) {
		if b.isTaken(base - b.base + uint64(j)) {
			return metadata.CommitResult{}, fmt.Errorf("%w: index %d of the block was taken", backends.ErrConflict, base+uint64(j))
		}
	}
	for _, f := range fields {
		if _, ok := slices.BinarySearch(b.fields, f); !ok {
			return metadata.CommitResult{}, fmt.Errorf("%w: field %q is not the block's", backends.ErrConflict, f)
		}
	}
	if p.capacity.Bytes > 0 {
		return metadata.CommitResult{}, fmt.Errorf("%w: the partition's capacity bounds bytes: put by Prepare", backends.ErrConflict)
	}
	if n := p.NewKeys(keys); n != len(keys) {
		for _, k := range keys {
			if p.rows[k] != nil {
				return metadata.CommitResult{}, fmt.Errorf("%w: key %q has a row", backends.ErrConflict, k)
			}
		}
	}
	if full := p.room(keys, fields, sizes, len(keys)); full != nil {
		return metadata.CommitResult{}, full
	}
	// Checked: neither can fail now.
	if _, err := p.Prepare(now, keys, fields, sizes, base, len(keys)); err != nil {
		panic(fmt.Sprintf("rules: PutNew's checked Prepare failed: %v", err))
	}
	res, err := p.Commit(now, updates)
	if err != nil {
		panic(fmt.Sprintf("rules: PutNew's checked Commit failed: %v", err))
	}
	for j := range len(keys) {
		b.take(base - b.base + uint64(j))
	}
	b.at = p.now
	if b.left() == 0 {
		p.dropBlock(b)
	}
	return res, nil
}

// knowsBlock reports whether a cell of a PutNew of n keys at base with
// fields is garbage not swept yet: its block was aborted (so its cells
// are garbage the caller may delete too). A refused PutNew whose block
// the partition does not know otherwise names a block the log lost (a
// failover to a replica that never had it), whose indexes may be
// another row's now. It scans the garbage: it runs only on a refusal.
func (p *Partition) knowsBlock(base uint64, n int, fields []string) bool {
	return slices.ContainsFunc(p.garbage, func(g metadata.Ref) bool {
		return g.Gen == 0 && g.Index >= base && g.Index < base+uint64(n) && slices.Contains(fields, g.Field)
	})
}

// checkPutNew checks a PutNew's arguments alone.
func checkPutNew(base uint64, keys, fields []string, sizes []int64, updates []metadata.RowUpdate) error {
	if len(updates) != len(keys) {
		return fmt.Errorf("%w: %d updates for %d keys", backends.ErrInvalid, len(updates), len(keys))
	}
	if sizes != nil && len(sizes) != len(keys)*len(fields) {
		return fmt.Errorf("%w: %d sizes for %d cells", backends.ErrInvalid, len(sizes), len(keys)*len(fields))
	}
	if len(keys) > MaxBlock {
		return fmt.Errorf("%w: %d keys, a block holds %d at most", backends.ErrInvalid, len(keys), MaxBlock)
	}
	if len(keys) > 0 && len(fields) == 0 {
		return fmt.Errorf("%w: a put of new keys by a block writes at least one field", backends.ErrInvalid)
	}
	for i, f := range fields {
		if slices.Contains(fields[:i], f) {
			return fmt.Errorf("%w: field %q twice", backends.ErrInvalid, f)
		}
	}
	seen := make(map[string]struct{}, len(keys))
	for i, k := range keys {
		if _, twice := seen[k]; twice {
			return fmt.Errorf("%w: key %q twice", backends.ErrInvalid, k)
		}
		seen[k] = struct{}{}
		u := &updates[i]
		if u.Key != k || u.Index != base+uint64(i) {
			return fmt.Errorf("%w: update %d is of key %q index %d, not %q index %d", backends.ErrInvalid, i, u.Key, u.Index, k, base+uint64(i))
		}
		if len(u.Fields) != len(fields) {
			return fmt.Errorf("%w: key %q sets %d fields, the put writes %d: every one", backends.ErrInvalid, k, len(u.Fields), len(fields))
		}
		for f, fi := range u.Fields {
			if fi.Gen != 0 || !slices.Contains(fields, f) {
				return fmt.Errorf("%w: key %q field %q generation %d: not a field of the put at generation 0", backends.ErrInvalid, k, f, fi.Gen)
			}
		}
	}
	return nil
}

// ReleaseBlock ends, at time now, the block whose first index is base:
// the indexes nothing took are handed out never again, and the cells of
// those of written (indexes a put wrote cells under and may not have
// deleted) become garbage. An unknown base (a block aborted or used up),
// or a block token does not name, changes nothing.
func (p *Partition) ReleaseBlock(now int64, base, token uint64, written []uint64) {
	p.tick(now)
	b := p.blockAt(base)
	if b == nil || b.base != base || b.token != token {
		return
	}
	if len(written) > 0 {
		// Which of the block's offsets written names, in one pass: a
		// record may name many indexes, and every reader applies it.
		named := make([]uint64, len(b.taken))
		for _, i := range written {
			if off := i - b.base; i >= b.base && off < uint64(b.n) {
				named[off/64] |= 1 << (off % 64)
			}
		}
		p.garbage = b.garbage(p.garbage, func(i uint64) bool { off := i - b.base; return named[off/64]&(1<<(off%64)) != 0 })
	}
	p.dropBlock(b)
}

func (p *Partition) dropBlock(b *block) {
	p.blocks = slices.DeleteFunc(p.blocks, func(o *block) bool { return o == b })
}

// abortBlocks ends the blocks idle since cutoff: the cells of the
// indexes nothing took become garbage (a put may have written them).
func (p *Partition) abortBlocks(cutoff int64) {
	p.blocks = slices.DeleteFunc(p.blocks, func(b *block) bool {
		if b.at > cutoff {
			return false
		}
		p.garbage = b.garbage(p.garbage, nil)
		return true
	})
}

// Blocks returns how many blocks are live and how many of their indexes
// nothing took.
func (p *Partition) Blocks() (blocks, left int) {
	for _, b := range p.blocks {
		left += b.left()
	}
	return len(p.blocks), left
}
