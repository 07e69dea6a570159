package tq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/codec"
)

// cleanupTimeout bounds rollbacks and deletes of replaced cells, which run
// even when the caller's context is done: they must not be skipped.
const cleanupTimeout = 30 * time.Second

// Put writes one row: fields maps a field name to a codec.Tensor or a
// general value. A nil tag leaves the row's tag as it is.
func (c *Client) Put(ctx context.Context, partition, key string, fields map[string]any, tag Tag) error {
	b := make(Batch, len(fields))
	for f, v := range fields {
		switch t := v.(type) {
		case codec.Tensor:
			b[f] = Jagged([]codec.Tensor{t})
		case *codec.Tensor:
			if t == nil {
				b[f] = Values([]any{nil})
			} else {
				b[f] = Jagged([]codec.Tensor{*t})
			}
		default:
			b[f] = Values([]any{v})
		}
	}
	var tags []Tag
	if tag != nil {
		tags = []Tag{tag}
	}
	return c.BatchPut(ctx, partition, []string{key}, b, tags)
}

// BatchPut writes batch for keys: row i of every column belongs to keys[i].
// Keys new to the partition get fresh global indexes; existing rows gain or
// replace the batch's fields (columns added over time). tags is nil (leave
// tags alone) or one Tag per key (nil for a row whose tag stays as it is),
// merged into the row's tag: its keys overwrite, the row's other keys stay.
// A batch with no columns and tags updates tags only. Tag values are
// validated and normalised as Tag says; the client keeps its own deep copy.
//
// Everything is validated before anything is written (ErrInvalid). The call
// is all or nothing: on an error that does not match ErrOutcomeUnknown no
// field of it is readable and its bytes are deleted, and a replaced field
// keeps its old value; on one that does, the put is whole or absent and
// its bytes are kept (see ErrOutcomeUnknown).
func (c *Client) BatchPut(ctx context.Context, partition string, keys []string, batch Batch, tags []Tag) error {
	release, err := c.enter(ctx)
	if err != nil {
		return err
	}
	defer release()
	fields, tags, err := c.validatePut(partition, keys, batch, tags)
	if err != nil {
		return err
	}
	w := &write{c: c, partition: partition, keys: keys, fields: fields, tags: tags}
	if len(fields) == 0 {
		return w.tagsOnly(ctx)
	}
	return w.run(ctx, batch)
}

// validatePut checks a put and returns its fields, sorted, and its tags
// normalised (see Tag): copies the caller may go on changing.
func (c *Client) validatePut(partition string, keys []string, batch Batch, tags []Tag) ([]string, []Tag, error) {
	if err := checkPartition(partition); err != nil {
		return nil, nil, err
	}
	if len(keys) == 0 {
		return nil, nil, invalidf("no keys")
	}
	if err := checkKeys(keys); err != nil {
		return nil, nil, err
	}
	if tags != nil && len(tags) != len(keys) {
		return nil, nil, invalidf("%d tags for %d keys", len(tags), len(keys))
	}
	if len(batch) == 0 && tags == nil {
		return nil, nil, invalidf("nothing to write: no columns and no tags")
	}
	fields := batch.Fields()
	for _, f := range fields {
		if err := checkField(f); err != nil {
			return nil, nil, err
		}
		col := batch[f]
		if col.err != nil {
			var re *rowError
			if errors.As(col.err, &re) && re.row < len(keys) {
				return nil, nil, fmt.Errorf("%w: %w", ErrInvalid, &KeyError{Partition: partition, Key: keys[re.row], Field: f, Err: re.err})
			}
			return nil, nil, fmt.Errorf("%w: field %q: %w", ErrInvalid, f, col.err)
		}
		if col.kind == 0 {
			return nil, nil, invalidf("field %q: zero Column (use Stacked, Jagged or Values)", f)
		}
		if col.Len() != len(keys) {
			return nil, nil, invalidf("field %q has %d rows for %d keys", f, col.Len(), len(keys))
		}
	}
	normTags, err := normalizeTags(partition, keys, tags)
	if err != nil {
		return nil, nil, err
	}
	return fields, normTags, nil
}

