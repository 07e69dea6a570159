package rules

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/tinylib/msgp/msgp"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
)

// Records: the changes of a partition as a shared engine's log holds them
// (backends.Log), one record per change, applied in the log's order by
// Apply. A record is its kind (one ASCII letter) and a body of msgpack
// values; backends/LOG.md specifies every kind byte for byte.

// Record kinds.
const (
	KindPrepare   = 'P'
	KindCommit    = 'C'
	KindDelete    = 'D'
	KindDeleteAll = 'X'
	KindAbort     = 'A'
	KindSwept     = 'W'
	KindAbandon   = 'B'
	KindFence     = 'F'
	KindClaim     = 'Q'
	KindSettle    = 'K'
	KindReset     = 'R'
	KindCapacity  = 'L'
	KindFields    = 'E' // DeleteFields
	KindBlock     = 'N'
	KindPutNew    = 'U'
	KindRelease   = 'Y' // ReleaseBlock
)

// ErrCorrupt: a record or snapshot that does not decode. A corrupt
// record applies nothing, alike in every process. It matches
// backends.ErrCorrupt, which callers outside the rules test for.
var ErrCorrupt error = corruptError{}

type corruptError struct{}

func (corruptError) Error() string        { return "rules: corrupt record" }
func (corruptError) Is(target error) bool { return target == backends.ErrCorrupt }

// PrepareRecord is a Prepare of keys and fields that new keys take
// indexes from the indexes reserved for its entry (Entry.Base on), with
// the cells' sizes (nil, or one per cell, field-major). A field's sizes
// are written once when every key's is the same.
func PrepareRecord(keys, fields []string, sizes []int64, indexes int) []byte {
	b := []byte{KindPrepare}
	b = msgp.AppendUint64(b, uint64(indexes))
	b = appendStrings(b, fields)
	b = appendStrings(b, keys)
	if sizes == nil || len(sizes) != len(keys)*len(fields) {
		return b
	}
	return appendSizes(b, sizes, len(keys), len(fields))
}

// maxCells bounds the cells of a Prepare with sizes, so that a corrupt
// record's few bytes cannot ask for a huge allocation.
const maxCells = 1 << 26

// readSizes reads a Prepare's sizes of nk keys and nf fields: nil when
// the record has none.
func readSizes(b []byte, nk, nf int) ([]int64, error) {
	if len(b) == 0 {
		return nil, nil
	}
	sizes, _, err := readSizeArray(b, nk, nf)
	return sizes, err
}

// appendSizes appends sizes (one per cell, field-major) as a Prepare's: a
// field's sizes once when every key's is the same.
func appendSizes(b []byte, sizes []int64, nk, nf int) []byte {
	b = msgp.AppendArrayHeader(b, uint32(nf))
	for j := range nf {
		col := sizes[j*nk : (j+1)*nk]
		if len(col) > 0 && !slices.ContainsFunc(col, func(n int64) bool { return n != col[0] }) {
			b = msgp.AppendInt64(b, col[0])
			continue
		}
		b = msgp.AppendArrayHeader(b, uint32(len(col)))
		for _, n := range col {
			b = msgp.AppendInt64(b, n)
		}
	}
	return b
}

// readSizeArray reads sizes as appendSizes appends them, and returns the
// rest of b.
func readSizeArray(b []byte, nk, nf int) ([]int64, []byte, error) {
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return nil, b, err
	}
	if int(n) != nf {
		return nil, b, fmt.Errorf("sizes of %d fields, want %d", n, nf)
	}
	if nk*nf > maxCells {
		return nil, b, fmt.Errorf("sizes of %d cells, at most %d", nk*nf, maxCells)
	}
	sizes := make([]int64, 0, nk*nf)
	for range nf {
		if msgp.NextType(b) == msgp.ArrayType {
			var m uint32
			if m, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
				return nil, b, err
			}
			if int(m) != nk {
				return nil, b, fmt.Errorf("sizes of %d keys, want %d", m, nk)
			}
			for range nk {
				var v int64
				if v, b, err = msgp.ReadInt64Bytes(b); err != nil {
					return nil, b, err
				}
				if v < 0 {
					return nil, b, fmt.Errorf("negative size %d", v)
				}
				sizes = append(sizes, v)
			}
			continue
		}
		var v int64
		if v, b, err = msgp.ReadInt64Bytes(b); err != nil {
			return nil, b, err
		}
		if v < 0 {
			return nil, b, fmt.Errorf("negative size %d", v)
		}
		for range nk {
			sizes = append(sizes, v)
		}
	}
	return sizes, b, nil
}

// CapacityRecord sets the partition's capacity to c.
func CapacityRecord(c metadata.Capacity) []byte {
	b := msgp.AppendInt64([]byte{KindCapacity}, c.Rows)
	b = msgp.AppendInt64(b, c.Bytes)
	return appendStrings(b, c.ClearAcked)
}

func readCapacity(b []byte) (metadata.Capacity, []byte, error) {
	var c metadata.Capacity
	var err error
	if c.Rows, b, err = msgp.ReadInt64Bytes(b); err != nil {
		return c, b, err
	}
	if c.Bytes, b, err = msgp.ReadInt64Bytes(b); err != nil {
		return c, b, err
	}
	if c.ClearAcked, b, err = readStrings(b); err != nil {
		return c, b, err
	}
	if len(c.ClearAcked) == 0 {
		c.ClearAcked = nil
	}
	return c, b, c.Check()
}

