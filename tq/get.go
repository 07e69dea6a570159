package tq

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/codec"
)

// errVanished: a cell the metadata named was not in the backend (replaced
// or cleared meanwhile, or lost by the engine). It matches ErrNotFound.
var errVanished = fmt.Errorf("%w: cell missing from the backend", ErrNotFound)

// BatchGet reads fields (all fields the rows have, when none are named) of
// keys. An unknown key gives ErrNotFound; a field some key lacks gives
// ErrNotReady; both as *KeyError naming the key and field. Each column is
// stacked when every row has the same dtype and shape, jagged when the rows
// are tensors of different shapes, and a values column otherwise. Tensor
// bytes of jagged and values columns, and []byte values, alias the fetched
// buffers, which may be the engine's own memory: treat them as read-only
// (copy before modifying). Stacked columns are fresh copies.
func (c *Client) BatchGet(ctx context.Context, partition string, keys []string, fields ...string) (Batch, error) {
	release, err := c.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	return c.getFresh(ctx, partition, keys, fields, nil, nil)
}

// getFresh looks keys up and reads them. A cell missing from the backend is
// looked up again for as long as the metadata names another cell each time
// (a writer replaced it meanwhile, so every retry means a writer made
// progress); when it names the same cell, the engine lost it and the read
// fails. prev and prevErr are an earlier attempt's metadata and its
// errVanished, if any.
func (c *Client) getFresh(ctx context.Context, partition string, keys, fields []string, prev *BatchMeta, prevErr error) (Batch, error) {
	for {
		m, err := c.lookup(ctx, partition, keys, false)
		if err != nil {
			return nil, err
		}
		if prevErr != nil && sameCell(prev, m, prevErr) {
			return nil, prevErr
		}
		b, err := c.read(ctx, m, fields)
		if !errors.Is(err, errVanished) {
			return b, err
		}
		prev, prevErr = m, err
	}
}

// sameCell reports whether b names the cell whose absence err reports as a
// named it: same row index, same generation.
func sameCell(a, b *BatchMeta, err error) bool {
	var ke *KeyError
	if !errors.As(err, &ke) {
		return true
	}
	find := func(m *BatchMeta) (backends.FieldInfo, uint64, bool) {
		for _, r := range m.Rows {
			if r.Key == ke.Key && r.row != nil {
				fi, ok := r.row.Fields[ke.Field]
				return fi, r.Index, ok
			}
		}
		return backends.FieldInfo{}, 0, false
	}
	fa, ia, oka := find(a)
	fb, ib, okb := find(b)
	return oka && okb && ia == ib && fa.Gen == fb.Gen
}

// BatchGetByMeta reads fields of the rows of m (from List or Lookup)
// without looking their metadata up again; if a cell was replaced since m
// was taken, or m lacks a field that has been written since, it looks the
// rows up afresh.
func (c *Client) BatchGetByMeta(ctx context.Context, m *BatchMeta, fields ...string) (Batch, error) {
	release, err := c.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	if m == nil {
		return nil, invalidf("nil BatchMeta")
	}
	if err := checkPartition(m.Partition); err != nil {
		return nil, err
	}
	if err := checkKeys(m.Keys()); err != nil {
		return nil, err
	}
	if slices.ContainsFunc(m.Rows, func(r RowInfo) bool { return r.row == nil }) {
		return c.getFresh(ctx, m.Partition, m.Keys(), fields, nil, nil)
	}
	b, err := c.read(ctx, m, fields)
	switch {
	case errors.Is(err, errVanished):
		return c.getFresh(ctx, m.Partition, m.Keys(), fields, m, err)
	case errors.Is(err, ErrNotReady):
		// m may predate the field's write: ask the metadata once more.
		return c.getFresh(ctx, m.Partition, m.Keys(), fields, nil, nil)
	}
	return b, err
}

// read fetches and decodes the cells of m's rows.
func (c *Client) read(ctx context.Context, m *BatchMeta, fields []string) (Batch, error) {
	if err := c.check(ctx); err != nil {
		return nil, err
	}
	if len(fields) == 0 {
		fields = unionFields(m.Rows)
	} else {
		fields = slices.Clone(fields)
		slices.Sort(fields)
		for i, f := range fields {
			if err := checkField(f); err != nil {
				return nil, err
			}
			if i > 0 && fields[i-1] == f {
				return nil, invalidf("field %q asked for twice", f)
			}
		}
	}
	n := len(m.Rows)
	arena := newKeyArena(n*len(fields), maxLen(fields))
	tags := make([]string, 0, n*len(fields))
	for _, f := range fields {
		for _, r := range m.Rows {
			fi, ok := r.row.Fields[f]
			if !ok {
				return nil, &KeyError{Partition: m.Partition, Key: r.Key, Field: f, Err: ErrNotReady}
			}
			arena.add(r.Index, f, fi.Gen)
			tags = append(tags, fi.BackendTag)
		}
	}
	skeys := arena.keys()
	bufs := make([][]byte, len(skeys))
	err := forChunks(ctx, len(skeys), c.opts.keysLimit, c.opts.ioDepth, func(ctx context.Context, lo, hi int) error {
		var got [][]byte
		var err error
		if c.taggedReader != nil {
			got, err = c.taggedReader.GetTagged(ctx, skeys[lo:hi], tags[lo:hi])
		} else {
			got, err = c.data.Get(ctx, skeys[lo:hi])
		}
		if err != nil {
			return err
		}
		copy(bufs[lo:hi], got)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i, b := range bufs {
		if b == nil {
			r := m.Rows[i%n]
			return nil, &KeyError{Partition: m.Partition, Key: r.Key, Field: fields[i/n], Err: errVanished}
		}
	}
	values, err := codec.BatchDecodeFrom(bufs)
	if err != nil {
		var oe *codec.ObjectError
		if errors.As(err, &oe) {
			r := m.Rows[oe.Index%n]
			return nil, &KeyError{Partition: m.Partition, Key: r.Key, Field: fields[oe.Index/n], Err: err}
		}
		return nil, err
	}
	out := make(Batch, len(fields))
	for fi, f := range fields {
		out[f] = columnOf(values[fi*n : (fi+1)*n])
	}
	return out, nil
}

func unionFields(rows []RowInfo) []string {
	set := map[string]struct{}{}
	for _, r := range rows {
		for f := range r.row.Fields {
			set[f] = struct{}{}
		}
	}
	out := make([]string, 0, len(set))
	for f := range set {
		out = append(out, f)
	}
	slices.Sort(out)
	return out
}

// columnOf regroups decoded cells: stacked when every row is a tensor of
// one dtype and shape, jagged when all are tensors, values otherwise.
func columnOf(vals []any) Column {
	ts := make([]codec.Tensor, len(vals))
	same := true
	for i, v := range vals {
		t, ok := v.(codec.Tensor)
		if !ok {
			return Column{kind: KindValues, values: slices.Clone(vals)}
		}
		ts[i] = t
		same = same && codec.SameLayout(ts[0], t)
	}
	if same && len(ts) > 0 {
		if st, err := codec.Stack(ts); err == nil {
			return Column{kind: KindStacked, stacked: st}
		}
	}
	return Column{kind: KindJagged, tensors: ts}
}
