package file

import (
	"hash/maphash"
	"strings"

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
	cells [numShards]map[string]entry
	pool  *framePool // where the frames of the cells go once none is left
	logs  map[string]*plog
	next  uint64 // the next global index to hand out
	// cellBytes and logBytes measure the live data (keys and values; the
	// logs' entries and snapshots), against which the log's size decides
	// a checkpoint.
	cellBytes, logBytes int64
	ncells              int
}

// entry is a cell's value and the recycled frame its key and value lie
// in, which it holds a reference to (nil: a frame of its own allocation,
// left to the garbage collector).
type entry struct {
	v []byte
	f *frameBuf
}

func newState(pool *framePool) *state {
	s := &state{seed: maphash.MakeSeed(), pool: pool, logs: map[string]*plog{}, next: 1}
	for i := range s.cells {
		s.cells[i] = map[string]entry{}
	}
	return s
}

func (s *state) shard(key string) map[string]entry {
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
		s.write(o.cells, o.fb)
	case kindDelete:
		for _, k := range o.keys {
			m := s.shard(k)
			if old, ok := m[k]; ok {
				s.cellBytes -= int64(len(k) + len(old.v))
				s.ncells--
				delete(m, k)
				s.pool.release(old.f)
			}
		}
	case kindAppend, kindCells:
		s.write(o.cells, o.fb)
		s.append(o)
		return o.part, len(o.recs) > 0
	case kindCompact:
		s.compact(o)
	}
	return "", false
}

// write stores cells, whose keys and values lie in f (nil: a frame left
// to the garbage collector), each holding a reference to it.
func (s *state) write(cells []cell, f *frameBuf) {
	if f != nil {
		f.refs.Add(int32(len(cells)))
	}
	for _, c := range cells {
		m := s.shard(c.key)
		if old, ok := m[c.key]; ok {
			s.cellBytes -= int64(len(c.key) + len(old.v))
			s.ncells--
			// A new entry, not an assignment, so that the map keeps this
			// frame's key and not the first one's, which may be reused
			// once its last value is gone.
			delete(m, c.key)
			s.pool.release(old.f)
		}
		m[c.key] = entry{c.val, f}
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
		s.logs[strings.Clone(o.part)] = l // the frame may be reused
	}
	l.Emptied = false
	var data []byte
	if o.fb != nil {
		// Readers keep entries' Data as long as they like: out of a frame
		// that may be reused, it is copied (one allocation per frame).
		n := 0
		for _, r := range o.recs {
			n += len(r.data)
		}
		data = make([]byte, 0, n)
	}
	for _, r := range o.recs {
		if o.fb != nil {
			data = append(data, r.data...)
			r.data = data[len(data)-len(r.data) : len(data) : len(data)]
		}
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
