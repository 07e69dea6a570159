package memory

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/internal/uninit"
)

// numShards spreads keys over independently locked maps, so writers of
// different keys rarely contend.
const numShards = 64

// Store is the in-memory data store: a backends.Store and a
// backends.Stager. It is safe for concurrent use.
//
// The store owns the memory of its values and reuses it. Small values
// (under 64 KiB) lie in arenas of up to 1 MiB; an arena counts the values
// in it, and when the last of them is deleted or overwritten (or unstaged)
// the arena goes to a free list that later Writes and Stages take from
// before allocating, so a partition written and cleared in a loop runs on
// warm memory. The free list holds at most maxFree bytes (64 MiB); an arena
// freed beyond that is left to the collector. A larger value has its own
// allocation and is never reused.
//
// What a caller holds never changes under it: Read copies a value of
// another length than its destination out of an arena before it returns
// (into one allocation per call, the caller's), and returns a value with
// its own allocation zero-copy, as that memory is never written again.
// Write copies Head and Body into the store's memory, except a staged Body,
// which it keeps and owns from then on. Tags are always "".
type Store struct {
	seed   maphash.Seed
	closed atomic.Bool
	shards [numShards]shard
	free   freeList
}

type shard struct {
	mu sync.RWMutex // guards m
	m  map[string]entry
}

// entry is a stored value and the arena it lies in (nil for a value with
// its own allocation, or an empty one).
type entry struct {
	v []byte
	a *chunk
}

var (
	_ backends.Store  = (*Store)(nil)
	_ backends.Stager = (*Store)(nil)
)

// New returns an empty store.
func New() *Store {
	s := &Store{seed: maphash.MakeSeed()}
	for i := range s.shards {
		s.shards[i].m = make(map[string]entry)
	}
	return s
}

func (s *Store) shardOf(key string) int32 {
	return int32(maphash.String(s.seed, key) % numShards)
}

// firstPos is the positions of a one-key batch (read-only).
var firstPos = []int32{0}

// forShards calls f once for each shard holding any of the n keys key
// returns, with their positions (in order), so a batch takes each shard's
// lock once rather than once per key.
func (s *Store) forShards(n int, key func(i int) string, f func(sh *shard, pos []int32)) {
	if n == 1 {
		f(&s.shards[s.shardOf(key(0))], firstPos)
		return
	}
	// A counting sort by shard: of[i] is key i's shard, pos the positions
	// grouped by shard, start[j] where shard j's group begins.
	scratch := make([]int32, 2*n)
	of, pos := scratch[:n], scratch[n:]
	var start [numShards + 1]int32
	for i := range n {
		j := s.shardOf(key(i))
		of[i] = j
		start[j+1]++
	}
	for j := 1; j <= numShards; j++ {
		start[j] += start[j-1]
	}
	next := start
	for i, j := range of {
		pos[next[j]] = int32(i)
		next[j]++
	}
	for j := range numShards {
		if group := pos[start[j]:start[j+1]]; len(group) > 0 {
			f(&s.shards[j], group)
		}
	}
}

func (s *Store) check(ctx context.Context) error {
	if s.closed.Load() {
		return backends.ErrClosed
	}
	return ctx.Err()
}

// Copies of values under smallObject bytes share arenas of up to
// arenaSize bytes (one allocation for a batch of small cells); a larger
// value gets its own allocation, so clearing its row frees its memory.
// Arenas whose values are all gone wait for reuse on a free list of at
// most maxFree bytes.
const (
	smallObject = 64 << 10
	arenaSize   = 1 << 20
	maxFree     = 64 << 20
)

// chunk is one arena allocation. refs counts what may still read or write
// its bytes: the values stored in it, its staged cells not yet released,
// and the Reads copying out of it. At zero nothing refers to it and it may
// be reused.
type chunk struct {
	buf  []byte
	refs atomic.Int32
}

// release drops one reference to c (nil is a value of its own allocation),
// putting c on the free list when it was the last.
func (s *Store) release(c *chunk) {
	if c != nil && c.refs.Add(-1) == 0 {
		s.free.put(c)
	}
}

// freeList is the arenas awaiting reuse, at most maxFree bytes of them.
type freeList struct {
	mu     sync.Mutex
	chunks []*chunk
	bytes  int
}

func (f *freeList) put(c *chunk) {
	if len(c.buf) < smallObject {
		return // too small to be worth keeping
	}
	f.mu.Lock()
	if f.bytes+len(c.buf) <= maxFree {
		f.chunks = append(f.chunks, c)
		f.bytes += len(c.buf)
	}
	f.mu.Unlock()
}

