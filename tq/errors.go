package tq

import (
	"errors"
	"fmt"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/codec"
)

// Sentinel errors. Match them with errors.Is; a *KeyError carries the key
// and field and matches its sentinel.
var (
	// ErrNotFound: a key the partition does not have.
	ErrNotFound = errors.New("tq: key not found")
	// ErrNotReady: a requested field that a key has not been written yet.
	ErrNotReady = errors.New("tq: field not ready")
	// ErrNoField: a Batch read by a field it does not have (Batch.Column),
	// or the zero Column (what b["typo"] gives) handed to a reader.
	ErrNoField = errors.New("tq: no such field in the batch")
	// ErrType: a column read as a type its rows are not (As, RowsAs,
	// ValuesAs, Tensors), or a number that does not convert exactly. Errors
	// from tensor views match codec.ErrDTypeMismatch as well.
	ErrType = errors.New("tq: column rows are not of the type asked for")
	// ErrInvalid: a malformed call (lengths that differ, duplicate keys,
	// bad field or partition names, bad values); nothing was written.
	ErrInvalid = errors.New("tq: invalid argument")
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("tq: client closed")
	// ErrConflict: a row this put was writing was cleared (or re-created)
	// by another caller meanwhile; nothing of the put was kept. Retry if the
	// row should exist.
	ErrConflict = backends.ErrConflict
	// ErrOutcomeUnknown: a write (BatchPut, Put, Clear, ClearPartition)
	// whose metadata request went out but whose reply was lost, and that
	// the engine could not settle afterwards (the server stayed out of
	// reach, or its record of the write was replaced meanwhile), or,
	// with an engine's replication requirement, that applied
	// with too few replicas. The write is either whole or absent; nothing
	// it may reference was deleted. Look the rows up (List, Lookup,
	// BatchGet) once the engine is back to learn which. Every other error
	// of a write means nothing of it is visible.
	ErrOutcomeUnknown = backends.ErrOutcomeUnknown
	// ErrCorrupt: a partition's metadata in a shared engine (a record of
	// its log, or its snapshot) that does not decode; the call applied
	// nothing. A cell that does not decode matches codec.ErrCorrupt
	// instead (see KeyError).
	ErrCorrupt = backends.ErrCorrupt
)

// KeyError names the key (and field) a call failed on.
type KeyError struct {
	Partition string
	Key       string
	Field     string // "" when the error is about the whole row
	Err       error  // ErrNotFound, ErrNotReady, ErrInvalid, a *TagError, or an error matching codec.ErrCorrupt for a corrupt cell (one that does not decode, or is not what its metadata says)
}

func (e *KeyError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%v: partition %q key %q", e.Err, e.Partition, e.Key)
	}
	return fmt.Sprintf("%v: partition %q key %q field %q", e.Err, e.Partition, e.Key, e.Field)
}

func (e *KeyError) Unwrap() error { return e.Err }

// TagError is a tag value of a type a Tag does not hold (see Tag). Put and
// BatchPut return it inside a *KeyError naming the row, the whole matching
// ErrInvalid.
type TagError struct {
	Tag    string // the tag key
	Path   string // where in the key's value: "" for the value itself, else steps like [2]["name"]
	Reason string // what is wrong with it
}

func (e *TagError) Error() string {
	if e.Path == "" {
		return fmt.Sprintf("tq: tag %q: %s", e.Tag, e.Reason)
	}
	return fmt.Sprintf("tq: tag %q at %s: %s", e.Tag, e.Path, e.Reason)
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// cellMismatchError: a stored cell that is not what its row's metadata
// says (another dtype or shape, a value where a tensor should be, or a
// tensor where a value should be). A read returns it in a *KeyError naming
// the cell; it matches codec.ErrCorrupt, as a cell that does not decode
// does.
type cellMismatchError struct {
	got, want string // "a float32 tensor of shape [3]", "a value"
}

func (e *cellMismatchError) Error() string {
	return fmt.Sprintf("tq: corrupt cell: it is %s, its metadata says %s", e.got, e.want)
}

func (e *cellMismatchError) Is(target error) bool { return target == codec.ErrCorrupt }
