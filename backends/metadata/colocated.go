package metadata

import (
	"context"

	"github.com/tqgo/tqgo/backends"
)

// Colocated is a MetaStore whose server also holds the engine's data
// (redis): it writes cells together with the commit that references them,
// and reads cells together with a check that the rows naming them are
// current, each in one request where the engine's own Store and MetaStore
// would take two. tq uses these two calls when its MetaStore is a
// Colocated, and backends.Store.Write then Commit, or Lookup then backends.Store.Read,
// otherwise; with the same contracts either way.
type Colocated interface {
	MetaStore
	// WriteCommit writes cells as backends.Store.Write does and, once every cell is
	// written, commits updates as Commit does, and returns Commit's result.
	// Errors are Commit's: on one that does not match backends.ErrOutcomeUnknown the
	// commit did not apply (some cells may be written: the caller deletes
	// them as after a failed Commit); on one that does, the caller keeps
	// the cells. Staged cells are published as the engine's backends.Store.Write
	// publishes them. A Colocated engine's cells carry no tags: WriteCommit
	// sets every backends.Cell.Tag to "", and updates name none.
	WriteCommit(ctx context.Context, partition string, cells []backends.Cell, updates []RowUpdate) (CommitResult, error)
	// ReadRows looks up the committed rows of keys (nil for a key unknown
	// or not yet committed), calls plan with them to learn which cells to
	// read into which destinations, and reads those cells, as Lookup then
	// backends.Store.Read would. It returns the rows plan was last called with, whose
	// cells it read. An engine may call plan with its client-side copy of
	// the rows and confirm that copy current in the request that reads the
	// cells; when the copy was stale it calls plan again with the rows as
	// they are, and reads again. An error from plan is returned as it is.
	ReadRows(ctx context.Context, partition string, keys []string, plan func(rows []*Row) ([]backends.ReadCell, error)) ([]*Row, error)
}
