package tq

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/codec"
)

// Puts of new keys by blocks (see metadata.Blocker and WithIndexBlocks):
// once a put of a set of fields found every key new, the client reserves
// a block of indexes of the partition for those fields (and the fields of
// every such set before: one block serves them all) in the background,
// and the next puts of new keys with some of those fields write their
// cells under indexes of the block and then make one call (PutNew):
// through a server, two round trips where Prepare, the cells and Commit
// are three. A put whose PutNew is refused (a key has a row, the block
// ended) deletes its cells and goes by Prepare; the partition then waits
// a while before its next block.

const (
	blockMin = 8
	// blockPuts is how many puts of the size seen a block holds: few, so
	// that across producers the order of indexes (the order tasks are
	// served in) stays the order of puts to within a few puts of each.
	blockPuts = 4
	// blockBackoff is how long a partition whose block was refused (or a
	// PutNew of it: a key had a row) waits before the next, at first; it
	// doubles with each refusal up to blockBackoffMax.
	blockBackoff    = time.Minute
	blockBackoffMax = 30 * time.Minute
	// blockFetchTimeout bounds a block's reservation in the background.
	blockFetchTimeout = 10 * time.Second
	// blockParts bounds the partitions a client holds blocks of: beyond
	// it, the one used least recently releases its blocks (a job with a
	// partition per step leaves none behind).
	blockParts = 16
)

// blockIdle is how long a block may go without a PutNew of this client
// before it is retired for a fresh one: the store aborts a block idle
// for a Reclaim's olderThan (the tq server's every hour by default) and
// sweeps its garbage, after which a PutNew of it can no longer be told
// from one of a block lost in a failover, and its cells are left behind.
var blockIdle = time.Minute

// heldBlock is a block the client holds: offsets below next are handed
// to puts; burnt are indexes of puts that failed, never handed out
// again, whose cells may still exist (a failed delete, an unknown
// outcome): its release names them.
type heldBlock struct {
	partition string
	fields    []string // sorted
	base      uint64
	token     uint64 // the store's, which PutNew and ReleaseBlock repeat
	n         int
	next      int
	inflight  int
	burnt     []uint64
	// used is when the store last counted the block in use, at the
	// latest: before its Block was sent, or before a put that took
	// offsets of it whose PutNew applied (see blockIdle).
	used time.Time
	// dirty: the store still holds offsets of it once the client is done
	// with it (one burnt, or never handed out), so it must be released.
	dirty    bool
	released bool
}

// blockSet is what a client knows of its blocks, per partition.
type blockSet struct {
	mu    sync.Mutex
	off   bool // the store has no blocks
	parts map[string]*partBlocks
	// top is, per partition, the highest index a put of this client
	// got: a block below it is not used, so that this client's puts
	// keep index order.
	top map[string]uint64
}

// partBlocks are a partition's blocks: cur, which puts take offsets of,
// and next, on its way or come; both of fields.
type partBlocks struct {
	fields    []string // sorted: of every set of fields a put of new keys wrote
	cur, next *heldBlock
	used      time.Time     // its latest put or want
	fetched   chan struct{} // closed when the fetch in flight ends; nil: none
	until     time.Time     // no block before (a Block refused)
	backoff   time.Duration
	// refused are the sets of fields (joined by NUL) a PutNew of which
	// was refused (a key had a row: maybe a set that updates rows),
	// with when they may go by blocks again and their backoff.
	refused map[string]setBackoff
}

// take hands a put of n new keys offsets of the set's current block, or
// nil when it has too few (and asks for the next in the background).
//
// A put that finds no block while the set's next is on its way waits for
// it (bounded by ctx), once: a Block costs the round trip a Prepare
// would, and a put by Prepare meanwhile would take indexes above the
// block's, so that this client could no longer use it.
func (c *Client) takeBlock(ctx context.Context, partition string, fields []string, n int) (*heldBlock, uint64) {
	b, base, fetched := c.tryBlock(partition, fields, n)
	if b != nil || fetched == nil {
		return b, base
	}
	select {
	case <-fetched:
	case <-ctx.Done():
		return nil, 0
	}
	b, base, _ = c.tryBlock(partition, fields, n)
	return b, base
}

