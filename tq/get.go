package tq

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/tqgo/tqgo/backends"
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
// writes them into memory the caller hands back instead).
func (c *Client) BatchGet(ctx context.Context, partition string, keys []string, fields ...string) (Batch, error) {
	release, err := c.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	return c.getFresh(ctx, partition, keys, fields, nil, nil, nil)
}

// getFresh looks keys up and reads them. A cell missing from the backend is
// looked up again for as long as the metadata names another cell each time
// (a writer replaced it meanwhile, so every retry means a writer made
// progress); when it names the same cell, the engine lost it and the read
// fails. prev and prevErr are an earlier attempt's rows and its
// errVanished, if any.
func (c *Client) getFresh(ctx context.Context, partition string, keys, fields []string, prev []*backends.Row, prevErr error, into reuse) (Batch, error) {
	if err := checkPartition(partition); err != nil {
		return nil, err
	}
	if err := checkKeys(keys); err != nil {
		return nil, err
	}
	if prevErr == nil && c.cachedLookup != nil {
		if b, ok, err := c.getCached(ctx, partition, keys, fields, into); ok {
			return b, err
		}
	}
	for {
		rows, err := c.lookupValid(ctx, partition, keys)
		if err != nil {
			return nil, err
		}
		if prevErr != nil && sameCell(prev, rows, prevErr) {
			return nil, prevErr
		}
		b, err := c.read(ctx, partition, rows, fields, into)
		if !errors.Is(err, errVanished) {
			return b, err
		}
		prev, prevErr = rows, err
	}
}

// getCached is a read of the rows the metadata's copy in this client
// holds, confirmed current in the same request as the read
// (backends.ConfirmingReader): one round trip where looking the rows up
// first takes two. Fields known to stack are read into their columns;
// the cells of the others are read whole in the same request
// (stackRead.addWhole) and decoded as readCells decodes them. ok false: the read was not such a read (no cell to read,
// or more than KeysLimit), the copy was stale, or a cell was missing,
// corrupt or of a field some row lacks; the caller looks up and reads as
// usual, which names such cells against the rows as they are. The caller
// has checked partition and keys.
func (c *Client) getCached(ctx context.Context, partition string, keys, fields []string, into reuse) (_ Batch, ok bool, _ error) {
	if err := c.check(ctx); err != nil {
		return nil, true, err
	}
	rows, token, ok := c.cachedLookup.LookupCached(partition, keys)
	if !ok || slices.Contains(rows, nil) {
		return nil, false, nil
	}
	fields, err := readFields(rows, fields)
	if err != nil {
		return nil, true, err
	}
	st, others := planStacked(rows, fields)
	var whole []string
	if len(others) > 0 {
		if whole, _, err = cellKeys(partition, rows, others); err != nil {
			return nil, false, nil
		}
	}
	if st == nil {
		if len(whole) == 0 {
			return nil, false, nil // no cell whose read could confirm the rows
		}
		st = &stackRead{n: len(rows)}
	}
	st.addWhole(whole, wholeSizes(rows, others))
	if len(st.skeys) > c.opts.keysLimit {
		return nil, false, nil
	}
	st.into = into
	defer st.release()
	current, err := c.confirmingReader.GetSplitConfirmed(ctx, c.meta, token, st.skeys, st.sizes(), st.allocate)
	if err != nil || !current {
		return nil, err != nil, err
	}
	out, err := st.finish(partition, rows)
	if err != nil {
		return nil, false, nil
	}
	if len(others) > 0 {
		other, err := decodeCells(partition, rows, others, st.wholeValues(), into)
		if err != nil {
			return nil, false, nil
		}
		maps.Copy(out, other)
	}
	return out, true, nil
}