// get returns a free arena, or nil.
func (f *freeList) get() *chunk {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.chunks)
	if n == 0 {
		return nil
	}
	c := f.chunks[n-1]
	f.chunks[n-1] = nil
	f.chunks = f.chunks[:n-1]
	f.bytes -= len(c.buf)
	return c
}

// drop empties the list.
func (f *freeList) drop() {
	f.mu.Lock()
	f.chunks, f.bytes = nil, 0
	f.mu.Unlock()
}

// arena hands out slices of shared allocations, reused ones first.
type arena struct {
	s    *Store
	c    *chunk // the arena being cut, nil before the first
	free []byte // what is left of c
}

// take returns n bytes (capacity n) of unspecified contents, the caller
// to write every byte, and the arena they lie in (nil for their own
// allocation), which counts them; need is the small bytes still to be
// taken, for sizing the next allocation.
func (a *arena) take(n, need int) ([]byte, *chunk) {
	switch {
	case n == 0:
		return empty, nil
	case n >= smallObject:
		return uninit.Bytes(n), nil
	}
	if len(a.free) < slot(n) {
		a.c = a.s.free.get()
		if a.c == nil || len(a.c.buf) < slot(n) {
			a.c = &chunk{buf: uninit.Bytes(max(min(need, arenaSize), slot(n)))}
		}
		a.free = a.c.buf
	}
	b := a.free[:n:n]
	a.free = a.free[min(slot(n), len(a.free)):]
	a.c.refs.Add(1)
	return b, a.c
}

// empty is every zero-length value: not nil, which Read would take for a
// missing key.
var empty = []byte{}

// slot rounds a small value's share of an arena up to 16 bytes, so every
// value starts aligned like the codec's tensor payloads and a decoded
// tensor's View is zero-copy.
func slot(n int) int { return (n + 15) &^ 15 }

// Write stores each cell's Head and Body, copied into the store's memory,
// or a staged cell's Body as it is (see Stage). It sets every Tag to "". A
// cell staged by another Store, or already unstaged, is an error wrapping
// backends.ErrInvalid, and the call then writes nothing. The memory of a
// value Write replaces is the store's to reuse.
func (s *Store) Write(ctx context.Context, cells []backends.Cell) error {
	if len(cells) == 0 {
		return nil
	}
	if err := s.check(ctx); err != nil {
		return err
	}
	small := 0
	for i := range cells {
		c := &cells[i]
		if c.Staged != nil {
			h, ok := c.Staged.(*stagedCell)
			if !ok || h.store != s || h.state.Load() == unstaged {
				return fmt.Errorf("%w: cell %q was not staged by this store, or was unstaged", backends.ErrInvalid, c.Key)
			}
			if len(c.Head) == 0 && h.state.Load() == staged {
				continue
			}
		}
		if n := len(c.Head) + len(c.Body); n < smallObject {
			small += slot(n)
		}
	}
	// Copy outside the locks, then publish shard by shard.
	vals := make([]entry, len(cells))
	a := arena{s: s}
	for i := range cells {
		c := &cells[i]
		c.Tag = ""
		h, _ := c.Staged.(*stagedCell)
		if h != nil && len(c.Head) == 0 && h.state.CompareAndSwap(staged, published) {
			// The staged memory itself, its reference passing to the entry.
			vals[i] = entry{c.Body[:len(c.Body):len(c.Body)], h.arena}
			if vals[i].v == nil {
				vals[i].v = empty
			}
			continue
		}
		n := len(c.Head) + len(c.Body)
		v, in := a.take(n, small)
		if n < smallObject {
			small -= slot(n)
		}
		copy(v[copy(v, c.Head):], c.Body)
		vals[i] = entry{v, in}
		if h != nil && h.state.CompareAndSwap(staged, published) {
			s.release(h.arena) // copied with its Head: the staged memory is done with
		}
	}
	s.forShards(len(cells), func(i int) string { return cells[i].Key }, func(sh *shard, pos []int32) {
		sh.mu.Lock()
		for _, i := range pos {
			k := cells[i].Key
			if old, ok := sh.m[k]; ok {
				s.release(old.a)
			}
			sh.m[k] = vals[i]
		}
		sh.mu.Unlock()
	})
	return nil
}

