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
// A stored value is never modified in place (Write replaces the slice), so
// the Value a Read returns stays as it was however the key is rewritten
// later. Write copies Head and Body into the store's memory, except a
// staged Body, which it keeps. Tags are always "".
type Store struct {
	seed   maphash.Seed
	closed atomic.Bool
	shards [numShards]shard
}

type shard struct {
	mu sync.RWMutex // guards m
	m  map[string][]byte
}

var (
	_ backends.Store  = (*Store)(nil)
	_ backends.Stager = (*Store)(nil)
)

// New returns an empty store.
func New() *Store {
	s := &Store{seed: maphash.MakeSeed()}
	for i := range s.shards {
		s.shards[i].m = make(map[string][]byte)
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
const (
	smallObject = 64 << 10
	arenaSize   = 1 << 20
)

// arena hands out slices of shared allocations.
type arena struct{ free []byte }

// take returns n bytes (capacity n) of unspecified contents, the caller
// to write every byte; need is the small bytes still to be taken, for
// sizing the next allocation.
func (a *arena) take(n, need int) []byte {
	switch {
	case n == 0:
		return empty
	case n >= smallObject:
		return uninit.Bytes(n)
	}
	if len(a.free) < slot(n) {
		a.free = uninit.Bytes(max(min(need, arenaSize), slot(n)))
	}
	b := a.free[:n:n]
	a.free = a.free[min(slot(n), len(a.free)):]
	return b
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
// backends.ErrInvalid, and the call then writes nothing.
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
			if len(c.Head) == 0 {
				continue
			}
		}
		if n := len(c.Head) + len(c.Body); n < smallObject {
			small += slot(n)
		}
	}
	// Copy outside the locks, then publish shard by shard.
	vals := make([][]byte, len(cells))
	var a arena
	for i := range cells {
		c := &cells[i]
		c.Tag = ""
		if c.Staged != nil && len(c.Head) == 0 {
			vals[i] = c.Body[:len(c.Body):len(c.Body)]
			if vals[i] == nil {
				vals[i] = empty
			}
			continue
		}
		n := len(c.Head) + len(c.Body)
		v := a.take(n, small)
		if n < smallObject {
			small -= slot(n)
		}
		copy(v[copy(v, c.Head):], c.Body)
		vals[i] = v
	}
	s.forShards(len(cells), func(i int) string { return cells[i].Key }, func(sh *shard, pos []int32) {
		sh.mu.Lock()
		for _, i := range pos {
			sh.m[cells[i].Key] = vals[i]
		}
		sh.mu.Unlock()
	})
	for i := range cells {
		if h, ok := cells[i].Staged.(*stagedCell); ok {
			h.state.Store(published)
		}
	}
	return nil
}

// Read fills each cell's destination with a copy of its value when the
// value has the destination's length, and otherwise sets Value to the
// stored value itself, which the caller must not modify.
func (s *Store) Read(ctx context.Context, cells []backends.ReadCell) error {
	if len(cells) == 0 {
		return nil
	}
	if err := s.check(ctx); err != nil {
		return err
	}
	// Look up under the read locks, keeping each value in its cell's
	// Value; copy after them (values are never modified in place).
	s.forShards(len(cells), func(i int) string { return cells[i].Key }, func(sh *shard, pos []int32) {
		sh.mu.RLock()
		for _, i := range pos {
			cells[i].Value = sh.m[cells[i].Key]
		}
		sh.mu.RUnlock()
	})
	for i := range cells {
		backends.FillReadCell(&cells[i], cells[i].Value)
	}
	return nil
}

// Delete removes the cells' keys; missing keys are ignored.
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
			delete(sh.m, cells[i].Key)
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
		sh.m = make(map[string][]byte)
		sh.mu.Unlock()
	}
	return nil
}

// The states of a staged cell.
const (
	staged uint32 = iota
	published
	unstaged
)

// stagedCell is the Staged handle of one cell: the cells of a Stage call
// share one allocation of handles.
type stagedCell struct {
	store *Store
	state atomic.Uint32
}

// Stage sets each cell's Body to sizes[i] bytes of the store's memory
// (values under 64 KiB share arenas, one allocation per call for a batch
// of small values) and its Staged to the store's handle. A negative size
// is an error wrapping backends.ErrInvalid, as is a sizes slice of another
// length than cells.
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
	var a arena
	for i, n := range sizes {
		handles[i].store = s
		cells[i].Body = a.take(n, small)
		if n < smallObject {
			small -= slot(n)
		}
		cells[i].Staged = &handles[i]
	}
	return nil
}

// Unstage releases the staged cells Write did not publish; a later Write
// of one is an error. Published cells, cells staged elsewhere and cells
// never staged are ignored.
func (s *Store) Unstage(cells []backends.Cell) {
	for i := range cells {
		if h, ok := cells[i].Staged.(*stagedCell); ok && h.store == s {
			h.state.CompareAndSwap(staged, unstaged)
		}
	}
}
