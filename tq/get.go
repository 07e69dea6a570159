package tq

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/codec"
)

// errVanished: a cell the metadata named was not in the backend (replaced
// or cleared meanwhile, or lost by the engine). It matches ErrNotFound.
var errVanished = fmt.Errorf("%w: cell missing from the backend", ErrNotFound)

// BatchGet reads fields (all fields the rows have, when none are named) of
// keys. An unknown key gives ErrNotFound; a field some key lacks gives
// ErrNotReady; a cell that does not decode, or is not what its row's
// metadata says (a tensor of the dtype and shape List reports, or a value
// that is not a tensor), gives an error matching codec.ErrCorrupt; all as
// *KeyError naming the key and field. Each column is
// stacked when every row has the same dtype and shape, jagged when the rows
// are tensors of different shapes, and a values column otherwise. Tensor
// bytes of jagged and values columns, and []byte values, alias the fetched
// buffers, which may be the engine's own memory: treat them as read-only
// (copy before modifying). Stacked columns are fresh copies (BatchGetInto
// writes them into memory the caller hands back instead). A stacked
// column's memory may be that of an earlier column the garbage collector
// found unreachable: keep a Go reference (a slice into it) for as long as
// anything uses it, memory handed to non-Go code by address included.
func (c *Client) BatchGet(ctx context.Context, partition string, keys []string, fields ...string) (_ Batch, err error) {
	ctx, tr := c.trace(ctx, "BatchGet", partition, len(keys))
	defer func() { tr.done(err) }()
	release, err := c.enter(ctx, "BatchGet", partition)
	if err != nil {
		return nil, err
	}
	defer release()
	return c.getFresh(ctx, tr, partition, keys, fields, nil)
}

// getFresh reads fields of keys: it looks the rows up (or, on a Colocated
// engine, takes the client's copy of them and confirms it in the request
// that reads the cells), reads the cells, and decodes them. A cell missing
// from the engine is read again for as long as the metadata names another
// cell each time (a writer replaced it meanwhile, so every retry means a
// writer made progress); when it names the same cell, the engine lost it
// and the read fails.
func (c *Client) getFresh(ctx context.Context, tr *callTrace, partition string, keys, fields []string, into reuse) (Batch, error) {
	if err := checkPartition(partition); err != nil {
		return nil, err
	}
	if err := checkKeys(partition, keys); err != nil {
		return nil, err
	}
	asked, err := checkReadFields(fields)
	if err != nil {
		return nil, err
	}
	var (
		prev    []*metadata.Row
		prevErr error
	)
	for {
		b, rows, err := c.readOnce(ctx, tr, partition, keys, asked, into)
		if !errors.Is(err, errVanished) || prevErr != nil && sameCell(prev, rows, prevErr) {
			return b, err
		}
		prev, prevErr = rows, err
	}
}

// readOnce is one attempt of getFresh; it returns the rows it read too.
func (c *Client) readOnce(ctx context.Context, tr *callTrace, partition string, keys, asked []string, into reuse) (Batch, []*metadata.Row, error) {
	if err := c.check(ctx); err != nil {
		return nil, nil, err
	}
	r := &readPlan{partition: partition, asked: asked, into: into}
	defer r.release()
	rows, err := c.readRows(ctx, partition, keys, r.plan)
	if err != nil {
		return nil, nil, err
	}
	if err := lookupFailed(partition, keys, rows); err != nil {
		return nil, nil, err
	}
	b, err := r.finish(rows)
	if err == nil && tr != nil {
		tr.add(len(rows), len(r.cells), r.bytes()) // bytes: a pass over the cells, only when traced
	}
	return b, rows, err
}

// readRows looks the rows of keys up, has plan choose their cells'
// destinations, and reads the cells: in one call of a Colocated engine,
// else a Lookup and reads of KeysLimit cells, IODepth in flight.
func (c *Client) readRows(ctx context.Context, partition string, keys []string, plan func([]*metadata.Row) ([]backends.ReadCell, error)) ([]*metadata.Row, error) {
	if c.colocated != nil {
		return c.colocated.ReadRows(ctx, partition, keys, plan)
	}
	rows, err := c.meta.Lookup(ctx, partition, keys)
	if err != nil {
		return nil, err
	}
	cells, err := plan(rows)
	if err != nil {
		return nil, err
	}
	return rows, forChunks(ctx, len(cells), c.opts.keysLimit, c.opts.ioDepth, func(ctx context.Context, lo, hi int) error {
		return c.data.Read(ctx, cells[lo:hi])
	})
}

// sameCell reports whether b names the cell whose absence err reports as a
// named it: same row index, same generation.
func sameCell(a, b []*metadata.Row, err error) bool {
	var ke *KeyError
	if !errors.As(err, &ke) {
		return true
	}
	find := func(rows []*metadata.Row) (metadata.FieldInfo, uint64, bool) {
		for _, r := range rows {
			if r.Key == ke.Key {
				fi, ok := r.Fields[ke.Field]
				return fi, r.Index, ok
			}
		}
		return metadata.FieldInfo{}, 0, false
	}
	fa, ia, oka := find(a)
	fb, ib, okb := find(b)
	return oka && okb && ia == ib && fa.Gen == fb.Gen
}