// CommitRecord is a Commit of updates.
func CommitRecord(updates []metadata.RowUpdate) ([]byte, error) {
	var tw tableWriter
	rows := msgp.AppendArrayHeader(nil, uint32(len(updates)))
	for i := range updates {
		u := &updates[i]
		rows = msgp.AppendString(rows, u.Key)
		rows = msgp.AppendUint64(rows, u.Index)
		rows = msgp.AppendUint64(rows, tw.ref(u.Fields))
		var err error
		if rows, err = AppendTag(rows, u.Tag); err != nil {
			return nil, fmt.Errorf("key %q: %w", u.Key, err)
		}
	}
	return tw.record(KindCommit, rows), nil
}

// BlockRecord is a Block of n indexes (the indexes reserved for its
// entry, Entry.Base on) for new rows of fields.
func BlockRecord(fields []string, n int) []byte {
	b := msgp.AppendUint64([]byte{KindBlock}, uint64(n))
	return appendStrings(b, fields)
}

// PutNewRecord is a PutNew of the keys of updates (in order) at indexes
// base on of the block token names, of fields with sizes (nil, or one
// per cell, field-major).
func PutNewRecord(base, token uint64, fields []string, sizes []int64, updates []metadata.RowUpdate) ([]byte, error) {
	c, err := CommitRecord(updates)
	if err != nil {
		return nil, err
	}
	b := msgp.AppendUint64([]byte{KindPutNew}, base)
	b = msgp.AppendUint64(b, token)
	b = appendStrings(b, fields)
	if sizes == nil || len(sizes) != len(updates)*len(fields) {
		b = msgp.AppendNil(b)
	} else {
		b = appendSizes(b, sizes, len(updates), len(fields))
	}
	return append(b, c[1:]...), nil
}

// ReleaseRecord is a ReleaseBlock of the block whose first index is base
// and that token names, written naming the indexes whose cells may
// exist.
func ReleaseRecord(base, token uint64, written []uint64) []byte {
	b := msgp.AppendUint64([]byte{KindRelease}, base)
	return appendIndexes(msgp.AppendUint64(b, token), written)
}

// DeleteRecord is a Delete of keys.
func DeleteRecord(keys []string) []byte { return appendStrings([]byte{KindDelete}, keys) }

// DeletePartitionRecord is a DeletePartition.
func DeletePartitionRecord() []byte { return []byte{KindDeleteAll} }

// AbortRecord aborts the reservations older than olderThan at its entry's
// time.
func AbortRecord(olderThan time.Duration) []byte {
	return msgp.AppendInt64([]byte{KindAbort}, olderThan.Microseconds())
}

// SweptRecord is a Swept of refs.
func SweptRecord(refs []metadata.Ref) []byte { return appendRefs([]byte{KindSwept}, refs, false) }

// AbandonRecord is an Abandon of refs.
func AbandonRecord(refs []metadata.Ref) []byte { return appendRefs([]byte{KindAbandon}, refs, true) }

// FenceRecord voids the records ids: one appended later applies nothing.
func FenceRecord(ids []uint64) []byte {
	b := msgp.AppendArrayHeader([]byte{KindFence}, uint32(len(ids)))
	for _, id := range ids {
		b = msgp.AppendUint64(b, id)
	}
	return b
}

// ClaimRecord is a claim.
func ClaimRecord(a *ClaimArgs) []byte {
	b := []byte{KindClaim}
	b = msgp.AppendString(b, a.Task)
	b = msgp.AppendString(b, a.Token)
	b = msgp.AppendInt64(b, a.Lease.Microseconds())
	b = msgp.AppendInt64(b, int64(a.Rows))
	b = msgp.AppendInt64(b, int64(a.Min))
	b = msgp.AppendInt64(b, int64(a.MaxDeliveries))
	if a.Batch == nil {
		b = msgp.AppendNil(b)
	} else {
		b = msgp.AppendArrayHeader(b, 2)
		b = msgp.AppendInt64(b, int64(a.Batch.Ranks))
		b = msgp.AppendInt64(b, int64(a.Batch.Rank))
	}
	b = appendStrings(b, a.Select.Fields)
	b = msgp.AppendString(b, a.Select.Group.Tag)
	b = msgp.AppendString(b, a.Select.Group.Sep)
	b = msgp.AppendInt64(b, int64(a.Select.Group.Size))
	b = msgp.AppendString(b, a.Select.Stale.Tag)
	b = msgp.AppendBool(b, a.Select.Stale.Drop)
	b = msgp.AppendFloat64(b, a.Floor)
	b = msgp.AppendBool(b, a.Custom)
	b = msgp.AppendArrayHeader(b, uint32(len(a.Units)))
	for _, u := range a.Units {
		b = appendIndexes(b, u)
	}
	b = appendIndexes(b, a.Drop)
	b = msgp.AppendInt64(b, a.Hold.Microseconds())
	b = msgp.AppendString(b, a.Replaces)
	if g := a.Select.Group; g.Deadline > 0 {
		b = msgp.AppendInt64(b, g.Deadline.Microseconds())
		b = msgp.AppendBool(b, g.Partial)
	}
	return b
}

