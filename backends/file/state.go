package file

import (
	"hash/maphash"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/internal/partlog"
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

// plog is one partition's log, and the bytes of its snapshot and its
// entries' Data.
type plog struct {
	partlog.Log
	bytes int64
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
	l.Emptied = false
	for _, r := range o.recs {
		l.Entries = append(l.Entries, backends.Entry{N: l.Last().N + 1, ID: r.id, Time: o.stamp, Base: s.next, Data: r.data})
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

func (s *state) compact(o *op) {
	l := s.logs[o.part]
	if l == nil || !l.Compact(o.at, o.snap) {
		return
	}
	s.logBytes -= l.bytes
	l.bytes = int64(len(l.Snap))
	for _, e := range l.Entries {
		l.bytes += int64(len(e.Data))
	}
	s.logBytes += l.bytes
}

// after is l.After, for a log that may be nil.
func (l *plog) after(from backends.Pos) backends.Tail {
	if l == nil {
		return (*partlog.Log)(nil).After(from)
	}
	return l.After(from)
}

// compacts is l.Compacts, for a log that may be nil.
func (l *plog) compacts(at backends.Pos, snap []byte) bool {
	return l != nil && l.Compacts(at, snap)
}