// tryBlock is takeBlock without waiting: with no block it returns the
// set's fetch in flight, if any.
func (c *Client) tryBlock(partition string, fields []string, n int) (*heldBlock, uint64, <-chan struct{}) {
	s := &c.blocks
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.off || n > metadata.MaxBlock {
		return nil, 0, nil
	}
	fb := s.parts[partition]
	if fb == nil || !subset(fields, fb.fields) || fb.refusedLocked(fields) {
		return nil, 0, nil // a put of other fields (maybe of rows that exist), or of a set refused lately
	}
	fb.used = time.Now()
	top, seen := s.top[partition]
	for fb.cur == nil || fb.cur.n-fb.cur.next < n || seen && fb.cur.base+uint64(fb.cur.next) <= top || time.Since(fb.cur.used) > blockIdle {
		if fb.next == nil {
			c.fetchBlockLocked(fb, partition, n)
			return nil, 0, fb.fetched
		}
		c.retireLocked(fb.cur)
		fb.cur, fb.next = fb.next, nil
	}
	b := fb.cur
	base := b.base + uint64(b.next)
	b.next += n
	b.inflight++
	s.raiseTopLocked(partition, base+uint64(n)-1)
	if b.n-b.next < 2*n { // fewer than two more such puts left: the next block
		c.fetchBlockLocked(fb, partition, n)
	}
	return b, base, nil
}

// putIndexes notes the indexes of the new rows a put by Prepare made: a
// block below them would break this client's index order. The rows of
// keys that had one (an update, maybe of another client's rows) are not
// this client's to order.
//
// Only a partition the client holds blocks of (or fetches one for) is
// noted: any block of another is fetched after this put's indexes were
// drawn, so above them, and noting every partition put to would grow
// without bound (a job with a partition per step, an engine without
// blocks).
func (c *Client) putIndexes(partition string, res []metadata.Reservation) {
	s := &c.blocks
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.off || s.parts[partition] == nil {
		return
	}
	for _, r := range res {
		if r.New {
			s.raiseTopLocked(partition, r.Index)
		}
	}
}

func (s *blockSet) raiseTopLocked(partition string, index uint64) {
	if s.top == nil {
		s.top = map[string]uint64{}
	}
	if top, ok := s.top[partition]; !ok || index > top {
		s.top[partition] = index
	}
}

// retireLocked ends b for the client: no put takes offsets of it any
// more, and once none is in flight, a block the store may still hold (an
// offset never handed out, or burnt) is released.
func (c *Client) retireLocked(b *heldBlock) {
	if b == nil {
		return
	}
	if b.next < b.n {
		b.dirty = true // offsets never handed out: the store holds them
		b.next = b.n
	}
	if b.inflight == 0 && b.dirty {
		c.releaseBlock(b)
	}
}

// releaseBlock releases b in the background (Close waits for it),
// once.
func (c *Client) releaseBlock(b *heldBlock) {
	if b.released {
		return
	}
	b.released = true
	burnt := slices.Clone(b.burnt)
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if err := metadata.ReleaseBlock(ctx, c.meta, b.partition, metadata.IndexBlock{Base: b.base, Token: b.token}, burnt); err != nil {
			c.opts.logger.Warn("tq: releasing a block of indexes failed; Reclaim ends it", "partition", b.partition, "base", b.base, "err", err)
		}
	}()
}

// putDone ends a put's use of b: ok (its PutNew applied; the put took
// its offsets at taken), or its indexes burnt (written: its cells may
// still exist).
func (c *Client) putDone(b *heldBlock, base uint64, n int, taken time.Time, ok, written bool) {
	s := &c.blocks
	s.mu.Lock()
	defer s.mu.Unlock()
	b.inflight--
	if ok && taken.After(b.used) {
		b.used = taken
	}
	if !ok {
		b.dirty = true
		if written {
			for i := range n {
				b.burnt = append(b.burnt, base+uint64(i))
			}
		}
	}
	if b.next == b.n && b.inflight == 0 && b.dirty {
		if fb := s.parts[b.partition]; fb == nil || fb.cur != b {
			c.releaseBlock(b)
		}
	}
}

// wantBlocks notes a put by Prepare of n keys with fields, every key
// new: the partition's blocks are for those fields too from now on (its
// blocks of fewer fields are retired).
func (c *Client) wantBlocks(partition string, fields []string, n int) {
	s := &c.blocks
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.off || n > metadata.MaxBlock {
		return
	}
	if s.parts == nil {
		s.parts = map[string]*partBlocks{}
	}
	fb := s.parts[partition]
	if fb == nil {
		if len(s.parts) >= blockParts {
			c.evictPartLocked()
		}
		fb = &partBlocks{}
		s.parts[partition] = fb
	}
	fb.used = time.Now()
	if sb, ok := fb.refused[strings.Join(fields, "\x00")]; ok && time.Now().Before(sb.until) {
		// A set backed off blocks put new keys by Prepare, at indexes
		// above the partition's blocks: a put of another set can no
		// longer use them (this client's order), and a fresh block at
		// each would cost a Block and a release per put. The
		// partition's next block waits as long as the set does.
		if fb.until.Before(sb.until) {
			fb.until = sb.until
		}
		return
	}
	if !subset(fields, fb.fields) {
		fb.fields = union(fb.fields, fields)
		c.retireLocked(fb.cur)
		c.retireLocked(fb.next)
		fb.cur, fb.next = nil, nil
	}
	if fb.cur == nil && fb.next == nil {
		c.fetchBlockLocked(fb, partition, n)
	}
}

