// Package file is tqgo's durable embedded engine: the queue of one
// process, served from memory as memory:// is, and kept in a directory
// through a write-ahead log, so that it outlives the process.
//
// It registers the "file" scheme (import _ "github.com/tqgo/tqgo/backends/file"):
//
//	tq.Open(ctx, "file:///var/lib/tq-job")                 // an absolute directory
//	tq.Open(ctx, "file://localhost/var/lib/tq-job")        // the same
//	tq.Open(ctx, "file:tq-job?sync=always")               // relative to the working directory
//
// The directory is created if missing. Parameters (ParseURL; Options for
// Open, which takes a directory):
//
//	sync=everysec    the default: fsync once a second, in the background
//	sync=always      fsync before a write returns (group commit)
//	sync=never       leave fsyncs to the OS
//	sync=250ms       fsync every interval (any Go duration)
//	checkpoint=64MiB the log beyond twice the live data that triggers a checkpoint
//	mode=ro          a read-only view of a directory, in use or not (see below; mode=rw: the default)
//
// # The engine
//
// Open returns an Engine whose Data is a backends.Store and whose Log is a
// backends.Log and backends.LogCells, with Local set: tq applies the same
// rules to its log (internal/replica) as to Redis's, and this package
// decides nothing about rows, tasks or leases (but that it ends the
// claims of a process gone, as the rules say: see below). It stores what every engine
// stores: cells by key, and per partition a numbered log of records with
// a snapshot (backends/LOG.md), whose compactions are the rules'.
//
// Every change is one record (a frame: length, CRC-32C, payload) of the
// write-ahead log: a Store.Write or Delete, a Log.Append, a Compact, and
// an AppendCells (a put's cells and its commit record in one frame, so a
// crash keeps both or neither). One writer goroutine takes every frame
// queued while it wrote the last batch (group commit), writes them with
// one write(2), under sync=always fsyncs them, then applies them in order
// to the state in memory with the function replay uses, and replies. A
// reader sees a write once it is in the file (under sync=always, once it
// is on the disk).
//
// # What survives
//
// Whatever the sync policy, a write returns only once its record is
// written to the file, in the OS's page cache: every acknowledged write
// (a put, a Clear, and every consumption change: claims, acks, nacks are
// log records) survives the process's death, kill -9 included. What
// survives the machine's (a power loss, an OS crash) depends on fsync:
//
//   - sync=always: every acknowledged write. Writes in flight together share
//     one fsync.
//   - sync=everysec (default), sync=<d>: all but up to the last second (d) of
//     writes, as Redis's appendfsync everysec.
//   - sync=never: all but what the OS had not written back (on Linux, up to
//     about 30 s of writes by default). Checkpoints, Open (the log it
//     recovered) and Close still fsync.
//
// What a crash of the machine loses is always the log's newest writes:
// the state reopened is the state after some prefix of the writes, all
// those the policy promised included, so no row is half visible (listed
// with its cells gone) and a clear or ack kept means every write before
// it is kept.
//
// A crash leaves a directory Open opens. It can tear the last record,
// and a crash of the machine can leave the pages written after the last
// fsync in any mix of written and not (a record lost with a whole one
// after it), or a new segment whose size reached the disk before its
// header. The writer notes in the log how much of the segment is on the
// disk (a small record before a batch, when an fsync since the last one
// got further; and at Close). Reopening cuts the newest segment at its
// first bad record (one that runs past its end or fails its checksum)
// unless a whole note after it says the bytes it lies in were on the
// disk; so a torn or half-written tail is dropped whole, never applied in
// part. A bad record where the log says it was fsynced, or in an older
// segment or a checkpoint, is damage: Open fails with a *CorruptError
// naming the file and offset, rather than drop writes that were
// acknowledged. A newest segment with a bad header and no note after it
// vouching for it is a segment a crash interrupted as it began: it is
// removed.
//
// A partition's capacity (SetCapacity) is a record of its log, as every
// claim, ack and nack is: it survives a reopen, from the log and from a
// checkpoint alike.
//
// # Reopening ends the former process's claims
//
// The directory's lock proves that the process that held it is gone, and
// with it every consumer that held a lease or waited on a claim: as Open
// takes the lock of a directory no engine of this process holds, it ends
// their claims, appending to each partition's log the records the rules
// give for it (rules.Partition.Release: a nack, with no delay, of the
// rows still leased, and an unwait of each registered claim). Those rows
// are claimable at once, not when their leases run out; each keeps its
// deliveries, so its next claim counts one more (and a row at its task's
// MaxDeliveries is dead). Rows acked stay acked.
//
// # Failures
//
// A write(2) that fails (ENOSPC, EIO) is cut back from the file; the
// writes of its batch fail with an error matching ErrFailed (and, if the
// cut failed too, backends.ErrOutcomeUnknown: the record may be found on
// reopen). A failed fsync fails the writes waiting on it with ErrFailed
// and backends.ErrOutcomeUnknown (the record is in the file, maybe not on
// the disk; after a failed fsync Linux may drop the dirty pages). Either
// way the engine stops writing (fail-stop): every later write fails with
// ErrFailed, reads go on from memory, and reopening the directory
// recovers what reached the file. A write whose context ends while its
// record waits for the disk returns backends.ErrOutcomeUnknown: the record
// is written all the same. Calls after Close return backends.ErrClosed.
//
// # Checkpoints and reopening
//
// The log is segments, wal-<n>.log. When it exceeds twice the live data
// (the cells' keys and values and the logs' records and snapshots) plus
// checkpoint= (64 MiB), the writer starts a segment and the engine writes
// a checkpoint of the state as of that segment's start, checkpoint-<n>.ckpt:
// to a temporary file, fsynced, renamed, the directory fsynced, and only
// then are the segments before dropped. Whatever the policy, the segment
// left is cut at its end and fsynced before the next one is created (so
// only the newest segment can end in a torn record; under sync=everysec
// this fsync, of up to a second of writes, is on the writer's path once
// per checkpoint), and the new segment is fsynced before the checkpoint
// is renamed in (the checkpoint copies cells written after the segment
// began: it must not outlive their records). The checkpoint copies the logs
// under the engine's lock (a few entries each: the rules compact them) and
// the cells a shard (1/64) at a time, writing outside the lock, so
// requests flow meanwhile (never a lock across slow I/O: simpler PR
// #1702). Cell writes replay idempotently, so a cell copied after the
// segment began is simply written again by the replay. Dropped segments
// are kept for reuse (two files at most): writing over a file's cached
// pages costs a quarter of writing new ones. The directory holds at most
// about three times the live data plus checkpoint=, and the two segments
// kept for reuse.
//
// Open loads the newest checkpoint and replays the segments after it,
// at the speed of reading and hashing the bytes: on a 2-core VM, 1M cells
// of 100 bytes reopen in 0.66-1.13 s from the log alone (116 MB) and
// 0.73-1.28 s from a checkpoint (BenchmarkReopen, two runs).
//
// # Memory
//
// Every cell value is kept in memory (reads never touch the disk), as a
// slice of the record that wrote it: a write costs one copy, and a value
// is never written in place. A record of 64 KiB or more (a put's cells, a
// checkpoint's chunk) lies in memory the engine reuses, as memory://
// reuses its arenas: once none of its cells is left and no read or
// checkpoint copies out of it, it goes to a free list (64 MiB at most)
// that later records are built in, so a partition written and cleared in
// a loop runs on warm memory, not on fresh pages and Go's zeroing of
// them. Read copies a value whose length is not its destination's out of
// such a record if it is under 64 KiB, and returns a longer one as it
// lies, read-only (the record is then never reused); the logs' records
// are copied out of it. A smaller record's memory is left to the garbage
// collector once none of its cells and log records is left. Plan for the
// live data, plus the free list, plus the garbage collector's headroom,
// plus the logs' records since their last compaction.
//
// # One process per directory
//
// Open takes an exclusive flock on the directory's LOCK file (released by
// the OS when the process dies, kill -9 included) and writes into LOCK
// who holds it (PID, host, time); another process's Open fails with a
// *LockedError matching ErrLocked that names the holder ("file: /dir is
// in use by pid 1234 on host h since ...") and says how to look at the
// directory meanwhile. Within a process, every Open of one directory (by
// its absolute path, symlinks resolved) shares one engine, refcounted and
// closed with its last client, so clients of one process share a queue as
// clients of a server do; an Open with other options fails with
// backends.ErrInvalid. To share a queue between processes, use a server
// engine (redis://).
//
// # A read-only view
//
// Open with mode=ro (Options.ReadOnly) looks at a directory another
// process may hold and be writing: it takes no lock (the holder is not
// blocked), reads the newest checkpoint and the segments after it as Open
// does, and writes, cuts, renames, removes and fsyncs nothing. It sees
// the state as of the open (every write acknowledged before it; a record
// the holder is still writing, at the end of the newest segment, is
// where the view stops) and never updates it: open again for a newer one.
// View (ViewOf) says how fresh it is: the time of the last record read
// and where in the log the view stopped. A checkpoint of the holder's
// that replaces files as the view reads them makes it read again (up to
// 8 times, then an error saying so). Reads work as on any engine (List,
// BatchGet, Status, Dead); every write (and so every tq write: Put,
// Clear, a claim, an ack) fails with an error matching ErrReadOnly and
// backends.ErrInvalid, and changes nothing. The claims of the holder's
// consumers are shown as they stand (the view does not end them). The
// directory must exist (else backends.ErrInvalid). Each read-only Open is
// a view of its own, not shared with a writer of the same process.
//
// A damaged length field of a record in the newest segment reads as a
// torn tail unless a whole note after it (found by scanning the rest of
// the segment) says the log was on the disk past it: frames carry one
// checksum, over length and payload, which a length that runs past the
// file's end leaves unread.
package file
