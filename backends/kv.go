package backends

import "context"

// KV is a plain key-value engine: four methods, whole values. [FromKV]
// makes a Store of it, so an engine over storage with no better interface
// (a map behind a mutex, an object store) is one screen of code.
type KV interface {
	// Put stores values[i] under keys[i], replacing existing values. It
	// must not keep the value slices after it returns. On error some keys
	// may be written.
	Put(ctx context.Context, keys []string, values [][]byte) error
	// Get returns each key's value, nil for a missing one. The caller only
	// reads them.
	Get(ctx context.Context, keys []string) ([][]byte, error)
	// Delete removes keys; missing ones are ignored.
	Delete(ctx context.Context, keys []string) error
	Close() error
}

// FromKV returns a Store over kv. Write joins a cell's Head and Body into
// one buffer (one copy, the cells of a call sharing one allocation) unless
// Head is empty; Read fills a destination from the value Get returned
// (one copy) when its length fits, and sets Value to it otherwise. Tags
// are always "".
func FromKV(kv KV) Store { return kvStore{kv} }

type kvStore struct{ kv KV }

func (s kvStore) Write(ctx context.Context, cells []Cell) error {
	if len(cells) == 0 {
		return nil
	}
	if err := s.kv.Put(ctx, CellKeys(cells), JoinCells(cells)); err != nil {
		return err
	}
	for i := range cells {
		cells[i].Tag = ""
	}
	return nil
}

func (s kvStore) Read(ctx context.Context, cells []ReadCell) error {
	if len(cells) == 0 {
		return nil
	}
	values, err := s.kv.Get(ctx, ReadCellKeys(cells))
	if err != nil {
		return err
	}
	if len(values) != len(cells) {
		return &countError{op: "Get", want: len(cells), got: len(values)}
	}
	for i, v := range values {
		FillReadCell(&cells[i], v)
	}
	return nil
}

func (s kvStore) Delete(ctx context.Context, cells []Cell) error {
	if len(cells) == 0 {
		return nil
	}
	return s.kv.Delete(ctx, CellKeys(cells))
}

func (s kvStore) Close() error { return s.kv.Close() }

// FillReadCell sets c from v, the whole value of its key (nil: missing), as
// Store.Read documents: into Head and Body when v has their length (a
// copy), else into Value (v itself). For engines whose reads cannot land in
// the caller's memory.
func FillReadCell(c *ReadCell, v []byte) {
	c.Found, c.Value = v != nil, nil
	switch {
	case v == nil:
	case len(v) == len(c.Head)+len(c.Body) && len(v) > 0:
		copy(c.Body, v[copy(c.Head, v):])
	default:
		c.Value = v
	}
}

// CellKeys returns the cells' keys.
func CellKeys(cells []Cell) []string {
	keys := make([]string, len(cells))
	for i := range cells {
		keys[i] = cells[i].Key
	}
	return keys
}

// ReadCellKeys returns the keys of cells to read.
func ReadCellKeys(cells []ReadCell) []string {
	keys := make([]string, len(cells))
	for i := range cells {
		keys[i] = cells[i].Key
	}
	return keys
}

// JoinCells returns each cell's value as one slice, for engines that take
// whole values: Body itself when Head is empty, else Head and Body copied
// together, every such copy of the call in one allocation. The slices
// alias the cells' memory or that allocation: they are valid as long as
// the cells' are.
func JoinCells(cells []Cell) [][]byte {
	values := make([][]byte, len(cells))
	joined := 0
	for i := range cells {
		if len(cells[i].Head) > 0 {
			joined += len(cells[i].Head) + len(cells[i].Body)
		}
	}
	slab := make([]byte, 0, joined)
	for i := range cells {
		c := &cells[i]
		if len(c.Head) == 0 {
			values[i] = c.Body
			continue
		}
		start := len(slab)
		slab = append(append(slab, c.Head...), c.Body...)
		values[i] = slab[start:len(slab):len(slab)]
	}
	return values
}