// SettleRecord is a Settle.
func SettleRecord(req *SettleArgs) []byte {
	b := []byte{KindSettle}
	b = msgp.AppendString(b, req.Task)
	b = msgp.AppendUint8(b, uint8(req.Op))
	b = msgp.AppendString(b, req.Lease)
	b = appendIndexes(b, req.Indexes)
	b = msgp.AppendInt64(b, req.Delay.Microseconds())
	if req.Reason != "" {
		b = msgp.AppendString(b, req.Reason)
	}
	return b
}

// ResetRecord is a Reset of task's rows of indexes (nil: every row).
func ResetRecord(task string, indexes []uint64) []byte {
	b := msgp.AppendString([]byte{KindReset}, task)
	if indexes == nil {
		return msgp.AppendNil(b)
	}
	return appendIndexes(b, indexes)
}

// DeleteFieldsRecord is a DeleteFields of fields from the rows of keys.
func DeleteFieldsRecord(keys, fields []string) []byte {
	return appendStrings(appendStrings([]byte{KindFields}, fields), keys)
}

// Result is what applying a record gave, for the process that wrote it.
type Result struct {
	Kind         byte
	Reservations []metadata.Reservation // Prepare
	Commit       metadata.CommitResult  // Commit
	Rows         []*metadata.Row        // Delete, DeletePartition, Capacity
	Claimed      Claimed                // Claim
	Settled      metadata.SettleResult  // Settle
	Unknown      int                    // Abandon: refs it did not know
	Cells        []metadata.Ref         // DeleteFields: the cells it made garbage
	Base, Token  uint64                 // Block: its first index, and its token (its record's ID)
	// Err is the record's refusal (a Commit's ErrConflict, a Prepare's
	// ErrIndexes), ErrCorrupt, or ErrVoid for a record a fence voided;
	// such a record changed nothing.
	Err error
}

// ErrVoid: a record a fence voided before it was appended, as its writer
// asked; it applies nothing.
var ErrVoid = errors.New("rules: record voided by a fence")

// voidFor is how long a fence's voids last, in log time: longer than any
// copy of a request can stay on its way to the server.
const voidFor = 10 * time.Minute

// Replay applies one log entry as Apply does, for a process that does not
// read its result (another process's record): it costs less.
func (p *Partition) Replay(e *backends.Entry) {
	p.quiet = true
	p.Apply(e)
	p.quiet = false
}

// Apply applies one log entry at its time, and returns what it gave.
func (p *Partition) Apply(e *backends.Entry) Result {
	p.tick(e.Time) // and expires voids and undone tokens
	var r Result
	if len(e.Data) > 0 {
		r.Kind = e.Data[0]
	}
	if _, void := p.voids[e.ID]; void {
		r.Err = ErrVoid
		return r
	}
	if err := p.apply(e, &r); err != nil {
		r.Err = err
	}
	p.serve()
	return r
}

func (p *Partition) apply(e *backends.Entry, r *Result) error {
	if len(e.Data) == 0 {
		return fmt.Errorf("%w: empty", ErrCorrupt)
	}
	b := e.Data[1:]
	now := p.now
	switch e.Data[0] {
	case KindPrepare:
		n, b, err := msgp.ReadUint64Bytes(b)
		if err != nil {
			return corrupt(err)
		}
		fields, b, err := readStrings(b)
		if err != nil {
			return corrupt(err)
		}
		keys, b, err := readStrings(b)
		if err != nil {
			return corrupt(err)
		}
		sizes, err := readSizes(b, len(keys), len(fields))
		if err != nil {
			return corrupt(err)
		}
		if n > math.MaxInt32 {
			return fmt.Errorf("%w: %d indexes", ErrCorrupt, n)
		}
		r.Reservations, err = p.Prepare(now, keys, fields, sizes, e.Base, int(n))
		return err
	case KindCapacity:
		c, _, err := readCapacity(b)
		if err != nil {
			return corrupt(err)
		}
		r.Rows = p.SetCapacity(now, c)
	case KindCommit:
		ups, err := readCommit(b)
		if err != nil {
			return corrupt(err)
		}
		r.Commit, err = p.Commit(now, ups)
		return err
	case KindDelete:
		keys, _, err := readStrings(b)
		if err != nil {
			return corrupt(err)
		}
		r.Rows = p.Delete(now, keys)
	case KindDeleteAll:
		r.Rows = p.DeletePartition(now)
	case KindAbort:
		older, _, err := msgp.ReadInt64Bytes(b)
		if err != nil {
			return corrupt(err)
		}
		p.Abort(now, now-older)
	case KindSwept:
		refs, _, err := readRefs(b, false)
		if err != nil {
			return corrupt(err)
		}
		p.Swept(now, refs)
	case KindAbandon:
		refs, _, err := readRefs(b, true)
		if err != nil {
			return corrupt(err)
		}
		r.Unknown = p.Abandon(now, refs)
	case KindFence:
		ids, _, err := readIndexes(b)
		if err != nil {
			return corrupt(err)
		}
		if p.voids == nil {
			p.voids = map[uint64]int64{}
		}
		for _, id := range ids {
			p.voids[id] = now
		}
	case KindClaim:
		a, err := p.readClaim(b)
		if err != nil {
			return corrupt(err)
		}
		if err := checkClaim(a); err != nil {
			return err
		}
		r.Claimed = p.Claim(now, a)
	case KindSettle:
		req, err := p.readSettle(b)
		if err != nil {
			return corrupt(err)
		}
		if err := req.Check(); err != nil {
			return err
		}
		r.Settled = p.Settle(now, req)
	case KindReset:
		task, b, err := msgp.ReadStringBytes(b)
		if err != nil {
			return corrupt(err)
		}
		var idx []uint64
		if msgp.IsNil(b) {
			idx = nil
		} else if idx, _, err = readIndexes(b); err != nil {
			return corrupt(err)
		} else if idx == nil {
			idx = []uint64{}
		}
		if task == "" {
			return fmt.Errorf("%w: reset of no task", ErrCorrupt)
		}
		p.Reset(now, task, idx)
	case KindBlock:
		n, b, err := msgp.ReadUint64Bytes(b)
		if err != nil {
			return corrupt(err)
		}
		fields, _, err := readStrings(b)
		if err != nil {
			return corrupt(err)
		}
		if n > MaxBlock {
			return fmt.Errorf("%w: a block of %d indexes", ErrCorrupt, n)
		}
		if err := p.Block(now, fields, e.Base, e.ID, int(n)); err != nil {
			return err
		}
		r.Base, r.Token = e.Base, e.ID
	case KindPutNew:
		base, token, b, err := readBaseToken(b)
		if err != nil {
			return corrupt(err)
		}
		fields, b, err := readStrings(b)
		if err != nil {
			return corrupt(err)
		}
		// The sizes need the count of updates, which follow them: read
		// the updates from after the sizes first.
		var sizes []int64
		rest := b
		if msgp.IsNil(b) {
			if rest, err = msgp.ReadNilBytes(b); err != nil {
				return corrupt(err)
			}
		} else if rest, err = msgp.Skip(b); err != nil {
			return corrupt(err)
		}
		ups, err := readCommit(rest)
		if err != nil {
			return corrupt(err)
		}
		if !msgp.IsNil(b) {
			if sizes, _, err = readSizeArray(b, len(ups), len(fields)); err != nil {
				return corrupt(err)
			}
		}
		keys := make([]string, len(ups))
		for i := range ups {
			keys[i] = ups[i].Key
		}
		r.Commit, err = p.PutNew(now, base, token, keys, fields, sizes, ups)
		return err
	case KindRelease:
		base, token, b, err := readBaseToken(b)
		if err != nil {
			return corrupt(err)
		}
		written, _, err := readIndexes(b)
		if err != nil {
			return corrupt(err)
		}
		p.ReleaseBlock(now, base, token, written)
	case KindFields:
		fields, b, err := readStrings(b)
		if err != nil {
			return corrupt(err)
		}
		keys, _, err := readStrings(b)
		if err != nil {
			return corrupt(err)
		}
		r.Cells = p.DeleteFields(now, keys, fields)
	default:
		return fmt.Errorf("%w: kind %q", ErrCorrupt, e.Data[0])
	}
	return nil
}

