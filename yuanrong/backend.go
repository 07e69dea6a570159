package yuanrong

import (
	"context"

	"github.com/tqgo/tqgo/backends"
)

// Backend is the datasystem as a tq data store (backends.Store) that
// stages (backends.Stager): tq packs each value straight into a datasystem
// buffer Stage creates, and Write publishes it in place; a cell of the
// caller's memory is copied into a buffer Write creates. Write reports
// TagKV per cell (Cell.Tag), and Read and Delete take the tags back.
// Creates and publishes run in rounds of PutKeysLimit keys, reads and
// deletes in rounds of GetClearKeysLimit.
//
// A Backend is safe for concurrent use when its DataSystem is; the cells
// of one Stage, Write or Unstage call are used by one goroutine at a time.
// It owns the DataSystem: Close closes it.
type Backend struct {
	e *engine
}

var (
	_ backends.Store  = (*Backend)(nil)
	_ backends.Stager = (*Backend)(nil)
)

// NewBackend returns a Backend over ds, which it takes ownership of.
// Packing options are ignored: tq packs (see tq.WithDSMaxWorkers).
//
// tq needs it as a backends.Engine: over a datasystem that only this
// process reaches (a Local), backends.Engine{Data: b, Local: true} lets tq
// keep the metadata in process; over a real datasystem, which other
// processes reach, pair it with a MetaStore they all share,
// backends.Engine{Data: b, Meta: meta}, or their global indexes (and so
// storage keys) collide.
func NewBackend(ds DataSystem, opts ...Option) (*Backend, error) {
	o := defaultOptions()
	if err := o.apply(opts); err != nil {
		return nil, err
	}
	e, err := newEngine(ds, o)
	if err != nil {
		return nil, err
	}
	return &Backend{e: e}, nil
}

// stagedBuf is the handle Stage puts in Cell.Staged: the cell's buffer,
// created and not yet visible.
type stagedBuf struct {
	owner *engine
	buf   Buffer
	done  bool // published, released, or handed to a Write that did either
}

// Stage creates a datasystem buffer of sizes[i] bytes per cell, invisible
// until Write publishes it, and sets the cell's Body to the buffer's
// memory and its Staged to the handle. Keys must be valid and unique among
// the cells; on error nothing stays created. It implements
// backends.Stager.
func (b *Backend) Stage(ctx context.Context, cells []backends.Cell, sizes []int) error {
	if err := b.e.check(ctx); err != nil {
		return err
	}
	if len(cells) != len(sizes) {
		return invalidf("%d cells, %d sizes", len(cells), len(sizes))
	}
	keys := backends.CellKeys(cells)
	if err := checkWrite(keys, len(sizes)); err != nil {
		return err
	}
	for i, n := range sizes {
		if n < 0 {
			return &KeyError{Key: keys[i], Err: invalidf("negative size %d", n)}
		}
	}
	if len(cells) == 0 {
		return nil
	}
	st, err := b.e.create(ctx, keys, sizes)
	if err != nil {
		return err
	}
	handles := make([]stagedBuf, len(cells)) // one allocation for the batch
	for i := range cells {
		handles[i] = stagedBuf{owner: b.e, buf: st.bufs[i]}
		cells[i].Body, cells[i].Staged = st.data[i], &handles[i]
	}
	return nil
}

// Unstage releases the buffers of staged cells that no Write took; other
// cells are ignored. It implements backends.Stager.
func (b *Backend) Unstage(cells []backends.Cell) {
	for _, c := range cells {
		if h, ok := c.Staged.(*stagedBuf); ok && h.owner == b.e && !h.done {
			h.done = true
			h.buf.Release()
		}
	}
}

