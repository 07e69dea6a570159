// Package memory is tqgo's embedded engine: [Store], a sharded in-process
// data store, and [MetaStore], the in-process metadata that tq gives any
// Local engine without a MetaStore of its own.
//
// Store is a backends.Store and a backends.Stager:
//
//   - Write copies each cell's Head and Body into the store's memory (the
//     caller may reuse its buffers at once), small values of one call
//     sharing arenas; a staged cell's Body is kept as it is, with no copy.
//   - The store owns that memory and reuses it: an arena whose values are
//     all deleted, overwritten or unstaged goes to a free list of at most
//     64 MiB, which later Writes and Stages take from before allocating, so
//     a partition written and cleared in a loop causes no fresh page faults.
//   - Read copies a value into the caller's Head and Body when its length
//     is theirs, and otherwise into memory of the caller's own in Value (a
//     value of 64 KiB or more, never reused, is returned zero-copy and
//     read-only), so what a caller holds stays as it was whatever is
//     written later.
//   - Stage hands out the store's memory, the small buffers of one call
//     sharing one arena; a staged value is invisible until Write
//     publishes it, and Unstage of an unpublished cell publishes nothing.
//   - Tags are always "". Each of 64 shards has its own lock, taken once
//     per call and never while copying.
//
// It registers the "memory" scheme: tq.Open(ctx, "memory://") (or an empty
// URL) opens a fresh, private engine: Engine{Data: New(), Meta:
// NewMetaStore(), Local: true}.
package memory

import (
	"context"
	"fmt"
	"net/url"

	"github.com/tqgo/tqgo/backends"
)

func init() {
	backends.Register("memory", func(ctx context.Context, u *url.URL) (backends.Engine, error) {
		// Nothing to name or set: a host, path or option is a mistake
		// (another engine's URL with the wrong scheme, say).
		if u.Host != "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Opaque != "" {
			return backends.Engine{}, fmt.Errorf("%w: memory:// takes no host, path or options", backends.ErrInvalid)
		}
		return backends.Engine{Data: New(), Meta: NewMetaStore(), Local: true}, nil
	})
}