// readBaseToken reads a U's or a Y's first index and block token.
func readBaseToken(b []byte) (base, token uint64, rest []byte, err error) {
	if base, b, err = msgp.ReadUint64Bytes(b); err != nil {
		return 0, 0, b, err
	}
	token, b, err = msgp.ReadUint64Bytes(b)
	return base, token, b, err
}

// checkClaim reports a claim the rules cannot apply (its writer checked
// it: only a corrupt record fails here).
func checkClaim(a *ClaimArgs) error {
	req := metadata.ClaimRequest{Task: a.Task, Lease: a.Lease, Rows: a.Rows, Min: a.Min, MaxDeliveries: a.MaxDeliveries,
		Batch: a.Batch, Select: a.Select, Hold: a.Hold}
	if err := req.Check(); err != nil {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if a.Token == "" {
		return fmt.Errorf("%w: claim without a token", ErrCorrupt)
	}
	return nil
}

func corrupt(err error) error { return fmt.Errorf("%w: %w", ErrCorrupt, err) }

// expireVoids forgets voids and undone claim tokens older than voidFor.
func (p *Partition) expireVoids() {
	expire(p.voids, p.now)
	expire(p.undone, p.now)
}

// expire forgets the entries of m (each kept as of its time) older than
// voidFor at now.
func expire[K comparable](m map[K]int64, now int64) {
	maps.DeleteFunc(m, func(_ K, at int64) bool { return now-at > voidFor.Microseconds() })
}

// expiry is the time the last entry of m (each kept as of its time)
// expires at: voidFor past it (0 with none).
func expiry[K comparable](m map[K]int64) int64 {
	var last int64
	for _, at := range m {
		last = max(last, at+voidFor.Microseconds()+1)
	}
	return last
}

// taskName returns the name b spells, the task's own string when the
// partition has that task (a replayed record allocates no name).
func (p *Partition) taskName(b []byte) string {
	if t := p.tasks[string(b)]; t != nil {
		return t.name
	}
	return string(b)
}

// readStringsAs is readStrings, returning like (not a copy) when the
// strings are like's.
func readStringsAs(b []byte, like []string) ([]string, []byte, error) {
	n, rest, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil || int(n) != len(like) || n == 0 {
		return readStrings(b)
	}
	for _, s := range like {
		var v []byte
		if v, rest, err = msgp.ReadStringZC(rest); err != nil || string(v) != s {
			return readStrings(b)
		}
	}
	return like, rest, nil
}

func (p *Partition) readClaim(b []byte) (*ClaimArgs, error) {
	var a ClaimArgs
	var err error
	var lease, rows, mn, maxd, size int64
	var name []byte
	if name, b, err = msgp.ReadStringZC(b); err != nil {
		return nil, err
	}
	a.Task = p.taskName(name)
	var like []string // the task's fields, which its claims repeat
	if t := p.tasks[a.Task]; t != nil && t.indexed {
		like = t.sel.Fields
	}
	if a.Token, b, err = msgp.ReadStringBytes(b); err != nil {
		return nil, err
	}
	if lease, b, err = msgp.ReadInt64Bytes(b); err != nil {
		return nil, err
	}
	if rows, b, err = msgp.ReadInt64Bytes(b); err != nil {
		return nil, err
	}
	if mn, b, err = msgp.ReadInt64Bytes(b); err != nil {
		return nil, err
	}
	if maxd, b, err = msgp.ReadInt64Bytes(b); err != nil {
		return nil, err
	}
	if msgp.IsNil(b) {
		b = b[1:]
	} else {
		var n uint32
		var ranks, rank int64
		if n, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
			return nil, err
		}
		if n != 2 {
			return nil, fmt.Errorf("batch of %d values", n)
		}
		if ranks, b, err = msgp.ReadInt64Bytes(b); err != nil {
			return nil, err
		}
		if rank, b, err = msgp.ReadInt64Bytes(b); err != nil {
			return nil, err
		}
		if ranks > math.MaxInt32 || rank > math.MaxInt32 {
			return nil, fmt.Errorf("rank %d of %d", rank, ranks)
		}
		a.Batch = &metadata.Batch{Ranks: int(ranks), Rank: int(rank)}
	}
	if a.Select.Fields, b, err = readStringsAs(b, like); err != nil {
		return nil, err
	}
	if a.Select.Group.Tag, b, err = msgp.ReadStringBytes(b); err != nil {
		return nil, err
	}
	if a.Select.Group.Sep, b, err = msgp.ReadStringBytes(b); err != nil {
		return nil, err
	}
	if size, b, err = msgp.ReadInt64Bytes(b); err != nil {
		return nil, err
	}
	if a.Select.Stale.Tag, b, err = msgp.ReadStringBytes(b); err != nil {
		return nil, err
	}
	if a.Select.Stale.Drop, b, err = msgp.ReadBoolBytes(b); err != nil {
		return nil, err
	}
	if a.Floor, b, err = msgp.ReadFloat64Bytes(b); err != nil {
		return nil, err
	}
	if a.Custom, b, err = msgp.ReadBoolBytes(b); err != nil {
		return nil, err
	}
	var nu uint32
	if nu, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
		return nil, err
	}
	if uint32(len(b)) < nu {
		return nil, msgp.ErrShortBytes
	}
	a.Units = make([][]uint64, nu)
	for i := range a.Units {
		if a.Units[i], b, err = readIndexes(b); err != nil {
			return nil, err
		}
	}
	if a.Drop, b, err = readIndexes(b); err != nil {
		return nil, err
	}
	var hold int64
	if hold, b, err = msgp.ReadInt64Bytes(b); err != nil {
		return nil, err
	}
	if a.Replaces, b, err = msgp.ReadStringBytes(b); err != nil {
		return nil, err
	}
	if len(b) > 0 {
		var dl int64
		if dl, b, err = msgp.ReadInt64Bytes(b); err != nil {
			return nil, err
		}
		if a.Select.Group.Partial, _, err = msgp.ReadBoolBytes(b); err != nil {
			return nil, err
		}
		if dl <= 0 || dl > math.MaxInt64/1000 {
			return nil, fmt.Errorf("group deadline %d µs", dl)
		}
		a.Select.Group.Deadline = time.Duration(dl) * time.Microsecond
	}
	if hold < 0 || hold > math.MaxInt64/1000 {
		return nil, fmt.Errorf("claim hold %d µs", hold)
	}
	a.Hold = time.Duration(hold) * time.Microsecond
	const most = math.MaxInt32
	if lease < 0 || rows > most || mn > most || maxd > most || size > most || size < 0 || rows < 0 || mn < 0 || maxd < 0 {
		return nil, fmt.Errorf("claim numbers out of range")
	}
	a.Lease = time.Duration(lease) * time.Microsecond
	a.Rows, a.Min, a.MaxDeliveries, a.Select.Group.Size = int(rows), int(mn), int(maxd), int(size)
	return &a, nil
}

