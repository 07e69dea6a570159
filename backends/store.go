package backends

import "context"

// Store is the data half of an engine: it stores cells (opaque byte values)
// by storage key. Implementations must be safe for concurrent use. Each call
// takes a batch; an empty batch is a no-op that returns nil. tq hands a call
// at most its KeysLimit cells and keeps at most IODepth calls in flight; an
// engine cuts a call into requests as its server needs.
type Store interface {
	// Write stores each cell's value, Head followed by Body, under its Key,
	// replacing any existing value, and sets each cell's Tag to the tag the
	// engine wants back on Read and Delete ("" for none). Write only reads
	// Head and Body during the call (cells may share a Head), except the
	// Body of a cell Stage gave it, which it publishes in place and owns
	// from then on. On error some cells may be written: the caller deletes
	// them (and Unstages the staged ones).
	Write(ctx context.Context, cells []Cell) error
	// Read reads each cell's value into its destination: a value of exactly
	// len(Head)+len(Body) bytes fills Head, then Body; a value of any other
	// length (every value, when Head and Body are empty) is set whole in
	// Value, read-only, which may alias the engine's memory and stays valid
	// until the caller drops it; a missing key leaves Found false. A
	// destination's contents are unspecified unless a value of its exact
	// length filled it (an engine may touch its pages before the read), and
	// on error every destination's are.
	Read(ctx context.Context, cells []ReadCell) error
	// Delete removes the cells' keys (Key and the Tag Write reported);
	// missing keys are ignored. A cell given with Tag "" is removed
	// whatever tag it was written with: the metadata never learned the
	// tag of a reservation it aborted (see metadata.MetaStore.Garbage).
	Delete(ctx context.Context, cells []Cell) error
	// Close releases the store's resources. Later calls return ErrClosed.
	Close() error
}

// Cell is one value to write (or, by Key and Tag, to delete).
type Cell struct {
	Key string
	// Head and Body are the value, in two parts so that a tensor travels as
	// the codec's prefix and the caller's own row, with no packing copy.
	Head, Body []byte
	// Tag is set by Write: the engine's tag for the cell, which the
	// metadata keeps and hands back (TransferQueue's "custom backend
	// meta"). Given to Delete as Write set it.
	Tag string
	// Staged is the handle Stager.Stage set; nil for a cell of caller
	// memory.
	Staged any
}

// ReadCell is one value to read, and where to put it.
type ReadCell struct {
	Key string
	Tag string // the Tag Write reported for the cell
	// Head and Body are the destination of a value of their total length.
	Head, Body []byte
	Value      []byte // set by Read: a value of another length, whole
	Found      bool   // set by Read
}

// Stager is an optional interface of a Store that lets the caller encode
// values straight into the engine's memory: Write then publishes them with
// no copy (memory and yuanrong implement it). A reader never sees a staged
// value before Write publishes it.
type Stager interface {
	// Stage sets each cells[i].Body to sizes[i] bytes of the engine's
	// memory, of unspecified contents (the caller writes every byte), and
	// cells[i].Staged to the engine's handle; Head is left as it is
	// (empty). On error nothing is staged.
	Stage(ctx context.Context, cells []Cell, sizes []int) error
	// Unstage releases the staged cells Write did not publish: after a
	// failed Write, or a write given up before it. Cells already published
	// or never staged are ignored; the caller must not touch a released
	// Body.
	Unstage(cells []Cell)
}
