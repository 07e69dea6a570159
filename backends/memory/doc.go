// Package memory is tqgo's embedded engine: a sharded in-process data store
// with the zero-copy allocate-then-publish path, and the in-process
// MetaStore that other engines without shared metadata reuse.
//
// It registers the "memory" scheme: tq.Open(ctx, "memory://") (or an empty
// URL) opens a fresh, private store.
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
