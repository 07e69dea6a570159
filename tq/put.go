package tq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/codec"
)

// cleanupTimeout bounds rollbacks and deletes of replaced cells, which run
// even when the caller's context is done: they must not be skipped.
const cleanupTimeout = 30 * time.Second

// Put writes one row: fields maps a field name to its value, as
// columnOfRow takes it: a codec.Tensor, a plain Go slice of a tensor
// element type (a 1-d tensor), [][]T of equal lengths (a 2-d tensor), or a
// general value. A nil tag leaves the row's tag as it is.
func (c *Client) Put(ctx context.Context, partition, key string, fields map[string]any, tag Tag) error {
	b := make(Batch, len(fields))
	for f, v := range fields {
		b[f] = columnOfRow(v)
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
// BatchPut is the update of existing rows (TransferQueue's kv_put of
// existing keys, and its update): a field it names is replaced whole,
// every field it does not name stays as it was, and the tag merges as
// above; nothing of a row is removed (ClearFields removes fields, Clear
// rows). It is an upsert: a key without a row gets one. A row's index
// and its consumption by every task stay; a task waiting for a field
// finds the row ready once a put gives it every field the task needs.
//
// Everything is validated before anything is written (ErrInvalid). The call
// is all or nothing: on an error that does not match ErrOutcomeUnknown no
// field of it is readable and its bytes are deleted, and a replaced field
// keeps its old value; on one that does, the put is whole or absent and
// its bytes are kept (see ErrOutcomeUnknown).
func (c *Client) BatchPut(ctx context.Context, partition string, keys []string, batch Batch, tags []Tag) (err error) {
	ctx, tr := c.trace(ctx, "BatchPut", partition, len(keys))
	defer func() { tr.done(err) }()
	release, err := c.enter(ctx, "BatchPut", partition)
	if err != nil {
		return err
	}
	defer release()
	fields, tags, err := c.validatePut(partition, keys, batch, tags)
	if err != nil {
		return err
	}
	if _, err := c.fullPolicy(ctx); err != nil {
		return err
	}
	w := &write{c: c, partition: partition, keys: keys, fields: fields, tags: tags}
	if len(fields) == 0 {
		err = w.tagsOnly(ctx)
	} else {
		err = w.run(ctx, batch)
	}
	if err == nil && tr != nil {
		tr.add(len(keys), len(w.cells), w.bytes()) // bytes: a pass over the cells, only when traced
	}
	return err
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
	if err := checkKeys(partition, keys); err != nil {
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
			return nil, nil, invalidf("partition %q: field %q has %d rows for %d keys (one row per key)", partition, f, col.Len(), len(keys))
		}
	}
	normTags, err := normalizeTags(partition, keys, tags)
	if err != nil {
		return nil, nil, err
	}
	return fields, normTags, nil
}

// write is the state of one BatchPut: its cells, field-major (row i of
// field f is cell f*len(keys)+i), the first nTensor of them tensors that
// travel as the codec's prefix and the caller's row, the rest values the
// codec packs.
type write struct {
	c         *Client
	partition string
	keys      []string
	fields    []string // tensor fields first, each group sorted
	tags      []Tag    // normalised copies (see normalizeTags), nil to leave tags alone

	nTensor int
	values  []any // every cell's value
	cells   []backends.Cell
	infos   []metadata.FieldInfo // per cell
	res     []metadata.Reservation
	staged  bool // cells from nTensor on are the engine's (backends.Stager)
	wrote   bool // data may have reached the engine
}

func (w *write) tagsOnly(ctx context.Context) error {
	res, err := w.c.prepare(ctx, w.partition, w.keys, nil, nil)
	if err != nil {
		return err
	}
	updates := make([]metadata.RowUpdate, len(w.keys))
	for i, k := range w.keys {
		updates[i] = metadata.RowUpdate{Key: k, Index: res[i].Index, Tag: w.tags[i]}
	}
	_, err = w.c.meta.Commit(ctx, w.partition, updates)
	return err
}

// run writes the batch: plan the cells and validate them, Prepare, encode
// the packed cells into their buffers, write every cell, commit.
func (w *write) run(ctx context.Context, batch Batch) error {
	if err := w.plan(batch); err != nil {
		return err
	}
	var enc *codec.Encoding
	if w.nTensor < len(w.values) {
		var err error
		if enc, err = w.c.packer.Plan(w.values[w.nTensor:]); err != nil {
			if errors.Is(err, codec.ErrClosed) {
				return ErrClosed // Close ran after this call's check
			}
			var oe *codec.ObjectError
			if errors.As(err, &oe) {
				oe.Index += w.nTensor // the cell's place among all of them
			}
			return fmt.Errorf("%w: %w", ErrInvalid, w.nameCell(err))
		}
		defer enc.Release()
	}
	// Everything is valid: from here on state changes.
	var sorted []string
	if w.c.opts.blocks && w.c.colocated == nil && w.c.stager == nil {
		sorted = slices.Sorted(slices.Values(w.fields))
		if b, base := w.c.takeBlock(ctx, w.partition, sorted, len(w.keys)); b != nil {
			return w.runBlock(ctx, enc, b, base)
		}
	}
	if err := w.reserve(ctx, w.sizes(enc)); err != nil {
		return err
	}
	if enc != nil {
		if err := w.encode(ctx, enc); err != nil {
			w.rollback(err)
			return err
		}
	}
	if err := w.store(ctx); err != nil {
		return err
	}
	if sorted != nil && w.allNew() {
		w.c.wantBlocks(w.partition, sorted, len(w.keys))
	}
	return nil
}

// bytes is the size of the cells' values.
func (w *write) bytes() int64 {
	var n int64
	for i := range w.cells {
		n += int64(len(w.cells[i].Head) + len(w.cells[i].Body))
	}
	return n
}

// plan lists the cells, puts the fields whose every cell is a tensor
// first, and checks every tensor cell (splitCells).
func (w *write) plan(batch Batch) error {
	tensors := func(f string) bool { k := batch[f].kind; return k == KindStacked || k == KindJagged }
	fields := make([]string, 0, len(w.fields))
	for _, f := range w.fields {
		if tensors(f) {
			fields = append(fields, f)
		}
	}
	nTensorFields := len(fields)
	for _, f := range w.fields {
		if !tensors(f) {
			fields = append(fields, f)
		}
	}
	w.fields = fields
	n, nf := len(w.keys), len(w.fields)
	w.nTensor = nTensorFields * n
	w.values = make([]any, 0, n*nf)
	w.infos = make([]metadata.FieldInfo, 0, n*nf)
	for _, f := range w.fields {
		var shape []int64 // the metadata's own copy: the caller may reuse theirs
		start := len(w.values)
		w.values = batch[f].appendCells(w.values)
		for _, v := range w.values[start:] {
			info := cellInfo(v)
			if info.Shape != nil {
				// A 0-d tensor's shape is empty, not nil (nil is a
				// general value's): the copy must keep that apart.
				if shape == nil || !slices.Equal(info.Shape, shape) {
					shape = slices.Clone(info.Shape)
				}
				info.Shape = shape
			}
			w.infos = append(w.infos, info)
		}
	}
	w.cells = make([]backends.Cell, len(w.values))
	if err := splitCells(w.values[:w.nTensor], w.cells); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, w.nameCell(err))
	}
	return nil
}