// write is the state of one BatchPut.
type write struct {
	c         *Client
	partition string
	keys      []string
	fields    []string // sorted
	tags      []Tag    // normalised copies (see normalizeTags), nil to leave tags alone

	res      []backends.Reservation
	skeys    []string             // storage keys, field-major
	infos    []backends.FieldInfo // per cell, field-major
	staged   []backends.Staged    // zero-copy chunks, when the backend allocates
	wrote    bool                 // data may have reached the backend
	backTags []string             // per cell, from a tagging backend
}

func (w *write) tagsOnly(ctx context.Context) error {
	res, err := w.c.meta.Prepare(ctx, w.partition, w.keys, nil)
	if err != nil {
		return err
	}
	updates := make([]backends.RowUpdate, len(w.keys))
	for i, k := range w.keys {
		updates[i] = backends.RowUpdate{Key: k, Index: res[i].Index, Tag: w.tags[i]}
	}
	_, err = w.c.meta.Commit(ctx, w.partition, updates)
	return err
}

func (w *write) run(ctx context.Context, batch Batch) error {
	nSplit := w.orderFields(batch) * len(w.keys)
	n, nf := len(w.keys), len(w.fields)
	values := make([]any, 0, n*nf)
	w.infos = make([]backends.FieldInfo, 0, n*nf)
	for _, f := range w.fields {
		col := batch[f]
		var shape []int64 // the metadata's own copy: the caller may reuse theirs
		start := len(values)
		values = col.appendCells(values)
		for _, v := range values[start:] {
			info := cellInfo(v)
			if info.Shape != nil {
				if !slices.Equal(info.Shape, shape) {
					shape = slices.Clone(info.Shape)
				}
				info.Shape = shape
			}
			w.infos = append(w.infos, info)
		}
	}
	// Cells [0, nSplit) go to the engine as prefix and data, the rest are
	// packed. Everything is validated before reserve changes any state.
	var heads, bodies [][]byte
	if nSplit > 0 {
		var err error
		if heads, bodies, err = splitCells(values[:nSplit]); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, w.nameCell(err))
		}
	}
	var bufs [][]byte
	if nSplit < len(values) {
		var err error
		bufs, err = w.c.packer.BatchEncodeInto(values[nSplit:], w.alloc(ctx, nSplit))
		if err != nil {
			w.discard()
			if errors.Is(err, codec.ErrAlloc) {
				return unwrapAlloc(err)
			}
			if errors.Is(err, codec.ErrClosed) {
				return ErrClosed // Close ran after this call's check
			}
			var oe *codec.ObjectError
			if errors.As(err, &oe) {
				oe.Index += nSplit // the cell's place among all of them
			}
			return fmt.Errorf("%w: %w", ErrInvalid, w.nameCell(err))
		}
	} else if err := w.reserve(ctx); err != nil {
		return err
	}
	if cw := w.c.commitWriter; cw != nil && len(bufs) == 0 && len(heads) <= w.c.opts.keysLimit {
		// Cells and commit in one request: a failure is a failed
		// commit's, whatever part of it failed.
		w.wrote = true
		res, err := cw.PutSplitCommit(ctx, w.c.meta, w.skeys, heads, bodies, w.partition, w.updates())
		if err != nil {
			return w.commitFailed(err)
		}
		w.committed(res)
		return nil
	}
	if err := w.writeData(ctx, heads, bodies, bufs); err != nil {
		w.rollback(err)
		return err
	}
	if err := w.commit(ctx); err != nil {
		return w.commitFailed(err)
	}
	return nil
}

