package backends

import (
	"context"
	"slices"
	"strings"
	"time"
)

// Reclaimer is an optional interface of a [MetaStore] that remembers every
// cell it handed out a generation for until the cell is known deleted, so
// that cells nothing references (a put whose rollback failed to delete,
// a client that died between Prepare and Commit or before deleting what a
// commit superseded, a clear whose cell deletes failed) can be found and
// deleted later without a scan of the data store.
//
// A cell is garbage when no committed row references it and no live
// reservation may yet commit it: a generation a commit superseded, a
// commit's own Stale generation, a reservation Garbage aborted, and the
// cells of rows Delete or DeletePartition removed. A removed row's
// reservations are aborted at once (a Commit naming them fails with
// ErrConflict, as the MetaStore contract says), but Garbage returns them
// only once they are older than its olderThan, as it does any reservation:
// their put may still be writing them.
//
// A store that implements Reclaimer also commits only under live
// reservations: Commit fails with ErrConflict, applying nothing, when a
// field's generation is neither reserved for that row and still pending
// nor the row's committed one (a generation Garbage aborted, say). So a
// cell Garbage returned is never referenced afterwards.
//
// The caller deletes cells, then reports them with Swept. Until then the
// store keeps a record per garbage cell: a client that never calls Swept
// makes the store grow by one record per cell a commit replaces, so tq
// calls Swept after every delete of cells that succeeds: with a commit's
// Superseded then Stale cells as Commit returned them, with the cells of
// the rows Delete or DeletePartition returned in [AppendRowRefs] order,
// so that a store may match them against its records as one run.
type Reclaimer interface {
	// Garbage returns the garbage cells of partition not yet reported
	// swept, first aborting (atomically with the call) the pending
	// reservations older than olderThan by the store's clock: a later
	// Commit naming an aborted reservation fails with ErrConflict. A
	// reservation younger than olderThan is live and never returned, nor
	// is a cell a committed row references. A store may judge a
	// reservation by the age of a newer pending reservation of the same
	// cell, and so abort it later than it could. A cell may be returned by
	// several calls until it is reported swept, and may already be
	// deleted (deleting a missing key is no error). The Tag of an aborted
	// reservation's cell is "": the store never learned its backend tag.
	// An unknown partition has no garbage; a negative olderThan is an
	// error wrapping ErrInvalid.
	Garbage(ctx context.Context, partition string, olderThan time.Duration) ([]Ref, error)
	// Swept records that the cells refs name are deleted, so Garbage no
	// longer returns them and the store forgets them. A ref that names a
	// pending reservation aborts it (its Commit then fails with
	// ErrConflict): a put that rolled back reports its own cells this
	// way. Refs the store does not know as garbage or pending are
	// ignored; a partition left with no rows and no garbage is forgotten.
	Swept(ctx context.Context, partition string, refs []Ref) error
	// Abandon aborts the reservations refs name, of a put that failed
	// before its commit applied and is about to delete its own cells:
	// their Commit then fails with ErrConflict, and they become garbage
	// (with the refs' Tags), returned by Garbage until swept. A ref that
	// is already garbage, or a removed row's reservation (which becomes
	// garbage too), is known as well. When some ref names nothing the
	// store knows of the partition, Abandon still aborts the others and
	// returns an error matching ErrReservationLost: that reservation was
	// lost with metadata a failover replaced, its index or generation may
	// be another row's now, and the caller must not delete those cells by
	// storage key. A store whose metadata cannot be lost (in-process)
	// takes such refs for cells Garbage aborted and Swept forgot (a put
	// slower than olderThan), whose keys nobody else is given, and returns
	// nil: the caller deletes them.
	Abandon(ctx context.Context, partition string, refs []Ref) error
}

// AppendRowRefs appends the cells of rows to dst, row by row and by field
// name within a row: the order tq reports removed rows' cells swept in (see
// Reclaimer), which a store may record them in (memory does). Rows that
// share a Fields map (see Merger) share the work of ordering it.
func AppendRowRefs(dst []Ref, rows []*Row) []Ref {
	var (
		prev   map[string]FieldInfo
		sorted []Ref // prev's cells by field, Index unset
	)
	for i, r := range rows {
		if i == 0 || !SameMap(r.Fields, prev) {
			prev, sorted = r.Fields, sorted[:0]
			for f, fi := range r.Fields {
				sorted = append(sorted, Ref{Field: f, Gen: fi.Gen, Tag: fi.BackendTag})
			}
			slices.SortFunc(sorted, func(a, b Ref) int { return strings.Compare(a.Field, b.Field) })
		}
		for _, c := range sorted {
			c.Index = r.Index
			dst = append(dst, c)
		}
	}
	return dst
}
