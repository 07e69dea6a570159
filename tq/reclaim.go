package tq

import (
	"context"
	"time"

	"github.com/tqgo/tqgo/backends/metadata"
)

// ReclaimReport is what one Reclaim did.
type ReclaimReport struct {
	// Deleted is how many unreferenced cells were deleted. A cell that
	// was already gone counts too (a reservation never written, a delete
	// that succeeded but whose report to the store was lost): deleting a
	// missing key is a no-op.
	Deleted int
	// Left is how many unreferenced cells could not be deleted; the next
	// Reclaim tries them again.
	Left int
}

// Reclaim deletes the cells of partition that nothing references and that
// earlier calls leaked: a put whose rollback could not delete its cells, a
// put whose client died after writing cells and before committing, cells
// a commit replaced whose client died before deleting them, and cells of
// a Clear or ClearPartition whose deletes failed or whose client died
// after removing the rows. The metadata store knows every cell it handed
// out (see metadata.MetaStore), so nothing of the data store is scanned.
//
// Reclaim never deletes a cell that a committed row references, nor one
// of a put reserved less than olderThan ago. A put reserved earlier is
// taken for abandoned: Reclaim aborts it, deletes its cells, and if it was
// in fact still running its commit fails with ErrConflict and it rolls
// back (cells it writes after Reclaim ran are then its rollback's alone
// to delete). So olderThan must exceed the longest put; olderThan 0
// aborts every put of the partition in flight, which is right only when
// none is (after the writers of a partition stopped, say, to collect what
// a ClearPartition could not). A negative olderThan is ErrInvalid.
//
// It returns how many cells it deleted and how many it could not; an
// error from the data store leaves those for the next Reclaim.
func (c *Client) Reclaim(ctx context.Context, partition string, olderThan time.Duration) (_ ReclaimReport, err error) {
	ctx, tr := c.trace(ctx, "Reclaim", partition, 0)
	defer func() { tr.done(err) }()
	release, err := c.enter(ctx, "Reclaim", partition)
	if err != nil {
		return ReclaimReport{}, err
	}
	defer release()
	if err := checkPartition(partition); err != nil {
		return ReclaimReport{}, err
	}
	if olderThan < 0 {
		return ReclaimReport{}, invalidf("negative olderThan %v", olderThan)
	}
	refs, err := c.meta.Garbage(ctx, partition, olderThan)
	if err != nil {
		return ReclaimReport{}, err
	}
	deleted, err := c.deleteRefs(ctx, refs)
	rep := ReclaimReport{Deleted: len(deleted), Left: len(refs) - len(deleted)}
	tr.add(0, len(deleted), 0)
	// The cells are gone whether or not ctx is: record it.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if serr := c.swept(sctx, partition, deleted, "reclaimed cells"); err == nil {
		err = serr
	}
	return rep, err
}

// swept reports cells of partition deleted to the metadata store, so that
// it forgets them; a failure is logged and
// returned, and only leaves them listed for a later Reclaim to delete
// again.
func (c *Client) swept(ctx context.Context, partition string, refs []metadata.Ref, why string) error {
	if len(refs) == 0 {
		return nil
	}
	err := c.meta.Swept(ctx, partition, refs)
	if err != nil {
		c.opts.logger.Warn("tq: reporting deleted cells to the metadata failed; a later Reclaim deletes them again", "why", why, "cells", len(refs), "err", err)
	}
	return err
}
