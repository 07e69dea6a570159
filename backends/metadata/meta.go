package metadata

import (
	"context"
	"maps"
	"slices"
	"time"
	"unsafe"

	"github.com/tqgo/tqgo/backends"
)

// FieldInfo describes one committed (row, field) cell.
type FieldInfo struct {
	// DType is the tensor's dtype name ("float32"), or "" for a value that is
	// not a tensor.
	DType string `json:"d,omitempty"`
	// Shape is the tensor's shape (nil for a non-tensor value).
	Shape []int64 `json:"s,omitempty"`
	// Gen is the write generation whose bytes are current (see backends.StorageKey).
	Gen uint64 `json:"g,omitempty"`
	// BackendTag is the tag the data backend reported for the cell, if any.
	BackendTag string `json:"b,omitempty"`
}

// Row is one committed sample of a partition. Rows a store returns are
// read-only: a store may hand the same Row to many callers, and rows may
// share their Fields and Tag maps with each other (see Merger).
type Row struct {
	Key    string               `json:"k"`
	Index  uint64               `json:"i"`
	Fields map[string]FieldInfo `json:"f,omitempty"`
	Tag    map[string]any       `json:"t,omitempty"`
}

// Reservation is what Prepare hands out for one key.
type Reservation struct {
	Index uint64 // the row's global index
	// Gens is the write generation reserved for each field. It is
	// read-only: reservations with the same generations (every new row of
	// a Prepare, say) may share one map.
	Gens map[string]uint64
	// New reports that this Prepare gave the key its row: the key was
	// new to the partition.
	New bool
}

// RowUpdate is what Commit applies to one row.
type RowUpdate struct {
	Key   string
	Index uint64 // from the Reservation; Commit checks it still holds
	// Fields to set, each carrying the Gen its Reservation gave. The store
	// may keep the map and the FieldInfo values, Shape slices included: the
	// caller must not modify them after Commit (tq hands over its own
	// copies). Updates may share one map (tq gives rows whose cells are
	// equal one map), so the store must not modify it either: it copies
	// before merging, as MergeRow and Merger do.
	Fields map[string]FieldInfo
	// Tag, when non-nil, is merged into the row's tag (keys overwrite).
	// Like Fields, the store may keep the map (tq hands over its own
	// copies, which updates may share), and neither side modifies it.
	Tag map[string]any
}

// Ref names one stored cell, for the caller to delete.
type Ref struct {
	Index uint64
	Field string
	Gen   uint64
	Tag   string // the backend tag the cell was written with
}

// Key is the storage key of the cell.
func (r Ref) Key() string { return backends.StorageKey(r.Index, r.Field, r.Gen) }