// orderFields puts the fields whose every cell is a tensor first, when the
// engine stores values in two parts (backends.SplitWriter), and returns
// how many there are: their cells go as the codec's prefix and the
// caller's rows, with no packing copy (see splitCells).
func (w *write) orderFields(batch Batch) int {
	if w.c.splitWriter == nil {
		return 0
	}
	tensors := func(f string) bool { k := batch[f].kind; return k == KindStacked || k == KindJagged }
	fields := make([]string, 0, len(w.fields))
	for _, f := range w.fields {
		if tensors(f) {
			fields = append(fields, f)
		}
	}
	nSplit := len(fields)
	for _, f := range w.fields {
		if !tensors(f) {
			fields = append(fields, f)
		}
	}
	w.fields = fields
	return nSplit
}

// commitFailed decides what a failed Commit means. A reservation the
// store lost (backends.ErrReservationLost) is not rolled back by storage
// key: those keys may name another row's cells now. The store settles a
// lost reply itself (see backends.MetaStore.Commit): an error that does
// not match ErrOutcomeUnknown applied nothing, so this write's cells are
// deleted. One that does may have applied: the cells stay (unreferenced
// garbage at worst, for Reclaim; never a listed row whose data is gone)
// and the caller learns that the outcome is unknown.
func (w *write) commitFailed(err error) error {
	if errors.Is(err, backends.ErrReservationLost) {
		// The store lost this put's reservation (a failover): its indexes
		// or generations may be another put's now, so its cells are not
		// deleted by storage key. They are left behind, unreferenced.
		w.discard()
		w.c.opts.logger.Warn("tq: commit refused, its reservation lost; leaving this put's cells", "partition", w.partition, "keys", len(w.keys), "err", err)
		return err
	}
	if !errors.Is(err, ErrOutcomeUnknown) {
		w.rollback(err)
		return err
	}
	w.c.opts.logger.Warn("tq: commit outcome unknown; keeping this put's cells", "partition", w.partition, "keys", len(w.keys), "err", err)
	return err
}

func maxLen(ss []string) int {
	m := 0
	for _, s := range ss {
		m = max(m, len(s))
	}
	return m
}

// cellInfo is the metadata of one cell's value.
func cellInfo(v any) backends.FieldInfo {
	switch t := v.(type) {
	case codec.Tensor:
		return backends.FieldInfo{DType: t.DType.String(), Shape: t.Shape}
	case *codec.Tensor:
		if t != nil {
			return backends.FieldInfo{DType: t.DType.String(), Shape: t.Shape}
		}
	}
	return backends.FieldInfo{}
}

// nameCell turns the codec's object index into the key and field.
func (w *write) nameCell(err error) error {
	var oe *codec.ObjectError
	if errors.As(err, &oe) {
		n := len(w.keys)
		return &KeyError{Partition: w.partition, Key: w.keys[oe.Index%n], Field: w.fields[oe.Index/n], Err: oe.Err}
	}
	return err
}

// unwrapAlloc returns the allocator's own error (a Prepare or backend
// failure) rather than the codec's ErrAlloc wrapper around it.
func unwrapAlloc(err error) error {
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		for _, e := range joined.Unwrap() {
			if e != codec.ErrAlloc {
				return e
			}
		}
	}
	return err
}

// alloc is the packer's allocator: by now every value is valid and sized,
// so this is the first moment that changes state. It reserves indexes and
// generations, names the storage keys, and takes buffers from the backend
// when it allocates (zero-copy) or from the heap.
func (w *write) alloc(ctx context.Context, off int) codec.Allocator {
	return func(sizes []int) ([][]byte, error) {
		if err := w.reserve(ctx); err != nil {
			return nil, err
		}
		if w.c.allocator == nil {
			return codec.HeapAllocator(sizes)
		}
		skeys := w.skeys[off:] // the packed cells'
		limit := w.c.opts.keysLimit
		if len(sizes) <= limit {
			st, err := w.c.allocator.Allocate(ctx, skeys, sizes)
			if err != nil {
				return nil, err
			}
			w.staged = append(w.staged, st)
			return st.Buffers(), nil // exactly sizes long: the packer only fills them
		}
		bufs := make([][]byte, 0, len(sizes))
		for lo := 0; lo < len(sizes); lo += limit {
			hi := min(lo+limit, len(sizes))
			st, err := w.c.allocator.Allocate(ctx, skeys[lo:hi], sizes[lo:hi])
			if err != nil {
				return nil, err
			}
			w.staged = append(w.staged, st)
			bufs = append(bufs, st.Buffers()...)
		}
		return bufs, nil
	}
}

