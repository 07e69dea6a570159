// Package memory is tqgo's embedded engine: a sharded in-process data store
// with the zero-copy allocate-then-publish path, and the in-process
// MetaStore that other engines without shared metadata reuse.
//
// It registers the "memory" scheme: tq.Open(ctx, "memory://") (or an empty
// URL) opens a fresh, private store.
package memory

import (
	"context"
	"net/url"

	"github.com/tqgo/tqgo/backends"
)

func init() {
	backends.Register("memory", func(ctx context.Context, u *url.URL) (backends.Engine, error) {
		return backends.Engine{Data: New(), Meta: NewMetaStore()}, nil
	})
}