// MetaStore is the metadata of every partition. Implementations must be
// safe for concurrent use and apply each call atomically per partition.
//
// A write goes Prepare, then data, then Commit:
//
//  1. Prepare maps keys to global indexes (allocating monotonic, never
//     reused indexes for new keys) and reserves a fresh generation for each
//     (key, field) written. A prepared row that was never committed is
//     invisible: Lookup and List do not return it.
//  2. The caller writes the cells' bytes under backends.StorageKey(index, field, gen).
//  3. Commit makes the fields (and tag) visible. A field whose reserved
//     generation is older than the committed one lost a race to a newer
//     write: Commit reports it as Stale and the caller deletes its bytes.
//     The generation it replaces is reported as Superseded, for the caller
//     to delete.
//
// A MetaStore remembers every
// cell it handed out a generation for until the cell is known deleted, so
// that cells nothing references (a put whose rollback failed to delete,
// a client that died between Prepare and Commit or before deleting what a
// commit superseded, a clear whose cell deletes failed) can be found and
// deleted later without a scan of the data store.
//
// A cell is garbage when no committed row references it and no live
// reservation may yet commit it: a generation a commit superseded, a
// commit's own Stale generation, a reservation Garbage aborted, and the
// cells of rows Delete or DeletePartition removed. A removed row's
// reservations are aborted at once (a Commit naming them fails with
// backends.ErrConflict, as the MetaStore contract says), but Garbage returns them
// only once they are older than its olderThan, as it does any reservation:
// their put may still be writing them.
//
// A MetaStore commits only under live
// reservations: Commit fails with backends.ErrConflict, applying nothing, when a
// field's generation is neither reserved for that row and still pending
// nor the row's committed one (a generation Garbage aborted, say). So a
// cell Garbage returned is never referenced afterwards.
//
// The caller deletes cells, then reports them with Swept. Until then the
// store keeps a record per garbage cell: a client that never calls Swept
// makes the store grow by one record per cell a commit replaces, so tq
// calls Swept after every delete of cells that succeeds: with a commit's
// Superseded then Stale cells as Commit returned them, with the cells of
// the rows Delete or DeletePartition returned in [AppendRowRefs] order,
// so that a store may match them against its records as one run.
type MetaStore interface {
	// Queue is the consumption state of the partitions (see Queue).
	Queue
	// Prepare reserves indexes and generations for keys and fields. Empty
	// keys or fields are allowed (a tag-only write reserves no generation).
	// sizes, nil or one per cell in field-major order (field j of key i
	// at j*len(keys)+i), are the bytes of the cells the put will write,
	// which the partition's Capacity counts. A Prepare the Capacity
	// refuses reserves nothing and fails with a *FullError (matching
	// backends.ErrFull).
	Prepare(ctx context.Context, partition string, keys, fields []string, sizes []int64) ([]Reservation, error)
	// SetCapacity sets the partition's Capacity (the zero Capacity lifts
	// every bound) and returns the rows it removed at once: those every
	// task of c.ClearAcked has already acknowledged or dropped, for the
	// caller to delete their cells as after Delete. A malformed c fails
	// with backends.ErrInvalid, changing nothing. The capacity stays with
	// the partition through DeletePartition.
	SetCapacity(ctx context.Context, partition string, c Capacity) ([]*Row, error)
	// Commit applies updates atomically. It returns backends.ErrConflict, applying
	// nothing, if a row was cleared or re-indexed since Prepare (or a
	// reservation was aborted: see Garbage). A store
	// that lost the reply to a request settles the outcome before it
	// returns (a store over a network asks again and makes sure a copy of
	// the request still on its way cannot apply later); only when it
	// cannot does it return an error matching backends.ErrOutcomeUnknown. Any
	// other error means nothing was applied. The same holds for Delete
	// and DeletePartition. Prepare's errors never match backends.ErrOutcomeUnknown:
	// a Prepare whose outcome is unknown reserved at most rows that stay
	// invisible.
	Commit(ctx context.Context, partition string, updates []RowUpdate) (CommitResult, error)
	// Lookup returns the committed row of each key, or nil for a key that is
	// unknown or not yet committed. An unknown partition gives all nils.
	Lookup(ctx context.Context, partition string, keys []string) ([]*Row, error)
	// List returns every committed row of the partition, by index. An
	// unknown partition gives an empty list.
	List(ctx context.Context, partition string) ([]*Row, error)
	// Partitions returns the names of partitions that have committed rows,
	// sorted.
	Partitions(ctx context.Context) ([]string, error)
	// Delete removes keys (unknown ones are ignored) and returns the
	// committed rows it removed, so the caller can delete their cells. A
	// removed row's index is never handed out again.
	Delete(ctx context.Context, partition string, keys []string) ([]*Row, error)
	// DeletePartition removes every row of the partition and returns the
	// committed ones.
	DeletePartition(ctx context.Context, partition string) ([]*Row, error)
	// Garbage returns the garbage cells of partition not yet reported
	// swept, first aborting (atomically with the call) the pending
	// reservations older than olderThan by the store's clock: a later
	// Commit naming an aborted reservation fails with backends.ErrConflict. A
	// reservation younger than olderThan is live and never returned, nor
	// is a cell a committed row references. A store may judge a
	// reservation by the age of a newer pending reservation of the same
	// cell, and so abort it later than it could. A cell may be returned by
	// several calls until it is reported swept, and may already be
	// deleted (deleting a missing key is no error). The Tag of an aborted
	// reservation's cell is "": the store never learned its backend tag.
	// An unknown partition has no garbage; a negative olderThan is an
	// error wrapping backends.ErrInvalid.
	Garbage(ctx context.Context, partition string, olderThan time.Duration) ([]Ref, error)
	// Swept records that the cells refs name are deleted, so Garbage no
	// longer returns them and the store forgets them. A ref that names a
	// pending reservation aborts it (its Commit then fails with
	// backends.ErrConflict): a put that rolled back reports its own cells this
	// way. Refs the store does not know as garbage or pending are
	// ignored; a partition left with no rows and no garbage is forgotten.
	Swept(ctx context.Context, partition string, refs []Ref) error
	// Abandon aborts the reservations refs name, of a put that failed
	// before its commit applied and is about to delete its own cells:
	// their Commit then fails with backends.ErrConflict, and they become garbage
	// (with the refs' Tags), returned by Garbage until swept. A ref that
	// is already garbage, or a removed row's reservation (which becomes
	// garbage too), is known as well. When some ref names nothing the
	// store knows of the partition, Abandon still aborts the others and
	// returns an error matching backends.ErrReservationLost: that reservation was
	// lost with metadata a failover replaced, its index or generation may
	// be another row's now, and the caller must not delete those cells by
	// storage key. A store whose metadata cannot be lost (in-process)
	// takes such refs for cells Garbage aborted and Swept forgot (a put
	// slower than olderThan), whose keys nobody else is given, and returns
	// nil: the caller deletes them.
	Abandon(ctx context.Context, partition string, refs []Ref) error
	// DeleteFields removes fields from the committed rows of keys and
	// returns the cells it unreferenced, so the caller can delete them
	// and report them Swept (in the order returned: one run). The rows
	// stay, with their other fields, their tag and their consumption (a
	// leased row keeps its lease); a row left with no field stays, as a
	// tag-only write makes one. A task needing a removed field no longer
	// finds the row ready until a commit gives it back. Pending
	// reservations of those fields of those rows are aborted as Delete
	// aborts a removed row's: their Commit fails with
	// backends.ErrConflict. Unknown keys, and fields a row lacks, are
	// ignored; an unknown partition gives nil. Its outcome is as
	// Delete's (see Commit): an error matching
	// backends.ErrOutcomeUnknown may have applied, any other applied
	// nothing.
	DeleteFields(ctx context.Context, partition string, keys, fields []string) ([]Ref, error)
	// Close releases the store. Later calls return backends.ErrClosed.
	Close() error
}

