package file

import (
	"errors"
	"fmt"
	"time"

	"github.com/tqgo/tqgo/backends"
)

var (
	// ErrLocked is matched by Open's error when another process holds the
	// directory: one writing process per directory. The error is a
	// *LockedError naming the holder; a read-only view (mode=ro,
	// Options.ReadOnly) opens the directory all the same.
	ErrLocked = errors.New("file: directory in use by another process")
	// ErrReadOnly is matched by the error of every write (Store.Write and
	// Delete, Log.Append, AppendCells and Compact) of an engine opened
	// read-only (mode=ro, Options.ReadOnly): nothing is applied. The
	// error also matches backends.ErrInvalid.
	ErrReadOnly = errors.New("file: read-only view, writes refused")
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

// LockedError is Open's error when another process holds the directory
// (its flock on LOCK). It names the holder as the holder wrote it in LOCK
// when it took the lock (PID 0 and Host "": not known). It matches
// ErrLocked.
type LockedError struct {
	Dir   string
	PID   int
	Host  string
	Since time.Time // when the holder took the lock
}

func (e *LockedError) Error() string {
	holder := "another process"
	if e.PID != 0 {
		holder = fmt.Sprintf("pid %d on host %s", e.PID, e.Host)
		if !e.Since.IsZero() {
			holder += " since " + e.Since.UTC().Format("2006-01-02 15:04:05 UTC")
		}
	}
	return fmt.Sprintf("file: %s is in use by %s (one writing process per directory); to look at it meanwhile, open it read-only: file://%s?mode=ro", e.Dir, holder, e.Dir)
}

// Is reports whether target is ErrLocked.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// readOnlyError is a write's error on a read-only engine.
func readOnlyError(dir string) error {
	return fmt.Errorf("%w (%w): %s was opened with mode=ro", ErrReadOnly, backends.ErrInvalid, dir)
}