// sameCell reports whether b names the cell whose absence err reports as a
// named it: same row index, same generation.
func sameCell(a, b []*backends.Row, err error) bool {
	var ke *KeyError
	if !errors.As(err, &ke) {
		return true
	}
	find := func(rows []*backends.Row) (backends.FieldInfo, uint64, bool) {
		for _, r := range rows {
			if r.Key == ke.Key {
				fi, ok := r.Fields[ke.Field]
				return fi, r.Index, ok
			}
		}
		return backends.FieldInfo{}, 0, false
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
// reads the cells (backends.ConfirmingReader, on the engine's own
// connections to a standalone server), and otherwise looks the rows up
// first.
func (c *Client) BatchGetByMeta(ctx context.Context, m *BatchMeta, fields ...string) (Batch, error) {
	release, err := c.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	if m == nil {
		return nil, invalidf("nil BatchMeta")
	}
	return c.getFresh(ctx, m.Partition, m.Keys(), fields, nil, nil, nil)
}

// readFields are the fields a read of rows returns: those asked for
// (checked, sorted), or every field of the rows.
func readFields(rows []*backends.Row, fields []string) ([]string, error) {
	if len(fields) == 0 {
		return unionFields(rows), nil
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

// read fetches and decodes the cells of rows of partition.
func (c *Client) read(ctx context.Context, partition string, rows []*backends.Row, fields []string, into reuse) (Batch, error) {
	if err := c.check(ctx); err != nil {
		return nil, err
	}
	fields, err := readFields(rows, fields)
	if err != nil {
		return nil, err
	}
	var st *stackRead
	if c.splitReader != nil {
		st, fields = planStacked(rows, fields)
	}
	if st == nil {
		return c.readCells(ctx, partition, rows, fields, into)
	}
	st.into = into
	defer st.release()
	// The fields known to stack are read into their columns while the
	// others are read the general way: two requests in flight, not one
	// after the other.
	// The first error wins and cancels the other read, whose error is then
	// only that cancellation (ErrNotReady and errVanished must reach the
	// callers that retry on them).
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		once  sync.Once
		first error
	)
	fail := func(err error) {
		if err != nil {
			once.Do(func() { first = err; cancel() })
		}
	}
	var other Batch
	if len(fields) == 0 {
		// Nothing else to read: no goroutine to wake (on two shared
		// cores, a wake-up costs about what a small read does).
		fail(c.fetchStacked(ctx, st))
	} else {
		done := make(chan struct{})
		go func() {
			defer close(done)
			var err error
			other, err = c.readCells(ctx, partition, rows, fields, into)
			fail(err)
		}()
		fail(c.fetchStacked(ctx, st))
		<-done
	}
	if first != nil {
		return nil, first
	}
	out, err := st.finish(partition, rows)
	if err != nil {
		return nil, err
	}
	maps.Copy(out, other)
	return out, nil
}

// readCells fetches and decodes the cells of fields of rows, and checks
// each against its row's metadata (checkColumn).
func (c *Client) readCells(ctx context.Context, partition string, rows []*backends.Row, fields []string, into reuse) (Batch, error) {
	skeys, tags, err := cellKeys(partition, rows, fields)
	if err != nil {
		return nil, err
	}
	var bufs [][]byte // one chunk's reply as it is; chunks' replies copied in
	if len(skeys) > c.opts.keysLimit {
		bufs = make([][]byte, len(skeys))
	}
	err = forChunks(ctx, len(skeys), c.opts.keysLimit, c.opts.ioDepth, func(ctx context.Context, lo, hi int) error {
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
		if bufs == nil {
			bufs = got
			if len(got) != len(skeys) {
				bufs = make([][]byte, len(skeys))
				copy(bufs, got)
			}
			return nil
		}
		copy(bufs[lo:hi], got)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return decodeCells(partition, rows, fields, bufs, into)
}

// cellKeys names the cells of fields of rows, field-major, with the
// backend tag of each; a field some row lacks is ErrNotReady.
func cellKeys(partition string, rows []*backends.Row, fields []string) (skeys, tags []string, _ error) {
	n := len(rows)
	arena := newKeyArena(n*len(fields), maxLen(fields))
	tags = make([]string, 0, n*len(fields))
	for _, f := range fields {
		var (
			prev map[string]backends.FieldInfo
			fi   backends.FieldInfo
			ok   bool
		)
		for i, r := range rows {
			if i == 0 || !backends.SameMap(r.Fields, prev) {
				prev = r.Fields
				fi, ok = prev[f]
			}
			if !ok {
				return nil, nil, &KeyError{Partition: partition, Key: r.Key, Field: f, Err: ErrNotReady}
			}
			arena.add(r.Index, f, fi.Gen)
			tags = append(tags, fi.BackendTag)
		}
	}
	return arena.keys(), tags, nil
}

// decodeCells decodes the cells of fields of rows that bufs holds, as
// cellKeys names them (nil: missing, errVanished), into columns, and checks
// each against its row's metadata (checkColumn).
func decodeCells(partition string, rows []*backends.Row, fields []string, bufs [][]byte, into reuse) (Batch, error) {
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

func unionFields(rows []*backends.Row) []string {
	set := map[string]struct{}{}
	var prev map[string]backends.FieldInfo
	for _, r := range rows {
		if backends.SameMap(r.Fields, prev) {
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