// subset reports whether every one of fields (sorted) is one of of
// (sorted).
func subset(fields, of []string) bool {
	j := 0
	for _, f := range fields {
		for j < len(of) && of[j] < f {
			j++
		}
		if j == len(of) || of[j] != f {
			return false
		}
	}
	return true
}

// union returns the sorted fields of a and b (sorted), a new slice.
func union(a, b []string) []string {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}

// evictPartLocked releases the blocks of the partition used least
// recently and forgets it.
func (c *Client) evictPartLocked() {
	s := &c.blocks
	var (
		oldest string
		at     time.Time
		found  bool
	)
	for k, fb := range s.parts {
		if !found || fb.used.Before(at) {
			oldest, at, found = k, fb.used, true
		}
	}
	if fb := s.parts[oldest]; fb != nil {
		c.retireLocked(fb.cur)
		c.retireLocked(fb.next)
		delete(s.parts, oldest)
		delete(s.top, oldest)
	}
}

// setBackoff is a set of fields' time off blocks after a refused PutNew.
type setBackoff struct {
	until   time.Time
	backoff time.Duration
}

// refuseBlocks backs the put's set of fields off blocks, and retires b:
// a PutNew of b with fields was refused (a key had a row, or the block
// ended: the client cannot tell which; other sets keep to blocks, a
// fresh one).
func (c *Client) refuseBlocks(b *heldBlock, fields []string) {
	s := &c.blocks
	s.mu.Lock()
	defer s.mu.Unlock()
	if fb := s.parts[b.partition]; fb != nil {
		if fb.refused == nil {
			fb.refused = map[string]setBackoff{}
		}
		key := strings.Join(slices.Sorted(slices.Values(fields)), "\x00")
		sb := fb.refused[key]
		sb.backoff = min(max(2*sb.backoff, blockBackoff), blockBackoffMax)
		sb.until = time.Now().Add(sb.backoff)
		fb.refused[key] = sb
		if fb.cur == b {
			fb.cur = nil
			c.retireLocked(b)
		}
	}
}

// acceptedSet forgets the backoff of a set of fields a PutNew of which
// applied: a set refused once in a while starts again from the shortest
// backoff at its next refusal.
func (c *Client) acceptedSet(partition string, fields []string) {
	s := &c.blocks
	s.mu.Lock()
	defer s.mu.Unlock()
	if fb := s.parts[partition]; fb != nil && len(fb.refused) > 0 {
		delete(fb.refused, strings.Join(slices.Sorted(slices.Values(fields)), "\x00"))
	}
}

// refusedLocked reports whether fields (sorted) are a set a PutNew of
// which was refused lately.
func (fb *partBlocks) refusedLocked(fields []string) bool {
	sb, ok := fb.refused[strings.Join(fields, "\x00")]
	return ok && time.Now().Before(sb.until)
}

func (fb *partBlocks) backoffLocked() {
	fb.backoff = min(max(2*fb.backoff, blockBackoff), blockBackoffMax)
	fb.until = time.Now().Add(fb.backoff)
}

// fetchBlockLocked reserves the partition's next block in the
// background, unless one is on its way or held, or the partition is
// backed off.
func (c *Client) fetchBlockLocked(fb *partBlocks, partition string, n int) {
	if fb.fetched != nil || fb.next != nil || time.Now().Before(fb.until) || c.closed.Load() {
		return
	}
	size := min(max(blockPuts*n, blockMin), metadata.MaxBlock)
	fields := fb.fields
	done := make(chan struct{})
	fb.fetched = done
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		ctx, cancel := context.WithTimeout(c.closing, blockFetchTimeout)
		defer cancel()
		sent := time.Now()
		blk, err := metadata.Block(ctx, c.meta, partition, fields, size)
		s := &c.blocks
		s.mu.Lock()
		defer s.mu.Unlock()
		fb.fetched = nil
		defer close(done)
		switch {
		case errors.Is(err, errors.ErrUnsupported):
			s.off = true
			return
		case err != nil:
			if !errors.Is(err, context.Canceled) {
				c.opts.logger.Debug("tq: no block of indexes; puts go by Prepare", "partition", partition, "err", err)
				fb.backoffLocked()
			}
			return
		}
		b := &heldBlock{partition: partition, fields: fields, base: blk.Base, token: blk.Token, n: size, used: sent}
		if c.closed.Load() || s.parts[partition] != fb || !slices.Equal(fb.fields, fields) {
			c.releaseBlock(b) // the client closed, the partition was evicted, or its fields grew
			return
		}
		if fb.cur == nil {
			fb.cur = b
		} else {
			fb.next = b
		}
		fb.backoff = 0
	}()
}

