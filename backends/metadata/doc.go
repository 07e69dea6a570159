// Package metadata is what tq asks of a queue's metadata: a [MetaStore]
// keeps, for every partition, which rows exist and which cells they
// reference, and, being a [Queue], which rows each task has consumed. It
// plays the part of TransferQueue's controller. Engines import it, as
// they import package backends (which it builds on); trainer code never
// needs to.
//
// An engine gives its metadata in one of three ways (see
// backends.Engine): a shared engine gives a backends.Log, to which tq
// applies the same rules in every process, making a MetaStore of it in
// each; an engine may give a MetaStore of its own as Engine.Meta; a Local
// engine may give neither and gets an in-process one (package memory's).
// [Of] checks what an engine gives.
//
// # Rows
//
// A MetaStore maps a partition's keys to global indexes (allocated once,
// monotonic, never reused, across partitions too), records which fields
// each row has committed with their dtype, shape and generation
// ([FieldInfo]), keeps each row's tag, and remembers every cell it handed
// out a generation for until the cell is known deleted. A write goes
// Prepare, cells, Commit: Prepare reserves an index and a generation per
// field ([Reservation]); the caller writes the cells under
// backends.StorageKey(index, field, gen); Commit makes them visible. A
// field losing to a newer committed generation is Stale and the
// generation a commit replaces Superseded ([CommitResult], by
// [MergeRow]'s rule), for the caller to delete. Cells nothing references
// (of failed puts, dead clients, removed rows) are found by Garbage, with
// no scan of the data, and forgotten once the caller reports them Swept.
// A Commit naming a row removed, or a reservation aborted, since its
// Prepare fails with backends.ErrConflict and applies nothing, so a cell
// Garbage returned is never referenced afterwards.
//
// # Outcomes
//
// Every failure is classed. An error of a write (Commit, Delete,
// DeletePartition; Claim, Settle, Reset) matching
// backends.ErrOutcomeUnknown may have applied: the store could not settle
// what became of it, and the caller keeps the cells it may reference. Any
// other error applied nothing. A store that lost a reply settles the
// outcome before it returns when it can (it asks again, and makes sure a
// copy of the request still on its way cannot apply later). Prepare's
// errors never match ErrOutcomeUnknown. A reservation the store no longer
// knows at all (metadata lost in a failover) gives
// backends.ErrReservationLost: its cells' keys may be another row's now,
// and must not be deleted. A malformed call fails with an error wrapping
// backends.ErrInvalid, changing nothing; a call after Close with
// backends.ErrClosed.
//
// # Consumption
//
// Delivery is at least once. Claim leases rows to a task's consumer until
// a deadline, by the store's clock; a row whose lease ends without an Ack
// (a Nack, an expiry) is ready again, or dead after the claim's
// MaxDeliveries, so a consumer that dies loses no row, and one that
// outlives its lease may see its rows delivered to another. No row is
// leased to two consumers of a task at once, across processes too.
// Settle acks, returns, renews, retries or drops rows ([SettleOp]); Wait
// wakes on a change a claim may care about. [Queue] gives the row states
// and their rules; [ClaimRequest], [Select] and [Batch] what a claim may
// ask.
//
// # Sharing
//
// Metadata must be as shared as the data: processes that share an
// engine's data share its metadata, or two of them would hand out the
// same global indexes and overwrite each other's cells. A MetaStore is
// safe for concurrent use and applies each call atomically per partition.
// Rows it returns are read-only and may share their maps with each other
// ([Merger], [SameMap]).
//
// Optional: a MetaStore whose server also holds the data is [Colocated]:
// it writes cells with their commit, and reads cells confirming the rows
// they belong to, in one request each. A [SettleClaimer] settles and
// claims in one request. A [Summarizer] counts a partition's rows for its
// tasks where they are, so that a status or a paced producer's look
// carries counts, not rows ([Summarize] falls back to a View counted by
// [View.Summary], the one place a Summary is computed).
//
// Package backendtest's RunMeta, RunQueue and RunColocated check these
// contracts.
package metadata