// encode packs the value cells into the engine's memory when it stages
// (zero-copy), else into one heap buffer.
func (w *write) encode(ctx context.Context, enc *codec.Encoding) error {
	cells, sizes := w.cells[w.nTensor:], enc.Sizes()
	if w.c.stager != nil {
		if err := w.c.stager.Stage(ctx, cells, sizes); err != nil {
			return err
		}
		w.staged = true
	} else {
		bufs, _ := codec.HeapAllocator(sizes)
		for i := range cells {
			cells[i].Body = bufs[i]
		}
	}
	bufs := make([][]byte, len(cells))
	for i := range cells {
		bufs[i] = cells[i].Body
	}
	if err := enc.Encode(bufs); err != nil {
		return err // the engine staged too little: its bug, reported as the codec found it
	}
	for i := range cells {
		cells[i].Body = bufs[i]
	}
	return nil
}

// store writes every cell and commits the rows: the cells in chunks of
// KeysLimit, IODepth in flight, then the commit; on a Colocated store the
// last chunk goes with the commit, in one request.
func (w *write) store(ctx context.Context) error {
	cells, last := w.cells, []backends.Cell(nil)
	if w.c.colocated != nil {
		cut := max(0, len(cells)-w.c.opts.keysLimit)
		cells, last = cells[:cut], cells[cut:]
	}
	w.wrote = true
	if err := w.c.writeCells(ctx, cells); err != nil {
		w.rollback(err)
		return err
	}
	for i := range cells {
		w.infos[i].BackendTag = cells[i].Tag
	}
	var (
		res metadata.CommitResult
		err error
	)
	if w.c.colocated != nil {
		res, err = w.c.colocated.WriteCommit(ctx, w.partition, last, w.updates())
	} else {
		res, err = w.c.meta.Commit(ctx, w.partition, w.updates())
	}
	if err != nil {
		return w.commitFailed(err)
	}
	w.committed(res)
	return nil
}