// Read fills each cell's destination with a copy of its value when the
// value has the destination's length, and otherwise sets Value to a copy of
// the value that is the caller's (the copies of one call share an
// allocation), or to a value of 64 KiB or more itself, which the store
// never writes again and the caller must not modify.
func (s *Store) Read(ctx context.Context, cells []backends.ReadCell) error {
	if len(cells) == 0 {
		return nil
	}
	if err := s.check(ctx); err != nil {
		return err
	}
	// Look up under the read locks, keeping each value in its cell's Value
	// and holding a reference to its arena (one per run of cells in the
	// same arena); copy after them, then let the arenas go.
	held := make([]*chunk, len(cells))
	s.forShards(len(cells), func(i int) string { return cells[i].Key }, func(sh *shard, pos []int32) {
		var last *chunk
		sh.mu.RLock()
		for _, i := range pos {
			e := sh.m[cells[i].Key]
			cells[i].Value = e.v
			if e.a != nil && e.a != last {
				e.a.refs.Add(1)
				held[i], last = e.a, e.a
			}
		}
		sh.mu.RUnlock()
	})
	// The values of other lengths in arenas are copied into one allocation.
	other := 0
	for i := range cells {
		c := &cells[i]
		if v := c.Value; v != nil && len(v) != len(c.Head)+len(c.Body) && len(v) < smallObject {
			other += slot(len(v))
		}
	}
	var out []byte
	if other > 0 {
		out = make([]byte, other)
	}
	for i := range cells {
		c := &cells[i]
		v := c.Value
		if v != nil && len(v) != len(c.Head)+len(c.Body) && len(v) > 0 && len(v) < smallObject {
			w := out[:len(v):len(v)]
			copy(w, v)
			out = out[slot(len(v)):]
			v = w
		}
		backends.FillReadCell(c, v)
	}
	for _, c := range held {
		s.release(c)
	}
	return nil
}

// Delete removes the cells' keys; missing keys are ignored. The memory of
// the values removed is the store's to reuse.
func (s *Store) Delete(ctx context.Context, cells []backends.Cell) error {
	if len(cells) == 0 {
		return nil
	}
	if err := s.check(ctx); err != nil {
		return err
	}
	s.forShards(len(cells), func(i int) string { return cells[i].Key }, func(sh *shard, pos []int32) {
		sh.mu.Lock()
		for _, i := range pos {
			k := cells[i].Key
			if old, ok := sh.m[k]; ok {
				delete(sh.m, k)
				s.release(old.a)
			}
		}
		if len(sh.m) == 0 {
			// Drops the tombstones the deletes left, which would slow
			// every later lookup of a missing key (each Write makes one).
			clear(sh.m)
		}
		sh.mu.Unlock()
	})
	return nil
}

// Len is the number of stored keys.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.RLock()
		n += len(sh.m)
		sh.mu.RUnlock()
	}
	return n
}

// Close drops every value. Later calls return backends.ErrClosed.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.m = make(map[string]entry)
		sh.mu.Unlock()
	}
	s.free.drop()
	return nil
}

// The states of a staged cell.
const (
	staged uint32 = iota
	published
	unstaged
)

// stagedCell is the Staged handle of one cell: the cells of a Stage call
// share one allocation of handles. arena is where its Body lies (nil for
// its own allocation), which counts it until it is unstaged or the value
// it became is gone.
type stagedCell struct {
	store *Store
	arena *chunk
	state atomic.Uint32
}

// Stage sets each cell's Body to sizes[i] bytes of the store's memory
// (values under 64 KiB share arenas, reused ones first, one allocation per
// call for a batch of small values) and its Staged to the store's handle.
// A negative size is an error wrapping backends.ErrInvalid, as is a sizes
// slice of another length than cells.
func (s *Store) Stage(ctx context.Context, cells []backends.Cell, sizes []int) error {
	if len(sizes) != len(cells) {
		return fmt.Errorf("%w: %d cells, %d sizes", backends.ErrInvalid, len(cells), len(sizes))
	}
	if len(cells) == 0 {
		return nil
	}
	if err := s.check(ctx); err != nil {
		return err
	}
	small := 0
	for _, n := range sizes {
		if n < 0 {
			return fmt.Errorf("%w: negative size %d", backends.ErrInvalid, n)
		}
		if n < smallObject {
			small += slot(n)
		}
	}
	handles := make([]stagedCell, len(cells))
	a := arena{s: s}
	for i, n := range sizes {
		handles[i].store = s
		cells[i].Body, handles[i].arena = a.take(n, small)
		if n < smallObject {
			small -= slot(n)
		}
		cells[i].Staged = &handles[i]
	}
	return nil
}

// Unstage releases the staged cells Write did not publish, their memory
// the store's to reuse; a later Write of one is an error. Published cells,
// cells staged elsewhere and cells never staged are ignored.
func (s *Store) Unstage(cells []backends.Cell) {
	for i := range cells {
		if h, ok := cells[i].Staged.(*stagedCell); ok && h.store == s && h.state.CompareAndSwap(staged, unstaged) {
			s.release(h.arena)
		}
	}
}
