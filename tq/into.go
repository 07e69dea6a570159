package tq

import (
	"cmp"
	"context"
	"slices"
	"unsafe"

	"github.com/tqgo/tqgo/codec"
	"github.com/tqgo/tqgo/internal/uninit"
)

// BatchGetInto is BatchGet writing its stacked columns into the memory of
// into's stacked columns of the same fields, where that memory holds
// enough bytes, rather than into fresh memory. A trainer that reads a batch
// of one shape every step passes the batch of the step before: fresh
// memory costs a page fault per 4 KiB the first time it is written, which
// for large columns costs more than reading them.
//
// Only into's stacked columns are taken, each up to its length (never
// into memory past it), none whose memory overlaps another's and none not
// aligned for the new column's dtype. A result's column is as long as its
// rows: after a smaller batch, a larger one takes fresh memory again. into
// must not be used after the call, whatever its outcome: its columns' bytes
// are overwritten, in part on error. A nil into makes it BatchGet.
func (c *Client) BatchGetInto(ctx context.Context, partition string, keys []string, into Batch, fields ...string) (_ Batch, err error) {
	ctx, tr := c.trace(ctx, "BatchGetInto", partition, len(keys))
	defer func() { tr.done(err) }()
	release, err := c.enter(ctx, "BatchGetInto", partition)
	if err != nil {
		return nil, err
	}
	defer release()
	return c.getFresh(ctx, tr, partition, keys, fields, reuseOf(into))
}

// reuse is memory a read may write its stacked columns into, by field.
// Its buffers do not overlap, so two columns never share bytes.
type reuse map[string][]byte

// reuseOf takes the memory of into's stacked columns.
func reuseOf(into Batch) reuse {
	type span struct {
		field  string
		lo, hi uintptr
	}
	var spans []span
	for f, col := range into {
		if col.kind != KindStacked || len(col.stacked.Data) == 0 {
			continue
		}
		lo := uintptr(unsafe.Pointer(unsafe.SliceData(col.stacked.Data)))
		spans = append(spans, span{f, lo, lo + uintptr(len(col.stacked.Data))})
	}
	if len(spans) == 0 {
		return nil
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.lo, b.lo) })
	out := make(reuse, len(spans))
	var seenHi uintptr // the end of the furthest-reaching span so far
	for i, s := range spans {
		overlaps := s.lo < seenHi || i+1 < len(spans) && spans[i+1].lo < s.hi
		seenHi = max(seenHi, s.hi)
		if !overlaps {
			d := into[s.field].stacked.Data
			out[s.field] = d[:len(d):len(d)]
		}
	}
	return out
}

// bytes returns n bytes for field's column of elements of align bytes: the
// reused memory when it is large enough and aligned for them (else views of
// the column would copy), else fresh memory, not zeroed (the reader
// overwrites every byte before the column is exposed).
func (r reuse) bytes(field string, n, align int) []byte {
	if b := r[field]; n > 0 && len(b) >= n && codec.AlignedFor(b, align) {
		return b[:n:n]
	}
	return uninit.Recycled(n) // a column the caller drops is reused once unreachable
}