// reserve prepares the rows (indexes and generations) and names the
// storage keys of every cell. It is the first step that changes state.
func (w *write) reserve(ctx context.Context) error {
	res, err := w.c.meta.Prepare(ctx, w.partition, w.keys, w.fields)
	if err != nil {
		return err
	}
	w.res = res
	n := len(w.keys)
	arena := newKeyArena(len(w.infos), maxLen(w.fields))
	for fi, f := range w.fields {
		var (
			gens map[string]uint64
			gen  uint64
		)
		for i := range n {
			if i == 0 || !backends.SameMap(res[i].Gens, gens) {
				gens = res[i].Gens // often one map for many rows
				gen = gens[f]
			}
			arena.add(res[i].Index, f, gen)
			w.infos[fi*n+i].Gen = gen
		}
	}
	w.skeys = arena.keys()
	return nil
}

// splitCells returns each cell's codec prefix and data, so that an engine
// that stores values in two parts (backends.SplitWriter) gets the caller's
// tensor rows as they are: no packing copy. Every value is a tensor (the
// cells of stacked and jagged columns); cells of one dtype and shape share
// a prefix. An invalid tensor (a bool tensor with a byte other than 0 or
// 1 included) is a *codec.ObjectError, as the packer reports it.
func splitCells(values []any) (heads, bodies [][]byte, _ error) {
	heads, bodies = make([][]byte, len(values)), make([][]byte, len(values))
	var (
		prefix []byte
		dt     codec.DType
		shape  []int64
		size   int
	)
	for i, v := range values {
		var t codec.Tensor
		switch x := v.(type) {
		case codec.Tensor:
			t = x
		case *codec.Tensor:
			if x == nil {
				return nil, nil, &codec.ObjectError{Index: i, Err: fmt.Errorf("%w: nil *Tensor in a tensor column", codec.ErrUnsupportedType)}
			}
			t = *x
		default:
			return nil, nil, &codec.ObjectError{Index: i, Err: fmt.Errorf("%w: %T in a tensor column", codec.ErrUnsupportedType, v)}
		}
		if prefix == nil || t.DType != dt || !slices.Equal(t.Shape, shape) {
			p, n, err := codec.TensorPrefix(t.DType, t.Shape)
			if err != nil {
				return nil, nil, &codec.ObjectError{Index: i, Err: err}
			}
			prefix, dt, shape, size = p, t.DType, t.Shape, n
		}
		if len(t.Data) != size {
			err := t.Validate()
			if err == nil {
				err = codec.ErrShapeMismatch
			}
			return nil, nil, &codec.ObjectError{Index: i, Err: err}
		}
		if err := t.ValidateBools(); err != nil {
			return nil, nil, &codec.ObjectError{Index: i, Err: err} // as the packer rejects it
		}
		heads[i], bodies[i] = prefix, t.Data
	}
	return heads, bodies, nil
}

