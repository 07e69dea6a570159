package backends

import (
	"context"
	"maps"
	"strconv"
)

// FieldInfo describes one committed (row, field) cell.
type FieldInfo struct {
	// DType is the tensor's dtype name ("float32"), or "" for a value that is
	// not a tensor.
	DType string `json:"d,omitempty"`
	// Shape is the tensor's shape (nil for a non-tensor value).
	Shape []int64 `json:"s,omitempty"`
	// Gen is the write generation whose bytes are current (see StorageKey).
	Gen uint64 `json:"g,omitempty"`
	// BackendTag is the tag the data backend reported for the cell, if any.
	BackendTag string `json:"b,omitempty"`
}

// Row is one committed sample of a partition.
type Row struct {
	Key    string               `json:"k"`
	Index  uint64               `json:"i"`
	Fields map[string]FieldInfo `json:"f,omitempty"`
	Tag    map[string]any       `json:"t,omitempty"`
}

// Reservation is what Prepare hands out for one key.
type Reservation struct {
	Index uint64            // the row's global index
	Gens  map[string]uint64 // the write generation reserved for each field
}

// RowUpdate is what Commit applies to one row.
type RowUpdate struct {
	Key   string
	Index uint64 // from the Reservation; Commit checks it still holds
	// Fields to set, each carrying the Gen its Reservation gave. The store
	// may keep the FieldInfo values, Shape slices included: the caller must
	// not modify them after Commit (tq hands over its own copies).
	Fields map[string]FieldInfo
	// Tag, when non-nil, is merged into the row's tag (keys overwrite).
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
func (r Ref) Key() string { return StorageKey(r.Index, r.Field, r.Gen) }

// StorageKey is "<global_index>@<field>" for a cell's first write (the layout
// TransferQueue's KVStorageManager uses) and "<global_index>@<field>#<gen>"
// for a rewrite, so an overwrite never touches the bytes readers may still be
// reading, and a failed overwrite leaves the old value intact.
func StorageKey(index uint64, field string, gen uint64) string {
	return string(AppendStorageKey(make([]byte, 0, 24+len(field)), index, field, gen))
}

// AppendStorageKey appends StorageKey(index, field, gen) to b.
func AppendStorageKey(b []byte, index uint64, field string, gen uint64) []byte {
	b = strconv.AppendUint(b, index, 10)
	b = append(b, '@')
	b = append(b, field...)
	if gen != 0 {
		b = append(b, '#')
		b = strconv.AppendUint(b, gen, 10)
	}
	return b
}

// MetaStore is the metadata of every partition. Implementations must be
// safe for concurrent use and apply each call atomically per partition.
//
// A write goes Prepare, then data, then Commit:
//
//  1. Prepare maps keys to global indexes (allocating monotonic, never
//     reused indexes for new keys) and reserves a fresh generation for each
//     (key, field) written. A prepared row that was never committed is
//     invisible: Lookup and List do not return it.
//  2. The caller writes the cells' bytes under StorageKey(index, field, gen).
//  3. Commit makes the fields (and tag) visible. A field whose reserved
//     generation is older than the committed one lost a race to a newer
//     write: Commit reports it as Stale and the caller deletes its bytes.
//     The generation it replaces is reported as Superseded, for the caller
//     to delete.
type MetaStore interface {
	// Prepare reserves indexes and generations for keys and fields. Empty
	// keys or fields are allowed (a tag-only write reserves no generation).
	Prepare(ctx context.Context, partition string, keys, fields []string) ([]Reservation, error)
	// Commit applies updates atomically. It returns ErrConflict, applying
	// nothing, if a row was cleared or re-indexed since Prepare. An error
	// whose outcome is unknown (the store may have applied the commit
	// before the reply was lost) must wrap context.DeadlineExceeded or have
	// a Timeout() bool method reporting true; any other error means nothing
	// was applied.
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
	// Close releases the store. Later calls return ErrClosed.
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
	for f, fi := range u.Fields {
		old, had := next.Fields[f]
		switch {
		case had && old.Gen > fi.Gen:
			res.Stale = append(res.Stale, Ref{Index: u.Index, Field: f, Gen: fi.Gen, Tag: fi.BackendTag})
			continue
		case had && old.Gen != fi.Gen:
			res.Superseded = append(res.Superseded, Ref{Index: u.Index, Field: f, Gen: old.Gen, Tag: old.BackendTag})
		}
		next.Fields[f] = fi
	}
	if u.Tag != nil {
		if next.Tag == nil {
			next.Tag = make(map[string]any, len(u.Tag))
		}
		maps.Copy(next.Tag, u.Tag)
	}
	return next
}