// writeCells writes cells in chunks of KeysLimit, IODepth in flight.
func (c *Client) writeCells(ctx context.Context, cells []backends.Cell) error {
	return forChunks(ctx, len(cells), c.opts.keysLimit, c.opts.ioDepth, func(ctx context.Context, lo, hi int) error {
		return c.data.Write(ctx, cells[lo:hi])
	})
}

// commitFailed decides what a failed Commit means. A reservation the
// store lost (backends.ErrReservationLost) is not rolled back by storage
// key: those keys may name another row's cells now. The store settles a
// lost reply itself (see metadata.MetaStore.Commit): an error that does
// not match ErrOutcomeUnknown applied nothing, so this write's cells are
// deleted. One that does may have applied: the cells stay (unreferenced
// garbage at worst, for Reclaim; never a listed row whose data is gone)
// and the caller learns that the outcome is unknown.
func (w *write) commitFailed(err error) error {
	if errors.Is(err, backends.ErrReservationLost) {
		// The store lost this put's reservation (a failover): its indexes
		// or generations may be another put's now, so its cells are not
		// deleted by storage key. They are left behind, unreferenced.
		w.unstage()
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
func cellInfo(v any) metadata.FieldInfo {
	switch t := v.(type) {
	case codec.Tensor:
		return metadata.FieldInfo{DType: t.DType.String(), Shape: t.Shape}
	case *codec.Tensor:
		if t != nil {
			return metadata.FieldInfo{DType: t.DType.String(), Shape: t.Shape}
		}
	}
	return metadata.FieldInfo{}
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

// sizes are the cells' sizes, for the partition's capacity (enc: the
// value cells' encoding, nil for none).
func (w *write) sizes(enc *codec.Encoding) []int64 {
	sizes := make([]int64, len(w.cells))
	for i := range w.nTensor {
		sizes[i] = int64(len(w.cells[i].Head) + len(w.cells[i].Body))
	}
	if enc != nil {
		for i, n := range enc.Sizes() {
			sizes[w.nTensor+i] = int64(n)
		}
	}
	return sizes
}

// reserve prepares the rows (indexes and generations), with the cells'
// sizes for the partition's capacity, and names the storage keys of
// every cell. It is the first step that changes state.
func (w *write) reserve(ctx context.Context, sizes []int64) error {
	res, err := w.c.prepare(ctx, w.partition, w.keys, w.fields, sizes)
	if err != nil {
		return err
	}
	w.res = res
	w.nameCells()
	return nil
}

// nameCells names the storage key of every cell, and sets each cell's
// generation, from the reservations.
func (w *write) nameCells() {
	n := len(w.keys)
	arena := newKeyArena(len(w.infos), maxLen(w.fields))
	for fi, f := range w.fields {
		var (
			gens map[string]uint64
			gen  uint64
		)
		for i := range n {
			if i == 0 || !metadata.SameMap(w.res[i].Gens, gens) {
				gens = w.res[i].Gens // often one map for many rows
				gen = gens[f]
			}
			arena.add(w.res[i].Index, f, gen)
			w.infos[fi*n+i].Gen = gen
		}
	}
	for i, k := range arena.keys() {
		w.cells[i].Key = k
	}
}

// allNew reports whether the put gave every key its row.
func (w *write) allNew() bool {
	for _, r := range w.res {
		if !r.New {
			return false
		}
	}
	return true
}

// splitCells sets each tensor cell's Head to the codec's prefix for its
// dtype and shape and its Body to the caller's data, so the engine gets
// the caller's tensor rows as they are: no packing copy. Every value is a
// tensor (the cells of stacked and jagged columns); cells of one dtype and
// shape share a prefix. An invalid tensor (a bool tensor with a byte other
// than 0 or 1 included) is a *codec.ObjectError, as the packer reports it.
func splitCells(values []any, cells []backends.Cell) error {
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
				return &codec.ObjectError{Index: i, Err: fmt.Errorf("%w: nil *Tensor in a tensor column", codec.ErrUnsupportedType)}
			}
			t = *x
		default:
			return &codec.ObjectError{Index: i, Err: fmt.Errorf("%w: %T in a tensor column", codec.ErrUnsupportedType, v)}
		}
		if prefix == nil || t.DType != dt || !slices.Equal(t.Shape, shape) {
			p, n, err := codec.TensorPrefix(t.DType, t.Shape)
			if err != nil {
				return &codec.ObjectError{Index: i, Err: err}
			}
			prefix, dt, shape, size = p, t.DType, t.Shape, n
		}
		if len(t.Data) != size {
			err := t.Validate()
			if err == nil {
				err = codec.ErrShapeMismatch
			}
			return &codec.ObjectError{Index: i, Err: err}
		}
		if err := t.ValidateBools(); err != nil {
			return &codec.ObjectError{Index: i, Err: err} // as the packer rejects it
		}
		cells[i].Head, cells[i].Body = prefix, t.Data
	}
	return nil
}

