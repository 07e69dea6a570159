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
	b := newBuilder(kindWrite, cellsLen(cells))
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
// destination's is returned as it is kept, read-only (it is never
// written again).
func (s *store) Read(ctx context.Context, cells []backends.ReadCell) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if len(cells) == 0 {
		return nil
	}
	s.e.mu.RLock()
	vals := s.e.st.values(cells)
	s.e.mu.RUnlock()
	for i, v := range vals {
		backends.FillReadCell(&cells[i], v)
	}
	return nil
}

// values returns the cells' values (nil: missing), for copying out after
// the lock is let go: values are never written in place.
func (s *state) values(cells []backends.ReadCell) [][]byte {
	vals := make([][]byte, len(cells))
	for i := range cells {
		vals[i] = s.shard(cells[i].Key)[cells[i].Key]
	}
	return vals
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
