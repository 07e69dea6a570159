package backends

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sync"
)

// Engine is what an Opener returns: a data backend and, when the engine
// shares metadata between processes (redis), a MetaStore. A nil Meta makes
// tq keep metadata in process.
type Engine struct {
	Data Backend
	Meta MetaStore
}

// Opener opens an engine for a URL of its scheme.
type Opener func(ctx context.Context, u *url.URL) (Engine, error)

var (
	registryMu sync.RWMutex
	registry   = map[string]Opener{}
)

// Register makes an engine available under scheme. It panics if open is nil
// or the scheme is registered twice, as database/sql.Register does: both are
// programming errors found at init.
func Register(scheme string, open Opener) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if open == nil {
		panic("backends: Register opener is nil")
	}
	if _, dup := registry[scheme]; dup {
		panic("backends: Register called twice for scheme " + scheme)
	}
	registry[scheme] = open
}

// Schemes returns the registered schemes, sorted.
func Schemes() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	out := make([]string, 0, len(registry))
	for s := range registry {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Open parses rawURL and opens it with the opener of its scheme.
func Open(ctx context.Context, rawURL string) (Engine, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// Not url.Parse's own error: it quotes the URL, password included.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return Engine{}, fmt.Errorf("%w: parse URL: %w", ErrInvalid, err)
	}
	registryMu.RLock()
	open := registry[u.Scheme]
	registryMu.RUnlock()
	if open == nil {
		return Engine{}, fmt.Errorf("%w %q (forgotten import?)", ErrUnknownScheme, u.Scheme)
	}
	return open(ctx, u)
}