func (p *Partition) readSettle(b []byte) (*SettleArgs, error) {
	var req SettleArgs
	var err error
	var op uint8
	var delay int64
	var name, token []byte
	if name, b, err = msgp.ReadStringZC(b); err != nil {
		return nil, err
	}
	req.Task = p.taskName(name)
	if op, b, err = msgp.ReadUint8Bytes(b); err != nil {
		return nil, err
	}
	req.Op = metadata.SettleOp(op)
	if token, b, err = msgp.ReadStringZC(b); err != nil {
		return nil, err
	}
	if req.Indexes, b, err = readIndexes(b); err != nil {
		return nil, err
	}
	// The token is mostly the lease's of the rows: their string.
	if t := p.tasks[req.Task]; t != nil && len(req.Indexes) > 0 {
		if e := t.entries[req.Indexes[0]]; e != nil && e.lease == string(token) {
			req.Lease = e.lease
		}
	}
	if req.Lease == "" {
		req.Lease = string(token)
	}
	if delay, b, err = msgp.ReadInt64Bytes(b); err != nil {
		return nil, err
	}
	if delay < 0 || delay > math.MaxInt64/1000 {
		return nil, fmt.Errorf("settle delay %d µs", delay)
	}
	req.Delay = time.Duration(delay) * time.Microsecond
	if len(b) > 0 { // a nack's reason (Check bounds it)
		if req.Reason, _, err = msgp.ReadStringBytes(b); err != nil {
			return nil, err
		}
	}
	return &req, nil
}

