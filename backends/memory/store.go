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

// Store is the in-memory data backend. It is safe for concurrent use.
// Stored slices are never modified in place (a Put replaces the slice), so a
// reader may keep what Get returned.
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

func (s *Store) shard(key string) *shard {
	return &s.shards[maphash.String(s.seed, key)%numShards]
}

// firstPos is the positions of a one-key batch (read-only).
var firstPos = []int32{0}

// forShards calls f once for each shard holding any of keys, with their
// positions in keys (in order), so a batch takes each shard's lock once
// rather than once per key.
func (s *Store) forShards(keys []string, f func(sh *shard, pos []int32)) {
	if len(keys) == 1 {
		f(s.shard(keys[0]), firstPos)
		return
	}
	// A counting sort by shard: of[i] is key i's shard, pos the positions
	// grouped by shard, start[j] where shard j's group begins.
	scratch := make([]int32, 2*len(keys))
	of, pos := scratch[:len(keys)], scratch[len(keys):]
	var start [numShards + 1]int32
	for i, k := range keys {
		j := int32(maphash.String(s.seed, k) % numShards)
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

func (s *Store) check(ctx context.Context, keys []string, n int) error {
	if s.closed.Load() {
		return backends.ErrClosed
	}
	if n >= 0 && n != len(keys) {
		return fmt.Errorf("%w: %d keys, %d values", backends.ErrInvalid, len(keys), n)
	}
	return ctx.Err()
}

// put stores values under keys, keeping the slices.
func (s *Store) put(keys []string, values [][]byte) {
	s.forShards(keys, func(sh *shard, pos []int32) {
		sh.mu.Lock()
		defer sh.mu.Unlock()
		for _, i := range pos {
			v := values[i]
			if v == nil {
				v = []byte{} // nil means "missing": store an empty value
			}
			sh.m[keys[i]] = v
		}
	})
}

func cellKeys(cells []backends.Cell) []string {
	keys := make([]string, len(cells))
	for i := range cells {
		keys[i] = cells[i].Key
	}
	return keys
}

// Write implements backends.Store: a staged cell's Body is published as it
// is; other cells are copied into the store's memory (one arena for the
// small ones).
func (s *Store) Write(ctx context.Context, cells []backends.Cell) error {
	if err := s.check(ctx, nil, -1); err != nil {
		return err
	}
	keys := cellKeys(cells)
	values := make([][]byte, len(cells))
	var sizes []int
	var idx []int
	for i := range cells {
		c := &cells[i]
		if _, ok := c.Staged.(*stageHandle); ok {
			values[i] = c.Body
			continue
		}
		sizes = append(sizes, len(c.Head)+len(c.Body))
		idx = append(idx, i)
	}
	if len(idx) > 0 {
		bufs := s.alloc(sizes)
		for j, i := range idx {
			b := bufs[j]
			copy(b[copy(b, cells[i].Head):], cells[i].Body)
			values[i] = b
		}
	}
	s.put(keys, values)
	for i := range cells {
		cells[i].Tag = ""
		if h, ok := cells[i].Staged.(*stageHandle); ok {
			h.published = true
		}
	}
	return nil
}

// Read implements backends.Store: a value of the destination's length is
// copied into it; any other is returned as the store holds it (zero-copy;
// stored values are never modified).
func (s *Store) Read(ctx context.Context, cells []backends.ReadCell) error {
	if err := s.check(ctx, nil, -1); err != nil {
		return err
	}
	keys := make([]string, len(cells))
	for i := range cells {
		keys[i] = cells[i].Key
	}
	s.forShards(keys, func(sh *shard, pos []int32) {
		sh.mu.RLock()
		defer sh.mu.RUnlock()
		for _, i := range pos {
			backends.FillReadCell(&cells[i], sh.m[keys[i]])
		}
	})
	return nil
}

// Delete implements backends.Store.
func (s *Store) Delete(ctx context.Context, cells []backends.Cell) error {
	if err := s.check(ctx, nil, -1); err != nil {
		return err
	}
	keys := cellKeys(cells)
	s.forShards(keys, func(sh *shard, pos []int32) {
		sh.mu.Lock()
		defer sh.mu.Unlock()
		for _, i := range pos {
			delete(sh.m, keys[i])
		}
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

// smallObject is the size under which staged buffers share one allocation:
// a batch of small cells costs one allocation, while a large buffer gets its
// own so that clearing some rows frees their memory.
const smallObject = 4 << 10

// Stage implements backends.Stager.
func (s *Store) Stage(ctx context.Context, cells []backends.Cell, sizes []int) error {
	if err := s.check(ctx, nil, -1); err != nil {
		return err
	}
	if len(sizes) != len(cells) {
		return fmt.Errorf("%w: %d cells, %d sizes", backends.ErrInvalid, len(cells), len(sizes))
	}
	for _, n := range sizes {
		if n < 0 {
			return fmt.Errorf("%w: negative size %d", backends.ErrInvalid, n)
		}
	}
	bufs := s.alloc(sizes)
	for i := range cells {
		cells[i].Body = bufs[i]
		cells[i].Staged = &stageHandle{}
	}
	return nil
}

// Unstage implements backends.Stager: staged memory is the garbage
// collector's once dropped.
func (s *Store) Unstage(cells []backends.Cell) {
	for i := range cells {
		if _, ok := cells[i].Staged.(*stageHandle); ok {
			cells[i].Staged = nil
		}
	}
}

type stageHandle struct{ published bool }

// alloc returns buffers of sizes: the small ones in one arena.
func (s *Store) alloc(sizes []int) [][]byte {
	small := 0
	for _, n := range sizes {
		if n < smallObject {
			small += slot(n)
		}
	}
	arena := uninit.Bytes(small)
	bufs := make([][]byte, len(sizes))
	for i, n := range sizes {
		if n < smallObject {
			bufs[i], arena = arena[:n:n], arena[slot(n):]
		} else {
			bufs[i] = uninit.Bytes(n) // the caller fills every byte
		}
	}
	return bufs
}

// slot rounds a small buffer's share of the arena up to 16 bytes, so every
// buffer starts aligned like the codec's tensor payloads and a decoded
// tensor's View is zero-copy.
func slot(n int) int { return (n + 15) &^ 15 }
