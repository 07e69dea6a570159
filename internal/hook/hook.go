// Package hook holds test-only hooks into the engines' internals: a test
// sets one to act at a moment it could not otherwise reach (ending a
// Wait's context just as its claim is filled). Tests running side by side
// may each set one: every hook set runs, and each restore takes away its
// own alone. Unset, each costs an atomic load.
package hook

import (
	"slices"
	"sync"
	"sync/atomic"
)

// hooks is one kind of hook: the functions set, as an immutable slice
// replaced whole under mu.
type hooks struct {
	mu  sync.Mutex
	set atomic.Pointer[[]*func(partition string)]
}

var served, waiting hooks

// add sets f (nil: nothing) and returns the restore that takes it away.
func (h *hooks) add(f func(partition string)) (restore func()) {
	if f == nil {
		return func() {}
	}
	p := &f
	h.mu.Lock()
	defer h.mu.Unlock()
	var next []*func(string)
	if cur := h.set.Load(); cur != nil {
		next = slices.Clone(*cur)
	}
	next = append(next, p)
	h.set.Store(&next)
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		cur := h.set.Load()
		if cur == nil {
			return
		}
		next := slices.DeleteFunc(slices.Clone(*cur), func(q *func(string)) bool { return q == p })
		if len(next) == 0 {
			h.set.Store(nil)
			return
		}
		h.set.Store(&next)
	}
}

// run runs every hook set.
func (h *hooks) run(partition string) {
	if cur := h.set.Load(); cur != nil {
		for _, f := range *cur {
			(*f)(partition)
		}
	}
}

// SetServed makes f run when a Wait of this process may be served: on a
// shared engine (internal/replica), when a record applied fulfils one of
// its standing claims (f runs under the partition's lock: it must not
// call the engine); on the memory engine, when a change wakes a Wait,
// before it returns. nil sets nothing. It returns a function that takes
// f away (and no other hook).
func SetServed(f func(partition string)) (restore func()) { return served.add(f) }

// Served runs the hooks SetServed set.
func Served(partition string) { served.run(partition) }

// SetWaiting makes f run when a Wait of this process is about to block
// (under the partition's lock on a shared engine: f must not call the
// engine). nil sets nothing. It returns a function that takes f away
// (and no other hook).
func SetWaiting(f func(partition string)) (restore func()) { return waiting.add(f) }

// Waiting runs the hooks SetWaiting set.
func Waiting(partition string) { waiting.run(partition) }
