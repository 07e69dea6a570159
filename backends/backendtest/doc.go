// Package backendtest checks that a storage engine keeps the contracts of
// packages backends and metadata, in the manner of testing/fstest.TestFS:
// an engine's own test calls [RunEngine] with a constructor of its
// [backends.Engine] (or [RunStore], [RunMeta] and [RunColocated] on their
// own), and every subtest that fails names the contract broken. It also holds [Wrap] and
// [Faulty], which count, delay and fail the calls of any engine while
// passing every capability through, so tests of higher layers need no
// server to see an engine fail; and package toykv, a toy KV engine. A
// shared engine's [backends.Log] runs [RunLog]; package toylog is a toy one.
//
// # The data contract RunStore checks
//
//   - Write stores each cell's Head followed by Body, replacing what the
//     key held, and sets every cell's Tag (overwriting the caller's); cells
//     of one call may share a Head, and a cell may have no Head or no Body.
//     Read and Delete are given the Tag Write set; Delete with Tag "" (a
//     cell of an aborted reservation, whose tag the metadata never learned)
//     removes the value too. Every read and delete of the suite passes the
//     Tag of the key's last Write.
//   - Read fills Head then Body when the value has their total length, with
//     Value nil; a value of another length comes whole in Value, and so
//     does every value read with empty destinations; a missing key is not
//     Found, with Value nil (whatever Found and Value held before); present
//     and missing keys mix freely in one call, and a key may repeat.
//   - Write keeps no caller memory: changing the Heads and Bodies after
//     Write returns changes no stored value. A Value the caller holds stays
//     as it was while its key is rewritten or deleted.
//   - Delete of a missing key is no error; a deleted key can be written
//     again. An empty batch (nil or zero-length) is a no-op returning nil.
//   - Values round-trip byte-exactly: every byte value, 8 MiB in one value,
//     64 x 256 KiB in one call, 25,000 keys in one call. A zero-length
//     value is a value: Found, with a Value of length 0.
//   - The store is safe for concurrent use: goroutines writing (through
//     Stage too, when the store is a Stager), reading and deleting disjoint
//     and shared keys never see a torn value, and the final state is that
//     of the last write of each key. Values there are under 400 bytes.
//   - A call with an already cancelled context returns an error wrapping
//     context.Canceled and has no effect; after Close, Write, Read and
//     Delete return an error wrapping [backends.ErrClosed].
//
// For a [backends.Stager] (the Stage subtests; skipped for another
// store): Stage sets each Body to exactly its size and a Staged handle,
// leaving Head empty; buffers of one call and of two live calls share no
// bytes; a staged value is invisible (Read gives the old value or not
// Found) until Write publishes it, which also sets its Tag; one Write may
// mix staged cells and cells of caller memory; Unstage with no Write, or
// after a failed Write, publishes nothing, and Unstage after a successful
// Write is a no-op (the values stay); Unstage of cells never staged is
// ignored; Stage with sizes of another length, or a negative size, is an
// error wrapping [backends.ErrInvalid]; after Close, Stage, and Write of a
// cell staged before, return an error wrapping [backends.ErrClosed].
//
// # The metadata contract RunMeta checks
//
// Beyond what the [metadata.MetaStore] doc says: indexes are distinct,
// increase in key order within one Prepare and from one Prepare to the next
// (across partitions too), and a key re-created after Delete or
// DeletePartition gets a new, larger index; a fresh row's first generation of
// a field is 0, then 1, 2, ...; a Commit that fails with ErrConflict applies
// none of its updates; a committed row with a Tag is visible even with no
// fields; a partition whose committed rows were all deleted is not listed.
//
// Values round-trip as stored: FieldInfo's DType, Shape, Gen and BackendTag
// (a nil and an empty Shape count as equal; DType tells a tensor from a
// non-tensor), and tag values of the Go types string, bool, int64 and
// float64, each of which must come back with the same Go type and value
// (float64(2) must not come back as int64(2), nor int64(1<<62+3) as a
// float64). A store that serialises tags must keep the type; tag values of
// other types are not checked.
//
// RunMeta's Reclaim subtests check Garbage, Swept and Abandon: Garbage
// returns exactly the cells nothing references and not yet reported
// swept, whatever the order of Prepare, Commit, Delete, DeletePartition,
// Garbage and Swept (checked against a model over random sequences):
// superseded and stale generations with their tags, the committed cells
// of removed rows at once, and reservations (of live or removed rows, tag
// "") once older than olderThan, which it aborts so that their Commit
// fails with ErrConflict, applying nothing; a younger reservation is never
// returned and commits. Swept of a pending reservation aborts it; Swept of
// cells that are not garbage (committed ones, unknown ones, another
// partition's) changes nothing; Abandon makes a put's reservations garbage
// with their tags; a negative olderThan is an error wrapping
// [backends.ErrInvalid].
//
// # The colocated contract RunColocated checks
//
// For an engine whose Meta is a [metadata.Colocated]: WriteCommit writes
// the cells (the engine's Store reads them), staged ones too when the
// Store is a Stager, sets every cell's Tag to "", and commits the updates
// (Lookup shows the rows with the fields), returning what Commit would
// (the generation a rewrite replaces as Superseded, an older generation's
// own cell as Stale); a WriteCommit naming a row cleared after Prepare
// fails with an error matching ErrConflict (not ErrOutcomeUnknown) and
// commits none of its rows; WriteCommit of nothing is no error. ReadRows
// calls plan (at least once) with one row per key: the committed row, or
// nil for an unknown or uncommitted key or partition; it reads every cell
// plan returned into its destinations, and returns the rows plan last
// saw (the same pointers). When the rows changed between two ReadRows,
// through the same MetaStore (Store.Write then Commit, or Delete) or
// through another client (a second engine from newEngine, which must
// reach the same server), the second sees the new rows and reads their
// cells. An error from plan is returned as it is (==). After Close of the
// Meta, WriteCommit and ReadRows return an error wrapping ErrClosed.
// Updates carry BackendTag "", as a Colocated's cells have no tags.
//
// # The log contract RunLog checks
//
// What the [backends.Log] doc says, read as follows where it leaves room:
//
//   - Numbering: each partition's entries are numbered 1, 2, ... in
//     Append order, one Append's records in theirs. Entries carry the
//     record's ID and Data, and Time, the server's clock in microseconds
//     (within a minute of the test's), the same on every read.
//   - Append returns the log after from: the entries others appended
//     since, with their Data, then its own, last, with Data nil. From a
//     position the log does not hold, that is a Restart, as Read's. An
//     Append of no records appends nothing and creates no log (Partitions
//     does not list it); it may return an empty Tail or the log after
//     from. An Append that fails with an error not matching
//     ErrOutcomeUnknown (a cancelled context's) appended nothing.
//   - Indexes: the ranges [Base, Base+Indexes) of all entries, across
//     partitions, clients, and a log emptied and appended to again, never
//     overlap; a read gives an entry the Base its Append did.
//   - Read returns the entries after from, with Data; at the end, an
//     empty Tail (no Restart, no entries). A partition with no log gives
//     the zero Pos an empty Tail and any other Pos a Restart with a nil
//     Snapshot at the zero Pos and no entries.
//   - Restart: a position whose number the log holds with another ID, or
//     past its end, or before its snapshot (the zero Pos too, once the log
//     is compacted), is not held: the Tail is a Restart with the
//     snapshot (nil, at the zero Pos, for a log never compacted) at Start,
//     then every entry after Start. A reader at the snapshot's entry, or
//     after it, goes on with no Restart.
//   - Compact at an entry the log holds, after its current snapshot's,
//     stores the snapshot there (at the last entry too: numbering goes
//     on); it does nothing, without error, at a position of another ID,
//     past the end, before or at the current snapshot, or on a partition
//     with no log (which it does not create). A nil snapshot empties the
//     log when at is its last entry (its snapshot's entry too, when that
//     is the last), and does nothing otherwise; after it a reader anywhere
//     but at gets a Restart with a nil Snapshot at Start at, a reader at
//     at goes on (and one waiting there wakes on the next Append), and an
//     Append is numbered at.N+1.
//   - Waiting: a Read with a wait at the end of a log, or at the zero Pos
//     of a partition with no log, returns within 500 ms of another
//     client's Append, with the entries; with nothing appended, an empty
//     Tail once the wait has passed (no sooner than three quarters of it,
//     no later than 2 s after); with its context cancelled, within 500 ms,
//     an error matching context.Canceled; with its client closed, within
//     500 ms of Close, ErrClosed. The bounds are slack for a loaded
//     machine, not speeds.
//   - After Close, Append, Read (with a wait too, at once), Compact and
//     Partitions return an error matching ErrClosed and do nothing; the
//     server's other clients go on.
//   - Partitions lists, sorted, the partitions with a log (compacted ones
//     too), and not those only read, compacted or given empty Appends; an
//     emptied log drops out within 2 s ("may include one just emptied"),
//     and comes back when appended to.
//   - Concurrency: goroutines appending to one partition through two
//     clients, and another following it with waiting Reads, each see the
//     same entry at each number, numbers dense, never a Restart, and in
//     the end every record exactly once.
//   - Values: Data and snapshots of 1 MiB round-trip, Data of every byte
//     value and of none (nil and empty read alike), IDs of all 64 bits
//     (positions telling apart IDs that differ in the lowest bit above
//     2^53, as a float64 cannot); partition names of tq's character set
//     ("A-Za-z0-9_.:/-", 255 bytes long), and with braces and percent
//     signs (which tq refuses, but an engine that builds keys of names
//     must not confuse), are distinct logs listed under their names.
//
// # Keys, partitions and instances
//
// Every key and partition name the suites use starts with a prefix unique
// to the suite's call and subtest, so one server may serve every subtest
// and keep data between test runs. Each call of newStore, newMeta or
// newEngine must return a new instance (it may share a server) and
// register its own cleanup with t.Cleanup; the Closed subtests close their
// instance, so that cleanup must tolerate an instance already closed.
// RunLog's newServer returns an opener of clients of one server (see
// RunLog), under the same rules.
package backendtest