func appendIndexes(b []byte, idx []uint64) []byte {
	b = msgp.AppendArrayHeader(b, uint32(len(idx)))
	for _, i := range idx {
		b = msgp.AppendUint64(b, i)
	}
	return b
}

func readIndexes(b []byte) ([]uint64, []byte, error) {
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return nil, nil, err
	}
	if uint32(len(b)) < n {
		return nil, nil, msgp.ErrShortBytes
	}
	if n == 0 {
		return nil, b, nil
	}
	out := make([]uint64, n)
	for i := range out {
		if out[i], b, err = msgp.ReadUint64Bytes(b); err != nil {
			return nil, nil, err
		}
	}
	return out, b, nil
}

func appendRefs(b []byte, refs []metadata.Ref, tags bool) []byte {
	b = msgp.AppendArrayHeader(b, uint32(len(refs)))
	for _, r := range refs {
		n := uint32(3)
		if tags {
			n = 4
		}
		b = msgp.AppendArrayHeader(b, n)
		b = msgp.AppendUint64(b, r.Index)
		b = msgp.AppendString(b, r.Field)
		b = msgp.AppendUint64(b, r.Gen)
		if tags {
			b = msgp.AppendString(b, r.Tag)
		}
	}
	return b
}

func readRefs(b []byte, tags bool) ([]metadata.Ref, []byte, error) {
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return nil, nil, err
	}
	if uint32(len(b)) < n {
		return nil, nil, msgp.ErrShortBytes
	}
	want := uint32(3)
	if tags {
		want = 4
	}
	out := make([]metadata.Ref, n)
	for i := range out {
		var parts uint32
		if parts, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
			return nil, nil, err
		}
		if parts != want {
			return nil, nil, fmt.Errorf("cell of %d parts, want %d", parts, want)
		}
		r := &out[i]
		if r.Index, b, err = msgp.ReadUint64Bytes(b); err != nil {
			return nil, nil, err
		}
		if r.Field, b, err = msgp.ReadStringBytes(b); err != nil {
			return nil, nil, err
		}
		if r.Gen, b, err = msgp.ReadUint64Bytes(b); err != nil {
			return nil, nil, err
		}
		if tags {
			if r.Tag, b, err = msgp.ReadStringBytes(b); err != nil {
				return nil, nil, err
			}
		}
	}
	return out, b, nil
}

func appendStrings(b []byte, s []string) []byte {
	b = msgp.AppendArrayHeader(b, uint32(len(s)))
	for _, x := range s {
		b = msgp.AppendString(b, x)
	}
	return b
}

func readStrings(b []byte) ([]string, []byte, error) {
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return nil, nil, err
	}
	if uint32(len(b)) < n {
		return nil, nil, msgp.ErrShortBytes
	}
	if n == 0 {
		return nil, b, nil
	}
	out := make([]string, n)
	for i := range out {
		if out[i], b, err = msgp.ReadStringBytes(b); err != nil {
			return nil, nil, err
		}
	}
	return out, b, nil
}

func readCommit(b []byte) ([]metadata.RowUpdate, error) {
	tables, b, err := readTables(b)
	if err != nil {
		return nil, err
	}
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return nil, err
	}
	if uint32(len(b)) < n {
		return nil, msgp.ErrShortBytes
	}
	out := make([]metadata.RowUpdate, n)
	var tags tagSharer
	for i := range out {
		u := &out[i]
		if u.Key, b, err = msgp.ReadStringBytes(b); err != nil {
			return nil, err
		}
		if u.Index, b, err = msgp.ReadUint64Bytes(b); err != nil {
			return nil, err
		}
		if u.Fields, b, err = readTableRef(b, tables); err != nil {
			return nil, err
		}
		if u.Tag, b, err = tags.decode(b); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// appendFields appends a field table, fields in name order.
func appendFields(b []byte, fields map[string]metadata.FieldInfo) []byte {
	b = msgp.AppendMapHeader(b, uint32(len(fields)))
	for _, f := range slices.Sorted(maps.Keys(fields)) {
		fi := fields[f]
		b = msgp.AppendString(b, f)
		b = msgp.AppendArrayHeader(b, 4)
		b = msgp.AppendString(b, fi.DType)
		if fi.Shape == nil {
			b = msgp.AppendNil(b)
		} else {
			b = msgp.AppendArrayHeader(b, uint32(len(fi.Shape)))
			for _, d := range fi.Shape {
				b = msgp.AppendInt64(b, d)
			}
		}
		b = msgp.AppendUint64(b, fi.Gen)
		b = msgp.AppendString(b, fi.BackendTag)
	}
	return b
}

func decodeFields(b []byte) (map[string]metadata.FieldInfo, []byte, error) {
	nf, b, err := msgp.ReadMapHeaderBytes(b)
	if err != nil {
		return nil, nil, err
	}
	if uint32(len(b)) < nf {
		return nil, nil, msgp.ErrShortBytes
	}
	out := make(map[string]metadata.FieldInfo, nf)
	for range nf {
		var f string
		var fi metadata.FieldInfo
		if f, b, err = msgp.ReadStringBytes(b); err != nil {
			return nil, nil, err
		}
		var parts uint32
		if parts, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
			return nil, nil, err
		}
		if parts != 4 {
			return nil, nil, fmt.Errorf("field %q has %d parts, want 4", f, parts)
		}
		if fi.DType, b, err = msgp.ReadStringBytes(b); err != nil {
			return nil, nil, err
		}
		if msgp.IsNil(b) {
			b = b[1:]
		} else {
			var dims uint32
			if dims, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
				return nil, nil, err
			}
			if uint32(len(b)) < dims {
				return nil, nil, msgp.ErrShortBytes
			}
			fi.Shape = make([]int64, dims)
			for i := range fi.Shape {
				if fi.Shape[i], b, err = msgp.ReadInt64Bytes(b); err != nil {
					return nil, nil, err
				}
			}
		}
		if fi.Gen, b, err = msgp.ReadUint64Bytes(b); err != nil {
			return nil, nil, err
		}
		if fi.BackendTag, b, err = msgp.ReadStringBytes(b); err != nil {
			return nil, nil, err
		}
		out[f] = fi
	}
	return out, b, nil
}

