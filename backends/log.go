package backends

import (
	"context"
	"time"
)

// Log is the metadata half of a shared engine: for each partition, a log
// of opaque records that the engine keeps in order, numbers, and stamps
// with its server's clock. The engine decides nothing: which rows exist,
// what a commit means, who holds a lease, all of it is decided by tq
// applying the same deterministic rules to the same records in the same
// order, in every process. A record's effect is fixed by the records
// before it, so an engine appends without checking anything, and two
// processes that read the same log hold the same state.
//
// A log is numbered from 1 (Entry.N); its numbers are dense. A reader
// keeps the position of the last entry it applied (Pos: the entry's
// number and record ID) and asks for what follows. When the log no longer
// holds that entry as it was (it was compacted away, the log was deleted
// and begun anew, a failover lost its end), the engine says so (Tail.Restart)
// and returns the log from its snapshot instead.
//
// Every method is safe for concurrent use. An error matching
// ErrOutcomeUnknown from Append (or AppendCells) may have appended the
// records; any other error appended nothing. Read and Compact may be
// retried freely.
type Log interface {
	// Append appends recs to partition's log in order, atomically (all
	// or none; an empty recs appends nothing), creating the log if the
	// partition has none, and returns the log after from, up to and
	// including the appended entries, which come last, with Data nil
	// (the caller has it). Each appended entry is stamped with the
	// server's time (entries of one Append may share it) and with the
	// first of the Indexes global indexes reserved for it. Global
	// indexes come from one counter of the engine shared by every
	// partition: each is handed out once, ever.
	Append(ctx context.Context, partition string, from Pos, recs []Record) (Tail, error)
	// Read returns the log after from. With wait > 0 and no entry after
	// from, it waits up to wait for one and returns an empty Tail if none
	// came. A partition with no log reads as a log with no entries (a
	// Restart unless from is the zero Pos).
	Read(ctx context.Context, partition string, from Pos, wait time.Duration) (Tail, error)
	// Compact stores snapshot as the state of partition after the entry
	// at, and drops the entries before at (keeping at's own, so that a
	// reader at at still finds its position), if the log still holds at
	// and its current snapshot is older; otherwise it does nothing.
	//
	// A nil snapshot empties the log instead, if at is still its last
	// entry: the log keeps at's entry and reads from anywhere else as a
	// Restart with a nil Snapshot (the empty state) at Start at, and
	// Partitions no longer lists it. Numbering goes on (a later Append
	// is at.N+1, and lists it again), so that a reader blocked after at
	// wakes on it. An engine may forget an emptied log after an hour or
	// more: it then reads as no log, and a new one begins from 1.
	//
	// Neither is an error when it does nothing.
	Compact(ctx context.Context, partition string, at Pos, snapshot []byte) error
	// Partitions returns the names of the partitions that have a log
	// (not emptied), sorted. It may include one just emptied.
	Partitions(ctx context.Context) ([]string, error)
	// Close releases the log. Later calls return ErrClosed; a Read
	// waiting returns ErrClosed at once.
	Close() error
}

// Record is one entry to append.
type Record struct {
	// ID names the record: random and nonzero, chosen by the caller, so
	// that a caller who lost Append's reply can find its records.
	ID uint64
	// Indexes is how many global indexes to reserve for the record.
	Indexes uint64
	Data    []byte
}

// Pos is a position in a log: the number and record ID of the last entry
// a reader applied. The zero Pos is before the first entry.
type Pos struct {
	N  uint64
	ID uint64
}

// Entry is one record as the log holds it.
type Entry struct {
	N    uint64 // its number in the log, from 1
	ID   uint64 // Record.ID
	Time int64  // the server's time at the append, microseconds since the Unix epoch
	Base uint64 // the first global index reserved for it (meaningless when it asked none)
	Data []byte
}

// Pos is the entry's position.
func (e *Entry) Pos() Pos { return Pos{N: e.N, ID: e.ID} }

// Tail is the log after a position.
type Tail struct {
	// Restart is set when the log does not hold the position read from:
	// the reader drops its state, takes Snapshot (nil: the empty state)
	// as the state at Start, and applies Entries from there.
	Restart  bool
	Snapshot []byte
	Start    Pos
	// Entries follow the position read from (or Start), in order.
	Entries []Entry
}

// End is the position after the tail, given the position it was read
// from.
func (t *Tail) End(from Pos) Pos {
	if n := len(t.Entries); n > 0 {
		return t.Entries[n-1].Pos()
	}
	if t.Restart {
		return t.Start
	}
	return from
}

// LogCells is an optional interface of a Log whose server also holds the
// engine's cells (redis): it writes cells with the records that name
// them, and reads cells with the log that says they are current, each in
// one request where Store and Log would take two.
type LogCells interface {
	Log
	// AppendCells writes cells as Store.Write does and, once every one is
	// written, appends recs as Append does. On an error that does not
	// match ErrOutcomeUnknown nothing was appended (some cells may be
	// written).
	AppendCells(ctx context.Context, partition string, from Pos, cells []Cell, recs []Record) (Tail, error)
	// ReadCells reads cells as Store.Read does, and the log after from,
	// at one instant: the cells are as they were when the log ended where
	// the returned Tail ends.
	ReadCells(ctx context.Context, partition string, from Pos, cells []ReadCell) (Tail, error)
}

// Owners is an optional interface of a shared engine's Log: expiring,
// exclusive ownership of a partition's name, which tq servers sharing an
// engine use so that one of them serves each partition (see package
// tqserve). Ownership decides who serves a partition, not what is right:
// every change is decided where its record lands in the log, so two
// servers that both believe they own a partition (one's ownership lapsed
// while it was paused) still agree on its state.
type Owners interface {
	// Own makes holder the owner of partition for ttl (at least a
	// millisecond) when the partition has no owner, holder owns it (a
	// renewal), or its owner's name begins with takeover (non-empty: a
	// former life of the caller, known dead). It returns the owner after
	// the call, holder or another, and how long that ownership lasts.
	Own(ctx context.Context, partition, holder, takeover string, ttl time.Duration) (owner string, left time.Duration, err error)
	// Disown ends holder's ownership of partition, at once; another's is
	// left as it is.
	Disown(ctx context.Context, partition, holder string) error
}

// CompactTurns is an optional interface of a Log that many processes
// share with no server between them (redis:// opened by each): a turn to
// compact a partition's log, so that one process encodes and sends a
// snapshot where each would otherwise send the same one.
type CompactTurns interface {
	// CompactTurn makes holder the holder of partition's compaction turn
	// for ttl (at least a millisecond) when nobody holds it or holder
	// does (a renewal), and reports whether holder holds it after the
	// call. A turn decides who compacts, not what the log holds: two
	// processes that both compact leave a log that reads the same.
	CompactTurn(ctx context.Context, partition, holder string, ttl time.Duration) (bool, error)
}
