package file

import (
	"bytes"
	"hash/maphash"
	"slices"

	"github.com/tqgo/tqgo/backends"
)

// numShards splits the cells into maps a checkpoint copies one at a time,
// so that it never holds the engine's lock for long.
const numShards = 64

// state is what the log's records make: the cells, each partition's log
// and the global index counter. apply is the one function that changes
// it, for a live write (after its frame reached the file) and in replay
// alike, so a reopened engine holds what the running one held. Guarded
// by engine.mu.
type state struct {
	seed  maphash.Seed
	cells [numShards]map[string][]byte
	logs  map[string]*plog
	next  uint64 // the next global index to hand out
	// cellBytes and logBytes measure the live data (keys and values; the
	// logs' entries and snapshots), against which the log's size decides
	// a checkpoint.
	cellBytes, logBytes int64
	ncells              int
}

func newState() *state {
	s := &state{seed: maphash.MakeSeed(), logs: map[string]*plog{}, next: 1}
	for i := range s.cells {
		s.cells[i] = map[string][]byte{}
	}
	return s
}

func (s *state) shard(key string) map[string][]byte {
	return s.cells[maphash.String(s.seed, key)%numShards]
}

func (s *state) live() int64 { return s.cellBytes + s.logBytes }

// plog is one partition's log, as toylog keeps it: its snapshot, at start
// (the zero Pos: none, and entries begin at 1), and the entries held,
// which begin with start's own when there is a snapshot. Entries are
// never changed once appended (a checkpoint shares them): a compaction
// makes a new slice.
type plog struct {
	snap    []byte
	start   backends.Pos
	entries []backends.Entry
	emptied bool  // by a Compact with no snapshot, and not appended to since
	bytes   int64 // of snap and the entries' Data
}

func (l *plog) last() *backends.Entry {
	if len(l.entries) == 0 {
		return &backends.Entry{}
	}
	return &l.entries[len(l.entries)-1]
}

// holds reports whether the log holds position p as it was.
func (l *plog) holds(p backends.Pos) bool {
	if p == l.start {
		return true
	}
	if len(l.entries) == 0 {
		return false
	}
	first := l.entries[0].N
	return p.N >= first && p.N-first < uint64(len(l.entries)) && l.entries[p.N-first].ID == p.ID
}

// after returns the log after from (l nil: a partition with no log), the
// entries' Data copied, as a server's reply would be: a reader may keep
// it.
func (l *plog) after(from backends.Pos) backends.Tail {
	var t backends.Tail
	switch {
	case l == nil:
		t.Restart = from != backends.Pos{}
		return t
	case !l.holds(from):
		t = backends.Tail{Restart: true, Snapshot: bytes.Clone(l.snap), Start: l.start}
		from = l.start
	}
	if len(l.entries) == 0 {
		return t
	}
	held := l.entries[from.N+1-l.entries[0].N:]
	t.Entries = make([]backends.Entry, len(held))
	for i, e := range held {
		e.Data = bytes.Clone(e.Data)
		t.Entries[i] = e
	}
	return t
}

// apply applies o to s. It reports the partition whose log changed ("" if
// none), for waking its readers. For an op with a caller, it sets the
// reply (an append's tail).
func (s *state) apply(o *op) (woke string, changed bool) {
	switch o.kind {
	case kindWrite:
		s.write(o.cells)
	case kindDelete:
		for _, k := range o.keys {
			m := s.shard(k)
			if v, ok := m[k]; ok {
				s.cellBytes -= int64(len(k) + len(v))
				s.ncells--
				delete(m, k)
			}
		}
	case kindAppend, kindCells:
		s.write(o.cells)
		s.append(o)
		return o.part, len(o.recs) > 0
	case kindCompact:
		s.compact(o)
	}
	return "", false
}

func (s *state) write(cells []cell) {
	for _, c := range cells {
		m := s.shard(c.key)
		if v, ok := m[c.key]; ok {
			s.cellBytes -= int64(len(c.key) + len(v))
			s.ncells--
			// A new entry, not an assignment, so that the map keeps this
			// frame's key and not the first one's, which would keep that
			// frame alive as long as the key lives.
			delete(m, c.key)
		}
		m[c.key] = c.val
		s.cellBytes += int64(len(c.key) + len(c.val))
		s.ncells++
	}
}

func (s *state) append(o *op) {
	l := s.logs[o.part]
	if len(o.recs) == 0 {
		if o.done != nil {
			o.tail = l.after(o.from)
		}
		return
	}
	if l == nil {
		l = &plog{}
		s.logs[o.part] = l
	}
	l.emptied = false
	for _, r := range o.recs {
		l.entries = append(l.entries, backends.Entry{N: l.last().N + 1, ID: r.id, Time: o.stamp, Base: s.next, Data: r.data})
		s.next += r.indexes
		l.bytes += int64(len(r.data))
		s.logBytes += int64(len(r.data))
	}
	if o.done != nil {
		o.tail = l.after(o.from)
		for i := len(o.tail.Entries) - len(o.recs); i < len(o.tail.Entries); i++ {
			o.tail.Entries[i].Data = nil // the caller has it
		}
	}
}

// compacts reports whether a Compact of l at at with snapshot snap (nil:
// empty the log) does anything.
func (l *plog) compacts(at backends.Pos, snap []byte) bool {
	switch {
	case l == nil:
		return false
	case snap == nil:
		return l.last().Pos() == at && len(l.entries) > 0
	default:
		return at.N > l.start.N && l.holds(at)
	}
}

func (s *state) compact(o *op) {
	l := s.logs[o.part]
	if !l.compacts(o.at, o.snap) {
		return
	}
	s.logBytes -= l.bytes
	l.entries = slices.Clone(l.entries[o.at.N-l.entries[0].N:])
	l.snap, l.start, l.emptied = o.snap, o.at, o.snap == nil
	l.bytes = int64(len(l.snap))
	for _, e := range l.entries {
		l.bytes += int64(len(e.Data))
	}
	s.logBytes += l.bytes
}