// BatchGetByMeta reads fields of m's rows (from List or Lookup): it
// answers exactly as BatchGet(ctx, m.Partition, m.Keys(), fields...)
// would now, whatever changed since m was taken. A row cleared since gives
// ErrNotFound; a key cleared and written again since names its new row,
// whose data and fields are read; a read naming no fields returns every
// field the rows have now (those written since m was taken included, and
// ErrNotReady when some row lacks one); a field replaced since reads as it
// is now. m only names the rows, by partition and key: a BatchMeta the
// caller built or edited is read the same way.
//
// So it takes the rows' current metadata, at the cost BatchGet pays for
// it: metadata kept in the process (memory://, or an engine with no
// metadata store of its own, which Open gives an in-process one) is
// looked up without a request; on Redis, a client holding a current copy
// of the partition's metadata (it read or wrote the partition before)
// reads in one round trip, the copy confirmed current in the request that
// reads the cells (metadata.Colocated.ReadRows, on the engine's own
// connections to a standalone server), and otherwise looks the rows up
// first.
func (c *Client) BatchGetByMeta(ctx context.Context, m *BatchMeta, fields ...string) (_ Batch, err error) {
	partition, keys := "", 0
	if m != nil {
		partition, keys = m.Partition, len(m.Rows)
	}
	ctx, tr := c.trace(ctx, "BatchGetByMeta", partition, keys)
	defer func() { tr.done(err) }()
	release, err := c.enter(ctx, "BatchGetByMeta", partition)
	if err != nil {
		return nil, err
	}
	defer release()
	if m == nil {
		return nil, invalidf("nil BatchMeta")
	}
	return c.getFresh(ctx, tr, m.Partition, m.Keys(), fields, nil)
}

// checkReadFields checks the fields a read asks for and returns them
// sorted (a copy); none asked for (nil) reads every field of the rows.
func checkReadFields(fields []string) ([]string, error) {
	if len(fields) == 0 {
		return nil, nil
	}
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
	return fields, nil
}

// addCellKeys adds the storage keys of the cells of fields of rows to
// arena, field-major, and their engine tags to tags; a field some row
// lacks is ErrNotReady.
func addCellKeys(arena *keyArena, tags *[]string, partition string, rows []*metadata.Row, fields []string) error {
	for _, f := range fields {
		var (
			prev map[string]metadata.FieldInfo
			fi   metadata.FieldInfo
			ok   bool
		)
		for i, r := range rows {
			if i == 0 || !metadata.SameMap(r.Fields, prev) {
				prev = r.Fields
				fi, ok = prev[f]
			}
			if !ok {
				return &KeyError{Partition: partition, Key: r.Key, Field: f, Err: ErrNotReady}
			}
			arena.add(r.Index, f, fi.Gen)
			*tags = append(*tags, fi.BackendTag)
		}
	}
	return nil
}

// decodeCells decodes the cells of fields of rows that bufs holds, as
// cellKeys names them (nil: missing, errVanished), into columns, and checks
// each against its row's metadata (checkColumn).
func decodeCells(partition string, rows []*metadata.Row, fields []string, bufs [][]byte, into reuse) (Batch, error) {
	n := len(rows)
	for i, b := range bufs {
		if b == nil {
			return nil, &KeyError{Partition: partition, Key: rows[i%n].Key, Field: fields[i/n], Err: errVanished}
		}
	}
	out := make(Batch, len(fields))
	for fi, f := range fields {
		col, err := decodeColumn(bufs[fi*n:(fi+1)*n], into[f])
		if err != nil {
			var oe *codec.ObjectError
			if errors.As(err, &oe) {
				oe.Index += fi * n // the cell's place among all of them
				return nil, &KeyError{Partition: partition, Key: rows[oe.Index%n].Key, Field: f, Err: err}
			}
			return nil, err
		}
		if err := checkColumn(partition, rows, f, col); err != nil {
			return nil, err
		}
		out[f] = col
	}
	return out, nil
}

// decodeColumn decodes one field's cells: a column of bare tensors (the
// common case) without boxing each, stacked straight from the buffers when
// they agree in dtype and shape (into dst, if it is large enough); anything
// else through the general decoder.
func decodeColumn(bufs [][]byte, dst []byte) (Column, error) {
	if st, ok := codec.BatchDecodeStackInto(bufs, dst); ok {
		return Column{kind: KindStacked, stacked: st}, nil
	}
	if ts, ok := codec.BatchDecodeTensors(bufs); ok {
		return tensorColumn(ts), nil
	}
	values, err := codec.BatchDecodeFrom(bufs)
	if err != nil {
		return Column{}, err
	}
	return columnOf(values), nil
}

func unionFields(rows []*metadata.Row) []string {
	set := map[string]struct{}{}
	var prev map[string]metadata.FieldInfo
	for _, r := range rows {
		if metadata.SameMap(r.Fields, prev) {
			continue // rows of one put share their Fields map
		}
		prev = r.Fields
		for f := range prev {
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
	for i, v := range vals {
		t, ok := v.(codec.Tensor)
		if !ok {
			return Column{kind: KindValues, values: slices.Clone(vals)}
		}
		ts[i] = t
	}
	return tensorColumn(ts)
}

// tensorColumn is stacked when every tensor has one dtype and shape, else
// jagged over ts.
func tensorColumn(ts []codec.Tensor) Column {
	same := true
	for _, t := range ts {
		same = same && codec.SameLayout(ts[0], t)
	}
	if same && len(ts) > 0 {
		if st, err := codec.Stack(ts); err == nil {
			return Column{kind: KindStacked, stacked: st}
		}
	}
	return Column{kind: KindJagged, tensors: ts}
}