// writeData writes the cells: those given as prefix and data (heads,
// bodies: the first len(heads) cells) with PutSplit, then the packed ones
// (bufs: the rest) by publishing the staged chunks or putting the buffers;
// in chunks of KeysLimit, IODepth chunks in flight.
func (w *write) writeData(ctx context.Context, heads, bodies, bufs [][]byte) error {
	w.wrote = true
	limit, depth := w.c.opts.keysLimit, w.c.opts.ioDepth
	if len(heads) > 0 {
		err := forChunks(ctx, len(heads), limit, depth, func(ctx context.Context, lo, hi int) error {
			return w.c.splitWriter.PutSplit(ctx, w.skeys[lo:hi], heads[lo:hi], bodies[lo:hi])
		})
		if err != nil {
			return err
		}
	}
	off := len(heads)
	if w.staged != nil {
		return forChunks(ctx, len(bufs), limit, depth, func(ctx context.Context, lo, hi int) error {
			st := w.staged[lo/limit]
			if err := st.Publish(ctx); err != nil {
				return err // rollback Discards it: a failed Publish still holds its buffers
			}
			w.staged[lo/limit] = nil // published: nothing left to Discard (chunks touch disjoint slots)
			if tr, ok := st.(backends.TagReporter); ok {
				w.setTags(off+lo, tr.Tags())
			}
			return nil
		})
	}
	return forChunks(ctx, len(bufs), limit, depth, func(ctx context.Context, lo, hi int) error {
		if w.c.taggedWriter != nil {
			tags, err := w.c.taggedWriter.PutTagged(ctx, w.skeys[off+lo:off+hi], bufs[lo:hi])
			if err != nil {
				return err
			}
			w.setTags(off+lo, tags)
			return nil
		}
		return w.c.data.Put(ctx, w.skeys[off+lo:off+hi], bufs[lo:hi])
	})
}

// setTags records backend tags of cells lo.. (chunks write disjoint ranges).
func (w *write) setTags(lo int, tags []string) {
	for j, t := range tags {
		if lo+j < len(w.infos) {
			w.infos[lo+j].BackendTag = t
		}
	}
}

func (w *write) commit(ctx context.Context) error {
	res, err := w.c.meta.Commit(ctx, w.partition, w.updates())
	if err != nil {
		return err
	}
	w.committed(res)
	return nil
}

// committed deletes the cells a commit left unreferenced: old generations
// this write replaced, and this write's own cells where a newer write won.
func (w *write) committed(res backends.CommitResult) {
	if dead := append(res.Superseded, res.Stale...); len(dead) > 0 {
		w.c.cleanup(w.partition, dead, "replaced cells")
	}
}

// updates are the rows this write commits.
func (w *write) updates() []backends.RowUpdate {
	n := len(w.keys)
	updates := make([]backends.RowUpdate, n)
	for i, k := range w.keys {
		u := backends.RowUpdate{Key: k, Index: w.res[i].Index}
		if i > 0 && w.sameCells(i-1, i) {
			// Rows of a batch mostly have equal cells (dtype, shape,
			// generation, backend tag): they share one map, which the
			// store keeps read-only (see backends.RowUpdate).
			u.Fields = updates[i-1].Fields
		} else {
			u.Fields = make(map[string]backends.FieldInfo, len(w.fields))
			for fi, f := range w.fields {
				u.Fields[f] = w.infos[fi*n+i]
			}
		}
		if w.tags != nil {
			u.Tag = w.tags[i]
		}
		updates[i] = u
	}
	return updates
}

// sameCells reports whether rows i and j have equal cells in every field.
func (w *write) sameCells(i, j int) bool {
	n := len(w.keys)
	for fi := range w.fields {
		a, b := &w.infos[fi*n+i], &w.infos[fi*n+j]
		if a.Gen != b.Gen || a.DType != b.DType || a.BackendTag != b.BackendTag ||
			(a.Shape == nil) != (b.Shape == nil) || !slices.Equal(a.Shape, b.Shape) {
			return false
		}
	}
	return true
}

// discard releases staged buffers that were never published.
func (w *write) discard() {
	for _, st := range w.staged {
		if st != nil {
			_ = st.Discard(context.Background())
		}
	}
}

