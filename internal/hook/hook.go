// Package hook holds test-only hooks into the engines' internals: a test
// sets one to act at a moment it could not otherwise reach (ending a
// Wait's context just as its claim is filled). Unset, each costs an atomic
// load.
package hook

import "sync/atomic"

var served, waiting atomic.Pointer[func(partition string)]

// SetServed makes f run when a Wait of this process may be served: on a
// shared engine (internal/replica), when a record applied fulfils one of
// its standing claims (f runs under the partition's lock: it must not
// call the engine); on the memory engine, when a change wakes a Wait,
// before it returns. nil unsets it. It returns a function restoring the
// former hook.
func SetServed(f func(partition string)) (restore func()) {
	var p *func(string)
	if f != nil {
		p = &f
	}
	old := served.Swap(p)
	return func() { served.Store(old) }
}

// Served runs the hook SetServed set, if any.
func Served(partition string) {
	if f := served.Load(); f != nil {
		(*f)(partition)
	}
}

// SetWaiting makes f run when a Wait of this process is about to block
// (under the partition's lock on a shared engine: f must not call the
// engine). nil unsets it. It returns a function restoring the former
// hook.
func SetWaiting(f func(partition string)) (restore func()) {
	var p *func(string)
	if f != nil {
		p = &f
	}
	old := waiting.Swap(p)
	return func() { waiting.Store(old) }
}

// Waiting runs the hook SetWaiting set, if any.
func Waiting(partition string) {
	if f := waiting.Load(); f != nil {
		(*f)(partition)
	}
}