// CommitResult lists cells whose bytes are no longer referenced.
type CommitResult struct {
	Superseded []Ref // older generations replaced by this commit
	Stale      []Ref // this commit's cells that lost to a newer committed one
}

// Refs returns the cells of a row, for deleting its data.
func (r *Row) Refs() []Ref {
	out := make([]Ref, 0, len(r.Fields))
	for f, fi := range r.Fields {
		out = append(out, Ref{Index: r.Index, Field: f, Gen: fi.Gen, Tag: fi.BackendTag})
	}
	return out
}

// MergeRow applies u to the committed row cur (nil: none yet) by the rule
// every MetaStore follows, and returns the new row without modifying cur:
// a field whose generation is older than the committed one is Stale (a newer
// write won), a replaced generation is Superseded, and u.Tag is merged in.
// Unreferenced cells are appended to res.
func MergeRow(cur *Row, u *RowUpdate, res *CommitResult) *Row {
	next := &Row{Key: u.Key, Index: u.Index}
	if cur != nil {
		next.Fields = maps.Clone(cur.Fields)
		next.Tag = maps.Clone(cur.Tag)
	}
	if next.Fields == nil {
		next.Fields = make(map[string]FieldInfo, len(u.Fields))
	}
	mergeFields(next.Fields, u, res)
	if u.Tag != nil {
		if next.Tag == nil {
			next.Tag = make(map[string]any, len(u.Tag))
		}
		maps.Copy(next.Tag, u.Tag)
	}
	return next
}

