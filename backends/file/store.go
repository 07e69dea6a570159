package file

import (
	"context"

	"github.com/tqgo/tqgo/backends"
)

// store is a client's backends.Store: cells in the engine's memory,
// every write a frame of its log.
type store struct{ handle }

var _ backends.Store = (*store)(nil)

// Write copies the cells into one frame of the log (the values are kept
// in memory as slices of it: one copy), and returns once the frame is
// written (and fsynced, under sync=always) and applied. Tags are "".
func (s *store) Write(ctx context.Context, cells []backends.Cell) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if len(cells) == 0 {
		return nil
	}
	b := s.e.frames.builder(kindWrite, cellsLen(cells))
	b.cells(cells)
	if err := s.submit(ctx, &b, &op{}); err != nil {
		return err
	}
	for i := range cells {
		cells[i].Tag = ""
	}
	return nil
}

// Read serves the cells from memory: a value whose length is not the
// destination's is returned read-only, copied out if it is short (under
// 64 KiB: one allocation per call) and as it is kept otherwise.
func (s *store) Read(ctx context.Context, cells []backends.ReadCell) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if len(cells) == 0 {
		return nil
	}
	s.e.mu.RLock()
	vals, held := s.e.st.values(cells)
	s.e.mu.RUnlock()
	s.e.fill(cells, vals, held)
	return nil
}

// values returns the cells' entries (a nil value: missing) and holds a
// reference to each recycled frame among them (one per run of cells in
// the same frame), for copying out after the lock is let go: a value is
// never written in place, nor its frame reused while held.
func (s *state) values(cells []backends.ReadCell) ([]entry, []*frameBuf) {
	vals := make([]entry, len(cells))
	var held []*frameBuf
	var last *frameBuf
	for i := range cells {
		en := s.shard(cells[i].Key)[cells[i].Key]
		vals[i] = en
		if en.f != nil && en.f != last {
			en.f.refs.Add(1)
			held, last = append(held, en.f), en.f
		}
	}
	return vals, held
}

// fill fills the cells with the values values found, then lets the
// frames held go. A value handed out whole (Value: not of its
// destination's length) may not lie in a frame that will be reused: one
// under smallValue is copied out, and a longer one pins its frame.
func (e *engine) fill(cells []backends.ReadCell, vals []entry, held []*frameBuf) {
	out := 0
	for i, en := range vals {
		if en.f != nil && len(en.v) != len(cells[i].Head)+len(cells[i].Body) && len(en.v) < smallValue {
			out += len(en.v)
		}
	}
	var buf []byte
	if out > 0 {
		buf = make([]byte, 0, out)
	}
	for i, en := range vals {
		v := en.v
		if en.f != nil && len(v) != len(cells[i].Head)+len(cells[i].Body) {
			switch {
			case len(v) == 0:
				v = []byte{}
			case len(v) < smallValue:
				buf = append(buf, v...)
				v = buf[len(buf)-len(v) : len(buf) : len(buf)]
			default:
				en.f.pinned.Store(true)
			}
		}
		backends.FillReadCell(&cells[i], v)
	}
	for _, f := range held {
		e.frames.release(f)
	}
}

// Delete removes the keys, with one frame of the log.
func (s *store) Delete(ctx context.Context, cells []backends.Cell) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if len(cells) == 0 {
		return nil
	}
	size := uvarintLen(uint64(len(cells)))
	for i := range cells {
		size += strLen(len(cells[i].Key))
	}
	b := newBuilder(kindDelete, size)
	b.uvarint(uint64(len(cells)))
	for i := range cells {
		b.str(cells[i].Key)
	}
	return s.submit(ctx, &b, &op{})
}