// committed deletes the cells a commit left unreferenced: old generations
// this write replaced, and this write's own cells where a newer write won.
func (w *write) committed(res metadata.CommitResult) {
	if dead := append(res.Superseded, res.Stale...); len(dead) > 0 {
		w.c.cleanup(w.partition, dead, "replaced cells")
	}
}

// updates are the rows this write commits.
func (w *write) updates() []metadata.RowUpdate {
	n := len(w.keys)
	updates := make([]metadata.RowUpdate, n)
	for i, k := range w.keys {
		u := metadata.RowUpdate{Key: k, Index: w.res[i].Index}
		if i > 0 && w.sameCells(i-1, i) {
			// Rows of a batch mostly have equal cells (dtype, shape,
			// generation, backend tag): they share one map, which the
			// store keeps read-only (see metadata.RowUpdate).
			u.Fields = updates[i-1].Fields
		} else {
			u.Fields = make(map[string]metadata.FieldInfo, len(w.fields))
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

// unstage releases the staged cells no Write published.
func (w *write) unstage() {
	if w.staged {
		w.c.stager.Unstage(w.cells[w.nTensor:])
	}
}

// rollback undoes a put that failed before its commit applied. The storage
// keys carry generations reserved for this write alone, so nothing else is
// lost: the store first abandons the reservations, which confirms they are
// still this write's, and then the cells are deleted. If the store does
// not know them (backends.ErrReservationLost: lost in a failover, their
// keys perhaps another row's now), nothing is deleted: the cells stay
// behind, unreferenced. A put that wrote nothing only reports its
// reservations swept, which aborts them.
func (w *write) rollback(cause error) {
	w.c.opts.logger.Debug("tq: rolling back put", "partition", w.partition, "keys", len(w.keys), "cause", cause)
	w.unstage()
	refs := make([]metadata.Ref, 0, len(w.cells))
	n := len(w.keys)
	for fi, f := range w.fields {
		for i := range n {
			info := w.infos[fi*n+i]
			refs = append(refs, metadata.Ref{Index: w.res[i].Index, Field: f, Gen: info.Gen, Tag: info.BackendTag})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if !w.wrote {
		_ = w.c.swept(ctx, w.partition, refs, "unwritten put")
		return
	}
	err := w.c.meta.Abandon(ctx, w.partition, refs)
	switch {
	case errors.Is(err, backends.ErrReservationLost):
		w.c.opts.logger.Warn("tq: rollback found this put's reservations lost; leaving its cells", "partition", w.partition, "cells", len(refs), "err", err)
		return
	case err != nil:
		// The store did not say they are lost: delete as ever (the
		// cells stay reserved for Reclaim if the deletes fail too).
		w.c.opts.logger.Warn("tq: rollback could not abandon this put's reservations", "partition", w.partition, "cells", len(refs), "err", err)
	}
	w.c.cleanup(w.partition, refs, "rollback")
}

// cleanup deletes cells nothing references (a rollback's, replaced ones)
// of partition, even when the caller's context is done, and reports those
// deleted to a store that tracks garbage (see Client.Reclaim). A failure
// is logged, not returned: the metadata no longer points at these cells,
// so a leftover is garbage, never a visible partial row, and Reclaim finds
// it where the store tracks garbage.
func (c *Client) cleanup(partition string, refs []metadata.Ref, why string) {
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
func (c *Client) deleteRefs(ctx context.Context, refs []metadata.Ref) ([]metadata.Ref, error) {
	fieldLen := 0
	for _, r := range refs {
		fieldLen = max(fieldLen, len(r.Field))
	}
	arena := newKeyArena(len(refs), fieldLen)
	for _, r := range refs {
		arena.add(r.Index, r.Field, r.Gen)
	}
	cells := make([]backends.Cell, len(refs))
	for i, k := range arena.keys() {
		cells[i] = backends.Cell{Key: k, Tag: refs[i].Tag}
	}
	limit := c.opts.keysLimit
	done := make([]bool, (len(cells)+limit-1)/limit) // per chunk; each sets its own
	err := forChunks(ctx, len(cells), limit, c.opts.ioDepth, func(ctx context.Context, lo, hi int) error {
		err := c.data.Delete(ctx, cells[lo:hi])
		done[lo/limit] = err == nil
		return err
	})
	if err == nil {
		return refs, nil
	}
	var deleted []metadata.Ref
	for i, ok := range done {
		if ok {
			deleted = append(deleted, refs[i*limit:min((i+1)*limit, len(refs))]...)
		}
	}
	return deleted, err
}