// mergeFields applies u.Fields to fields, a copy of the committed ones.
func mergeFields(fields map[string]FieldInfo, u *RowUpdate, res *CommitResult) {
	// In field order: a commit's cells are reported alike in every
	// process that applies it.
	for _, f := range slices.Sorted(maps.Keys(u.Fields)) {
		fi := u.Fields[f]
		old, had := fields[f]
		switch {
		case had && old.Gen > fi.Gen:
			res.Stale = append(res.Stale, Ref{Index: u.Index, Field: f, Gen: fi.Gen, Tag: fi.BackendTag})
			continue
		case had && old.Gen != fi.Gen:
			res.Superseded = append(res.Superseded, Ref{Index: u.Index, Field: f, Gen: old.Gen, Tag: old.BackendTag})
		}
		fields[f] = fi
	}
}

// Merger applies the updates of one commit by MergeRow's rule, sharing the
// maps MergeRow copies, so that a commit allocates per distinct map rather
// than per row: a first commit keeps the update's Fields map, an update
// without fields keeps the row's, one without a tag keeps the row's tag
// (a row with no tag yet keeps u.Tag itself: see RowUpdate); and since the rows
// of a batch mostly share their maps (tq hands rows with equal cells one
// Fields map), a row whose committed and updated Fields are the maps of
// the row merged before it gets that row's result. The rows it makes share
// maps with each other, with cur and with u, so, like every committed row,
// they must never be modified. The zero Merger is ready to use; use one per
// commit.
type Merger struct {
	// The last merge: its committed, updated and resulting Fields, and the
	// cells it reported (their Index aside, what the same maps report).
	valid             bool
	cur, up, next     map[string]FieldInfo
	stale, superseded []Ref
}

// Merge sets *next (which may be cur) to cur (nil: none yet) with u
// applied, as MergeRow returns it, and appends the unreferenced cells to res.
func (m *Merger) Merge(next, cur *Row, u *RowUpdate, res *CommitResult) {
	var curFields map[string]FieldInfo
	var tag map[string]any
	if cur != nil {
		curFields, tag = cur.Fields, cur.Tag
	}
	switch {
	case u.Tag == nil:
	case len(tag) == 0:
		tag = u.Tag // nothing to merge
	default:
		merged := make(map[string]any, len(tag)+len(u.Tag))
		maps.Copy(merged, tag)
		maps.Copy(merged, u.Tag)
		tag = merged
	}
	*next = Row{Key: u.Key, Index: u.Index, Fields: m.fields(cur != nil, curFields, u, res), Tag: tag}
}

// fields returns the Fields of a row whose committed ones are cur (none
// when !committed) with u applied.
func (m *Merger) fields(committed bool, cur map[string]FieldInfo, u *RowUpdate, res *CommitResult) map[string]FieldInfo {
	if m.valid && SameMap(cur, m.cur) && SameMap(u.Fields, m.up) {
		for _, r := range m.stale {
			r.Index = u.Index
			res.Stale = append(res.Stale, r)
		}
		for _, r := range m.superseded {
			r.Index = u.Index
			res.Superseded = append(res.Superseded, r)
		}
		return m.next
	}
	stale, superseded := len(res.Stale), len(res.Superseded)
	var next map[string]FieldInfo
	switch {
	case !committed && u.Fields != nil:
		next = u.Fields // nothing to merge
	case cur != nil && len(u.Fields) == 0:
		next = cur // nothing to change
	default:
		next = maps.Clone(cur)
		if next == nil {
			next = make(map[string]FieldInfo, len(u.Fields))
		}
		mergeFields(next, u, res)
	}
	*m = Merger{valid: true, cur: cur, up: u.Fields, next: next,
		stale: res.Stale[stale:], superseded: res.Superseded[superseded:]}
	return next
}

// SameMap reports whether a and b are one map (not merely equal ones): a
// map value is a pointer to the map's header. Rows and updates share their
// maps (see Merger), so this is how engines and tq find work already done
// for a row's map.
func SameMap[K comparable, V any](a, b map[K]V) bool {
	return *(*unsafe.Pointer)(unsafe.Pointer(&a)) == *(*unsafe.Pointer)(unsafe.Pointer(&b))
}
