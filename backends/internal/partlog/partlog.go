// Package partlog is one partition's log as an engine that keeps it in
// memory holds it (backends/file, the toy engine of the tests): the
// snapshot, the entries after it, and the reading and compacting that
// backends.Log specifies over them, written once.
package partlog

import (
	"bytes"
	"slices"

	"github.com/tqgo/tqgo/backends"
)

// Log is a partition's log: its snapshot, at Start (the zero Pos: none,
// and entries begin at 1), and the entries held, which begin with Start's
// own when there is a snapshot. A Log made by an append always holds an
// entry. Entries are never changed once appended: Compact makes a new
// slice, so a copy of the Log (a checkpoint's) stays as it was.
type Log struct {
	Snap    []byte
	Start   backends.Pos
	Entries []backends.Entry
	Emptied bool // by a Compact with no snapshot, and not appended to since
}

// Last is the last entry (a zero one if none).
func (l *Log) Last() *backends.Entry {
	if len(l.Entries) == 0 {
		return &backends.Entry{}
	}
	return &l.Entries[len(l.Entries)-1]
}

// Holds reports whether the log holds position p as it was.
func (l *Log) Holds(p backends.Pos) bool {
	if p == l.Start {
		return true
	}
	if len(l.Entries) == 0 {
		return false
	}
	first := l.Entries[0].N
	return p.N >= first && p.N-first < uint64(len(l.Entries)) && l.Entries[p.N-first].ID == p.ID
}

// After returns the log after from (l nil: a partition with no log), the
// entries' Data copied, as a server's reply would be: a reader may keep
// it.
func (l *Log) After(from backends.Pos) backends.Tail {
	var t backends.Tail
	switch {
	case l == nil:
		t.Restart = from != backends.Pos{}
		return t
	case !l.Holds(from):
		t = backends.Tail{Restart: true, Snapshot: bytes.Clone(l.Snap), Start: l.Start}
		from = l.Start
	}
	if len(l.Entries) == 0 {
		return t
	}
	held := l.Entries[from.N+1-l.Entries[0].N:]
	t.Entries = make([]backends.Entry, len(held))
	for i, e := range held {
		e.Data = bytes.Clone(e.Data)
		t.Entries[i] = e
	}
	return t
}

// Compacts reports whether Compact(at, snap) changes l (nil: no log), as
// backends.Log.Compact says: a snapshot newer than the log's at a
// position it holds, or, with a nil snap, at its last entry.
func (l *Log) Compacts(at backends.Pos, snap []byte) bool {
	switch {
	case l == nil:
		return false
	case snap == nil:
		return len(l.Entries) > 0 && l.Last().Pos() == at
	default:
		return at.N > l.Start.N && l.Holds(at)
	}
}

// Compact stores snap (kept as given) as the state after at, or empties
// the log with a nil snap, if Compacts says it does anything.
func (l *Log) Compact(at backends.Pos, snap []byte) bool {
	if !l.Compacts(at, snap) {
		return false
	}
	l.Entries = slices.Clone(l.Entries[at.N-l.Entries[0].N:])
	l.Snap, l.Start, l.Emptied = snap, at, snap == nil
	return true
}
