package backends

import (
	"errors"
	"fmt"
)

var (
	// ErrClosed is returned by any call on a closed backend or store.
	ErrClosed = errors.New("backends: closed")
	// ErrUnknownScheme is returned by Open for a scheme nobody registered.
	ErrUnknownScheme = errors.New("backends: unknown scheme")
	// ErrInvalid reports a malformed argument (mismatched lengths, bad URL).
	ErrInvalid = errors.New("backends: invalid argument")
	// ErrConflict is returned by a metadata.MetaStore's Commit when a row
	// it was asked to commit was cleared (or re-created with another
	// index) after Prepare.
	ErrConflict = errors.New("backends: row changed since prepare")
	// ErrReservationLost is returned by a metadata.MetaStore's Commit
	// (and Abandon), matching ErrConflict too, when the store does not
	// know the reservation named at all: no pending reservation, no
	// removed row's, no aborted one. The metadata that held it is gone (a
	// failover to a replica that never had the Prepare), so its index or
	// generation may since have been handed out again, and the caller must
	// not delete the put's cells by their storage keys: they may be
	// another row's now.
	ErrReservationLost = fmt.Errorf("%w: the reservation is unknown to the store (lost in a failover?)", ErrConflict)
	// ErrOutcomeUnknown is returned by a write (a Log's Append or
	// AppendCells; a metadata.MetaStore's Commit, Delete or
	// DeletePartition) that may or may not have been applied, and that
	// the engine could not settle: the request went out, no reply came
	// back, and asking afterwards failed too or could not tell (the
	// engine's record of its writes was replaced meanwhile), or, with a
	// replication requirement, the write applied but too few replicas
	// acknowledged it. The caller must keep what the write may reference
	// (its cells) and may look the rows up later. Every other error of
	// such a write means nothing of it was applied.
	ErrOutcomeUnknown = errors.New("backends: outcome unknown")
	// ErrUnavailable is matched by an engine's error when its server
	// could not be reached or was not serving: a refused dial, a
	// connection lost, a network timeout, a server still loading its data
	// or failing over. Such a condition may pass. Matched alone, the call
	// applied nothing and may be made again as it was (tq does, by its
	// RetryPolicy); a write whose error matches ErrOutcomeUnknown as well
	// may have applied, and is not made again. An error of a call whose
	// context had ended never matches it.
	ErrUnavailable = errors.New("backends: server unavailable")
	// ErrNotDurable is matched, besides ErrOutcomeUnknown, by a Log
	// append's error when the records were appended but are not as
	// durable as the engine was asked to make them (too few replicas
	// acknowledged them in time): asking the log again cannot tell more,
	// so the rules return the error as it is instead of settling it.
	ErrNotDurable = errors.New("backends: appended, not durable")
	// ErrFull is matched by a metadata.MetaStore's Prepare refused by the
	// partition's Capacity (see metadata.FullError): nothing was
	// reserved, and the put may be made again once rows are cleared.
	ErrFull = errors.New("backends: partition full")
	// ErrCorrupt is matched by the error of a call that found a
	// partition's metadata in a shared engine's log (a record, or the
	// snapshot a log was compacted to) that does not decode: that
	// metadata was damaged or written by something else. Nothing of the
	// call was applied; calls on the partition fail alike until it is
	// repaired or cleared.
	ErrCorrupt = errors.New("backends: corrupt metadata")
)

// countError: an engine returned a result of the wrong length.
type countError struct {
	op        string
	want, got int
}

func (e *countError) Error() string {
	return "backends: " + e.op + " returned " + itoa(e.got) + " values for " + itoa(e.want) + " keys"
}

func itoa(n int) string { return fmt.Sprint(n) }