// tableWriter numbers the distinct field tables of a record's rows: rows
// of one put share one map, mostly in a run. Equal tables get one number
// whether or not their maps are one, so a state encodes to the same bytes
// in every process.
type tableWriter struct {
	maps    []map[string]metadata.FieldInfo
	last    int // 1-based number of the last map seen, 0 none
	tables  []byte
	byBytes map[string]int
}

func (t *tableWriter) ref(fields map[string]metadata.FieldInfo) uint64 {
	if fields == nil {
		return 0
	}
	if t.last > 0 && metadata.SameMap(t.maps[t.last-1], fields) {
		return uint64(t.last)
	}
	for i, m := range t.maps {
		if metadata.SameMap(m, fields) {
			t.last = i + 1
			return uint64(t.last)
		}
	}
	start := len(t.tables)
	t.tables = appendFields(t.tables, fields)
	if t.byBytes == nil {
		t.byBytes = map[string]int{}
	}
	if n, ok := t.byBytes[string(t.tables[start:])]; ok {
		t.tables = t.tables[:start]
		t.maps[n-1] = fields // the next rows likely share this map
		t.last = n
		return uint64(n)
	}
	t.maps = append(t.maps, fields)
	t.last = len(t.maps)
	t.byBytes[string(t.tables[start:])] = t.last
	return uint64(t.last)
}

func (t *tableWriter) record(kind byte, rows []byte) []byte {
	b := make([]byte, 1, 6+len(t.tables)+len(rows))
	b[0] = kind
	b = msgp.AppendArrayHeader(b, uint32(len(t.maps)))
	b = append(b, t.tables...)
	return append(b, rows...)
}

// readTables reads a record's field tables; a table equal to the one
// before shares its map.
func readTables(b []byte) ([]map[string]metadata.FieldInfo, []byte, error) {
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return nil, nil, err
	}
	if uint32(len(b)) < n {
		return nil, nil, msgp.ErrShortBytes
	}
	out := make([]map[string]metadata.FieldInfo, n)
	var prev []byte
	for i := range out {
		start := b
		if prev != nil && bytes.HasPrefix(b, prev) {
			out[i], b = out[i-1], b[len(prev):]
			continue
		}
		if out[i], b, err = decodeFields(b); err != nil {
			return nil, nil, err
		}
		prev = start[:len(start)-len(b)]
	}
	return out, b, nil
}

func readTableRef(b []byte, tables []map[string]metadata.FieldInfo) (map[string]metadata.FieldInfo, []byte, error) {
	t, b, err := msgp.ReadUint64Bytes(b)
	if err != nil {
		return nil, nil, err
	}
	if t > uint64(len(tables)) {
		return nil, nil, fmt.Errorf("field table %d of %d", t, len(tables))
	}
	if t == 0 {
		return nil, b, nil
	}
	return tables[t-1], b, nil
}

// TagDepthLimit bounds the nesting of lists and maps in a tag value (the
// value of a tag key is level 1): above what tq accepts, so that every
// tag tq writes fits, and a corrupt record cannot recurse without end.
const TagDepthLimit = 64

// AppendTag appends a row's tag, deterministically: equal tags give equal
// bytes (backends/LOG.md, "Tags"). A nil tag is msgpack nil; any other is a map
// of its entries in increasing byte order of their keys. int64 takes the
// signed forms only, uint64 the unsigned forms only (never a fixint),
// float64 always float64 (its sign, -0.0 included, kept), []byte bin;
// lists and maps nest at most TagDepthLimit deep. Any other type is an
// error matching backends.ErrInvalid naming the tag key.
func AppendTag(b []byte, tag map[string]any) ([]byte, error) {
	if tag == nil {
		return msgp.AppendNil(b), nil
	}
	out := msgp.AppendMapHeader(b, uint32(len(tag)))
	for _, k := range slices.Sorted(maps.Keys(tag)) {
		out = msgp.AppendString(out, k)
		var err error
		if out, err = appendTagValue(out, tag[k], 1); err != nil {
			return nil, fmt.Errorf("%w: tag %q: %w", backends.ErrInvalid, k, err)
		}
	}
	return out, nil
}