// rollback deletes every cell this write may have stored. The storage keys
// carry generations reserved for this write alone, so nothing else is
// lost: where the store is a backends.Reclaimer, it first abandons the
// reservations, which confirms they are still this write's. If the store
// does not know them (backends.ErrReservationLost: lost in a failover,
// their keys perhaps another row's now), nothing is deleted: the cells
// stay behind, unreferenced.
func (w *write) rollback(cause error) {
	w.c.opts.logger.Debug("tq: rolling back put", "partition", w.partition, "keys", len(w.keys), "cause", cause)
	w.discard()
	refs := make([]backends.Ref, 0, len(w.skeys))
	n := len(w.keys)
	for fi, f := range w.fields {
		for i := range n {
			info := w.infos[fi*n+i]
			refs = append(refs, backends.Ref{Index: w.res[i].Index, Field: f, Gen: info.Gen, Tag: info.BackendTag})
		}
	}
	if rc, ok := w.c.meta.(backends.Reclaimer); ok {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		err := rc.Abandon(ctx, w.partition, refs)
		cancel()
		switch {
		case errors.Is(err, backends.ErrReservationLost):
			w.c.opts.logger.Warn("tq: rollback found this put's reservations lost; leaving its cells", "partition", w.partition, "cells", len(refs), "err", err)
			return
		case err != nil:
			// The store did not say they are lost: delete as ever (the
			// cells stay reserved for Reclaim if the deletes fail too).
			w.c.opts.logger.Warn("tq: rollback could not abandon this put's reservations", "partition", w.partition, "cells", len(refs), "err", err)
		}
	}
	w.c.cleanup(w.partition, refs, "rollback")
}

// cleanup deletes cells nothing references (a rollback's, replaced ones)
// of partition, even when the caller's context is done, and reports those
// deleted to a store that tracks garbage (see Client.Reclaim). A failure
// is logged, not returned: the metadata no longer points at these cells,
// so a leftover is garbage, never a visible partial row, and Reclaim finds
// it where the store tracks garbage.
func (c *Client) cleanup(partition string, refs []backends.Ref, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	deleted, err := c.deleteRefs(ctx, refs)
	if err != nil {
		c.opts.logger.Warn("tq: deleting cells failed; they are unreferenced garbage", "why", why, "cells", len(refs)-len(deleted), "err", err)
	}
	c.swept(ctx, partition, deleted, why)
}

// deleteRefs deletes cells in chunks of KeysLimit, IODepth in flight, and
// returns the cells deleted and the first error: the chunks that failed,
// or never started after one did, keep their cells. With no error it
// returns refs itself.
func (c *Client) deleteRefs(ctx context.Context, refs []backends.Ref) ([]backends.Ref, error) {
	fieldLen := 0
	for _, r := range refs {
		fieldLen = max(fieldLen, len(r.Field))
	}
	arena := newKeyArena(len(refs), fieldLen)
	tags := make([]string, len(refs))
	for i, r := range refs {
		arena.add(r.Index, r.Field, r.Gen)
		tags[i] = r.Tag
	}
	keys := arena.keys()
	limit := c.opts.keysLimit
	done := make([]bool, (len(keys)+limit-1)/limit) // per chunk; each sets its own
	err := forChunks(ctx, len(keys), limit, c.opts.ioDepth, func(ctx context.Context, lo, hi int) error {
		var err error
		if c.taggedDeleter != nil {
			err = c.taggedDeleter.DeleteTagged(ctx, keys[lo:hi], tags[lo:hi])
		} else {
			err = c.data.Delete(ctx, keys[lo:hi])
		}
		done[lo/limit] = err == nil
		return err
	})
	if err == nil {
		return refs, nil
	}
	var deleted []backends.Ref
	for i, ok := range done {
		if ok {
			deleted = append(deleted, refs[i*limit:min((i+1)*limit, len(refs))]...)
		}
	}
	return deleted, err
}