// Write stores each cell's value under its key, replacing an existing
// value, and sets each cell's Tag to TagKV. A staged cell's buffer is
// published as it is (its Head must be empty and its Body the length
// staged); any other cell's Head and
// Body are copied into a buffer Write creates (rounds of PutKeysLimit).
// Keys must be valid and unique among the cells; a cell staged by another
// Backend, or staged and already written or unstaged, gives ErrInvalid,
// all before the first datasystem call.
//
// The buffers are published round by round (see Client.Put): if a round
// fails, Write deletes every key of the call and releases the buffers not
// published, staged ones included, and returns the round's error; a Write
// whose context ends before its first round changes nothing. Once Write
// gets to publishing, every staged buffer it was given is its own
// (published or released) and a later Unstage ignores it; after an error
// before that (validation, creating the other cells' buffers) the staged
// cells are still the caller's to Unstage. It implements backends.Store.
func (b *Backend) Write(ctx context.Context, cells []backends.Cell) error {
	if err := b.e.check(ctx); err != nil {
		return err
	}
	keys := make([]string, len(cells))
	var fresh []int // the cells of caller memory
	for i, c := range cells {
		keys[i] = c.Key
		if c.Staged == nil {
			fresh = append(fresh, i)
			continue
		}
		h, ok := c.Staged.(*stagedBuf)
		switch {
		case !ok || h.owner != b.e:
			return &KeyError{Key: c.Key, Err: invalidf("cell staged by another store")}
		case h.done:
			return &KeyError{Key: c.Key, Err: invalidf("staged cell already written or unstaged")}
		case len(c.Head) > 0:
			return &KeyError{Key: c.Key, Err: invalidf("staged cell with a Head")}
		case len(c.Body) != len(h.buf.Data()):
			// The datasystem publishes the buffer whole.
			return &KeyError{Key: c.Key, Err: invalidf("staged Body of %d bytes cut to %d", len(h.buf.Data()), len(c.Body))}
		}
	}
	if err := checkWrite(keys, len(cells)); err != nil {
		return err
	}
	if len(cells) == 0 {
		return nil
	}
	bufs := make([]Buffer, len(cells))
	if len(fresh) > 0 {
		fk, sizes := make([]string, len(fresh)), make([]int, len(fresh))
		for j, i := range fresh {
			fk[j], sizes[j] = keys[i], len(cells[i].Head)+len(cells[i].Body)
		}
		st, err := b.e.create(ctx, fk, sizes)
		if err != nil {
			return err
		}
		for j, i := range fresh {
			copy(st.data[j][copy(st.data[j], cells[i].Head):], cells[i].Body)
			bufs[i] = st.bufs[j]
		}
	}
	for i, c := range cells {
		if h, ok := c.Staged.(*stagedBuf); ok {
			bufs[i], h.done = h.buf, true
		}
	}
	st := &stage{e: b.e, keys: keys, bufs: bufs}
	if err := st.publish(ctx); err != nil {
		return err
	}
	for i := range cells {
		cells[i].Tag = TagKV
	}
	return nil
}

// Read reads each cell's value in rounds of GetClearKeysLimit, after
// checking every tag ("" or TagKV; any other gives a *KeyError matching
// ErrUnknownStrategy before anything is read). A value of the destination's
// length is copied into Head and Body; any other is set in Value without a
// copy, aliasing the datasystem's memory (see DataSystem.MGet); a missing
// key leaves Found false. It implements backends.Store.
func (b *Backend) Read(ctx context.Context, cells []backends.ReadCell) error {
	if err := b.e.check(ctx); err != nil {
		return err
	}
	keys, tags := make([]string, len(cells)), make([]string, len(cells))
	for i, c := range cells {
		keys[i], tags[i] = c.Key, c.Tag
	}
	if err := checkRead(keys, tags); err != nil {
		return err
	}
	return b.e.read(ctx, keys, func(i int, v []byte) { backends.FillReadCell(&cells[i], v) })
}

// Delete removes the cells' keys in rounds of GetClearKeysLimit; missing
// keys are ignored. Every tag is checked first, as for Read. It implements
// backends.Store.
func (b *Backend) Delete(ctx context.Context, cells []backends.Cell) error {
	if err := b.e.check(ctx); err != nil {
		return err
	}
	keys, tags := make([]string, len(cells)), make([]string, len(cells))
	for i, c := range cells {
		keys[i], tags[i] = c.Key, c.Tag
	}
	if err := checkRead(keys, tags); err != nil {
		return err
	}
	return b.e.deleteKeys(ctx, keys)
}

// Close closes the DataSystem. Later calls, and a Write of cells staged
// before, return ErrClosed; Unstage still releases staged cells.
func (b *Backend) Close() error { return b.e.close() }
