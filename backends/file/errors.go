package file

import (
	"errors"
	"fmt"
)

var (
	// ErrLocked is returned by Open when another process holds the
	// directory: one process per directory.
	ErrLocked = errors.New("file: directory in use by another process")
	// ErrCorrupt is matched by Open's error when a checkpoint, or a write-
	// ahead log record before the log's last, fails its checksum or does
	// not decode: what the directory holds cannot be trusted, and Open
	// refuses it rather than drop acknowledged writes silently. The error
	// is a *CorruptError naming the file and offset.
	ErrCorrupt = errors.New("file: corrupt")
	// ErrFailed is matched by the error of every write after the engine
	// failed to write or fsync its log: it stops writing (fail-stop)
	// rather than acknowledge writes it may not keep. Reads go on from
	// memory; reopening the directory recovers what reached the disk.
	ErrFailed = errors.New("file: engine failed, writes refused")
)

// CorruptError is Open's error for a record that fails its checksum or
// does not decode, where it cannot be a write torn by a crash (anywhere
// but at the end of the newest log segment). It matches ErrCorrupt.
//
// To open the directory anyway, losing that record and every later one,
// truncate File at Offset (and remove later segments).
type CorruptError struct {
	File   string
	Offset int64
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("file: corrupt record in %s at offset %d: %s", e.File, e.Offset, e.Reason)
}

// Is reports whether target is ErrCorrupt.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// failedError is the error of writes after a failure: ErrFailed, its
// cause and, for writes that may have reached the file,
// backends.ErrOutcomeUnknown.
type failedError struct {
	cause   error
	unknown error // backends.ErrOutcomeUnknown, or nil
}

func (e *failedError) Error() string {
	if e.unknown != nil {
		return fmt.Sprintf("%v (this write may have reached the log: %v): %v", ErrFailed, e.unknown, e.cause)
	}
	return fmt.Sprintf("%v: %v", ErrFailed, e.cause)
}

func (e *failedError) Unwrap() []error {
	if e.unknown != nil {
		return []error{ErrFailed, e.unknown, e.cause}
	}
	return []error{ErrFailed, e.cause}
}