// releaseBlocks releases every block the client holds (Close).
func (c *Client) releaseBlocks() {
	s := &c.blocks
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, fb := range s.parts {
		c.retireLocked(fb.cur)
		c.retireLocked(fb.next)
		fb.cur, fb.next = nil, nil
	}
}

// runBlock writes a put of new keys by the block b, at indexes base on:
// the cells, then PutNew. A PutNew refused with ErrConflict (a key has
// a row, the block ended) deletes the cells and puts by Prepare.
func (w *write) runBlock(ctx context.Context, enc *codec.Encoding, b *heldBlock, base uint64) error {
	taken := time.Now()
	n := len(w.keys)
	gens := make(map[string]uint64, len(w.fields))
	for _, f := range w.fields {
		gens[f] = 0
	}
	w.res = make([]metadata.Reservation, n)
	for i := range w.res {
		w.res[i] = metadata.Reservation{Index: base + uint64(i), Gens: gens, New: true}
	}
	w.nameCells()
	sizes := w.sizes(enc)
	if enc != nil {
		if err := w.encode(ctx, enc); err != nil {
			w.c.putDone(b, base, n, taken, false, false)
			return err
		}
	}
	w.wrote = true
	err := w.c.writeCells(ctx, w.cells)
	if err == nil {
		for i := range w.cells {
			w.infos[i].BackendTag = w.cells[i].Tag
		}
		var res metadata.CommitResult
		if res, err = w.putNew(ctx, b.token, base, sizes); err == nil {
			w.c.putDone(b, base, n, taken, true, false)
			w.c.acceptedSet(b.partition, w.fields)
			w.committed(res)
			return nil
		}
	}
	switch {
	case errors.Is(err, backends.ErrReservationLost):
		// The store knows neither the block nor its garbage: lost in a
		// failover (its indexes may be another row's now), or aborted
		// as idle and swept. The cells stay, unreferenced; the put
		// goes by Prepare, at indexes of its own.
		w.c.putDone(b, base, n, taken, false, false)
		w.c.refuseBlocks(b, w.fields)
		w.c.opts.logger.Warn("tq: put refused, its block of indexes lost; leaving its cells and putting by Prepare", "partition", w.partition, "keys", n, "err", err)
		return w.byPrepare(ctx, sizes)
	case errors.Is(err, ErrOutcomeUnknown):
		w.c.putDone(b, base, n, taken, false, true)
		w.c.opts.logger.Warn("tq: put outcome unknown; keeping its cells", "partition", w.partition, "keys", n, "err", err)
		return err
	}
	refs := make([]metadata.Ref, len(w.cells))
	for fi, f := range w.fields {
		for i := range n {
			refs[fi*n+i] = metadata.Ref{Index: base + uint64(i), Field: f, Tag: w.infos[fi*n+i].BackendTag}
		}
	}
	dctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	deleted, derr := w.c.deleteRefs(dctx, refs)
	cancel()
	if derr != nil {
		w.c.opts.logger.Warn("tq: deleting a refused put's cells failed; its block's release names them", "partition", w.partition, "cells", len(refs)-len(deleted), "err", derr)
	}
	w.c.putDone(b, base, n, taken, false, derr != nil)
	if !errors.Is(err, backends.ErrConflict) {
		return err
	}
	// A key has a row, or the block ended: put by Prepare.
	w.c.refuseBlocks(b, w.fields)
	return w.byPrepare(ctx, sizes)
}

// byPrepare puts what runBlock could not put by its block: Prepare, the
// cells (encoded already) under the storage keys it names, Commit.
func (w *write) byPrepare(ctx context.Context, sizes []int64) error {
	w.wrote = false
	if err := w.reserve(ctx, sizes); err != nil {
		return err
	}
	return w.store(ctx)
}

// putNew is the Blocker's PutNew under the put's FullPolicy, as prepare
// is Prepare.
func (w *write) putNew(ctx context.Context, token, base uint64, sizes []int64) (metadata.CommitResult, error) {
	ups := w.updates()
	var res metadata.CommitResult
	err := w.c.underPolicy(ctx, w.partition, func() (err error) {
		res, err = metadata.PutNew(ctx, w.c.meta, w.partition, token, base, w.keys, w.fields, sizes, ups)
		return err
	})
	return res, err
}