func appendTagValue(b []byte, v any, depth int) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return msgp.AppendNil(b), nil
	case bool:
		return msgp.AppendBool(b, x), nil
	case int64:
		return msgp.AppendInt64(b, x), nil
	case uint64:
		return appendTagUint(b, x), nil
	case float64:
		return msgp.AppendFloat64(b, x), nil
	case string:
		return msgp.AppendString(b, x), nil
	case []byte:
		return msgp.AppendBytes(b, x), nil
	case []any:
		if depth >= TagDepthLimit {
			return nil, errTagTooDeep()
		}
		b = msgp.AppendArrayHeader(b, uint32(len(x)))
		for i, e := range x {
			var err error
			if b, err = appendTagValue(b, e, depth+1); err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
		}
		return b, nil
	case map[string]any:
		if depth >= TagDepthLimit {
			return nil, errTagTooDeep()
		}
		b = msgp.AppendMapHeader(b, uint32(len(x)))
		for _, k := range slices.Sorted(maps.Keys(x)) {
			b = msgp.AppendString(b, k)
			var err error
			if b, err = appendTagValue(b, x[k], depth+1); err != nil {
				return nil, fmt.Errorf("[%q]: %w", k, err)
			}
		}
		return b, nil
	}
	return nil, fmt.Errorf("value of type %T is not a tag value (tq normalises tags to nil, bool, int64, uint64, float64, string, []byte, []any and map[string]any)", v)
}

func errTagTooDeep() error {
	return fmt.Errorf("lists and maps nested more than %d deep", TagDepthLimit)
}

// appendTagUint appends u as the smallest msgpack uint form that holds it,
// never a fixint (which reads back as signed).
func appendTagUint(b []byte, u uint64) []byte {
	switch {
	case u <= math.MaxUint8:
		return append(b, 0xcc, byte(u))
	case u <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(u))
	case u <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(u))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xcf), u)
}

// tagSharer decodes the tags of rows read one after another, giving a
// row whose tag has the same bytes as the row's before it (the rows of
// one put often share their tag: a prompt's responses) that row's map,
// not a copy: tags are read-only once decoded, and a partition's rows
// then hold one map per run of equal tags.
type tagSharer struct {
	raw []byte // the last tag decoded, as written
	tag map[string]any
}

// decode is DecodeTag, sharing the last tag's map when b starts with its
// bytes (a tag's encoding ends where it ends: no longer tag starts with
// a whole shorter one).
func (s *tagSharer) decode(b []byte) (map[string]any, []byte, error) {
	if s.raw != nil && bytes.HasPrefix(b, s.raw) {
		return s.tag, b[len(s.raw):], nil
	}
	tag, rest, err := DecodeTag(b)
	if err != nil {
		return nil, nil, err
	}
	s.raw, s.tag = b[:len(b)-len(rest)], tag
	return tag, rest, nil
}

// DecodeTag decodes a tag AppendTag wrote and returns what follows it.
// Values come back with the Go types they were written with: every
// signed form as int64, every uint form as uint64, float64 (float32 too)
// as float64, bin as []byte (empty, not nil, for none), arrays as []any,
// maps as map[string]any. Any other msgpack type is an error.
func DecodeTag(b []byte) (map[string]any, []byte, error) {
	if msgp.IsNil(b) {
		return nil, b[1:], nil
	}
	return decodeTagMap(b, 1)
}

func decodeTagMap(b []byte, depth int) (map[string]any, []byte, error) {
	n, b, err := msgp.ReadMapHeaderBytes(b)
	if err != nil {
		return nil, nil, err
	}
	if uint32(len(b)) < n {
		return nil, nil, msgp.ErrShortBytes
	}
	m := make(map[string]any, n)
	for range n {
		var k string
		var v any
		if k, b, err = msgp.ReadStringBytes(b); err != nil {
			return nil, nil, err
		}
		if v, b, err = decodeTagValue(b, depth); err != nil {
			return nil, nil, err
		}
		m[k] = v
	}
	return m, b, nil
}

func decodeTagValue(b []byte, depth int) (any, []byte, error) {
	switch msgp.NextType(b) {
	case msgp.NilType:
		b, err := msgp.ReadNilBytes(b)
		return nil, b, err
	case msgp.BoolType:
		return msgp.ReadBoolBytes(b)
	case msgp.IntType:
		return msgp.ReadInt64Bytes(b)
	case msgp.UintType:
		return msgp.ReadUint64Bytes(b)
	case msgp.Float64Type, msgp.Float32Type:
		return msgp.ReadFloat64Bytes(b)
	case msgp.StrType:
		return msgp.ReadStringBytes(b)
	case msgp.BinType:
		v, b, err := msgp.ReadBytesBytes(b, nil)
		if v == nil && err == nil {
			v = []byte{}
		}
		return v, b, err
	case msgp.ArrayType:
		if depth >= TagDepthLimit {
			return nil, nil, errTagTooDeep()
		}
		n, b, err := msgp.ReadArrayHeaderBytes(b)
		if err != nil {
			return nil, nil, err
		}
		if uint32(len(b)) < n {
			return nil, nil, msgp.ErrShortBytes
		}
		out := make([]any, n)
		for i := range out {
			if out[i], b, err = decodeTagValue(b, depth+1); err != nil {
				return nil, nil, err
			}
		}
		return out, b, nil
	case msgp.MapType:
		if depth >= TagDepthLimit {
			return nil, nil, errTagTooDeep()
		}
		return decodeTagMap(b, depth+1)
	}
	return nil, nil, fmt.Errorf("msgpack type %v is not a tag value", msgp.NextType(b))
}
