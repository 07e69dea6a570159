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
// It registers the "memory" scheme. tq.Open(ctx, "memory://") (or an
// empty URL) opens a fresh, private engine: Engine{Data: New(), Meta:
// NewMetaStore(), Local: true}, which no other Open sees.
// tq.Open(ctx, "memory://NAME") opens the process's engine of that name,
// shared by every Open of the same name in the process (as SQLite's
// "file:NAME?mode=memory&cache=shared"): clients of memory://x see each
// other's puts, claims and acks, and a Wait in one is woken by a put in
// another; memory://x and memory://y are separate. The engine lives while
// any engine opened on it is open: when the last is closed (its Data and
// Meta both), its rows are gone, and a later Open of the name starts
// empty. A name is a URL host: letters, digits, '-', '_' and '.'.
package memory

import (
	"context"
	"fmt"
	"net/url"
	"sync"

	"github.com/tqgo/tqgo/backends"
)

func init() {
	backends.Register("memory", func(ctx context.Context, u *url.URL) (backends.Engine, error) {
		// Nothing to set: a path, user or option is a mistake (another
		// engine's URL with the wrong scheme, say).
		if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Opaque != "" || u.Port() != "" {
			return backends.Engine{}, fmt.Errorf("%w: memory:// takes a name (memory://NAME) and no port, path, user or options: %q", backends.ErrInvalid, u.Redacted())
		}
		if u.Host == "" {
			return backends.Engine{Data: New(), Meta: NewMetaStore(), Local: true}, nil
		}
		return openNamed(u.Host), nil
	})
}

// named are the process's named engines, by name.
var named = struct {
	sync.Mutex
	m map[string]*namedEngine
}{m: map[string]*namedEngine{}}

// namedEngine is one named engine and how many opens of it are open.
type namedEngine struct {
	name string
	data *Store
	meta *MetaStore
	refs int
}

// openNamed opens the engine named name, making it if none is open.
func openNamed(name string) backends.Engine {
	named.Lock()
	defer named.Unlock()
	e := named.m[name]
	if e == nil {
		e = &namedEngine{name: name, data: New(), meta: NewMetaStore()}
		named.m[name] = e
	}
	e.refs++
	o := &namedOpen{e: e, open: 2}
	return backends.Engine{Data: namedStore{Store: e.data, o: o}, Meta: namedMeta{MetaStore: e.meta, o: o}, Local: true}
}

// namedOpen is one Open of a named engine: released once both its Data
// and its Meta are closed.
type namedOpen struct {
	e          *namedEngine
	mu         sync.Mutex
	open       int // of Data and Meta, how many are not closed
	data, meta bool
}

// close marks the open's data (or meta) closed; the last close of the
// engine's last open closes the engine.
func (o *namedOpen) close(data bool) error {
	o.mu.Lock()
	if (data && o.data) || (!data && o.meta) {
		o.mu.Unlock()
		return nil
	}
	if data {
		o.data = true
	} else {
		o.meta = true
	}
	o.open--
	last := o.open == 0
	o.mu.Unlock()
	if !last {
		return nil
	}
	named.Lock()
	defer named.Unlock()
	e := o.e
	if e.refs--; e.refs > 0 {
		return nil
	}
	delete(named.m, e.name)
	return joinErr(e.meta.Close(), e.data.Close())
}

func joinErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// namedStore is a named engine's Store as one Open has it.
type namedStore struct {
	*Store
	o *namedOpen
}

// Close releases this open of the engine (see the package doc).
func (s namedStore) Close() error { return s.o.close(true) }

// namedMeta is a named engine's MetaStore as one Open has it.
type namedMeta struct {
	*MetaStore
	o *namedOpen
}

// Close releases this open of the engine (see the package doc).
func (m namedMeta) Close() error { return m.o.close(false) }
