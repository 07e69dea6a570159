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
	_ backends.Backend   = (*Store)(nil)
	_ backends.Allocator = (*Store)(nil)
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

// Put stores values under keys. It keeps the value slices.
func (s *Store) Put(ctx context.Context, keys []string, values [][]byte) error {
	if err := s.check(ctx, keys, len(values)); err != nil {
		return err
	}
	s.forShards(keys, func(sh *shard, pos []int32) {
		sh.mu.Lock()
		defer sh.mu.Unlock()
		for _, i := range pos {
			v := values[i]
			if v == nil {
				v = []byte{} // nil means "missing" to Get: store an empty value
			}
			sh.m[keys[i]] = v
		}
	})
	return nil
}

// Get returns each key's value, nil for a missing key.
func (s *Store) Get(ctx context.Context, keys []string) ([][]byte, error) {
	if err := s.check(ctx, keys, -1); err != nil {
		return nil, err
	}
	out := make([][]byte, len(keys))
	s.forShards(keys, func(sh *shard, pos []int32) {
		sh.mu.RLock()
		defer sh.mu.RUnlock()
		for _, i := range pos {
			out[i] = sh.m[keys[i]]
		}
	})
	return out, nil
}

// Delete removes keys; missing keys are ignored.
func (s *Store) Delete(ctx context.Context, keys []string) error {
	if err := s.check(ctx, keys, -1); err != nil {
		return err
	}
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

// Allocate stages buffers of the given sizes in the store's memory.
func (s *Store) Allocate(ctx context.Context, keys []string, sizes []int) (backends.Staged, error) {
	if err := s.check(ctx, keys, len(sizes)); err != nil {
		return nil, err
	}
	small := 0
	for _, n := range sizes {
		if n < 0 {
			return nil, fmt.Errorf("%w: negative size %d", backends.ErrInvalid, n)
		}
		if n < smallObject {
			small += slot(n)
		}
	}
	arena := make([]byte, small)
	bufs := make([][]byte, len(sizes))
	for i, n := range sizes {
		if n < smallObject {
			bufs[i], arena = arena[:n:n], arena[slot(n):]
		} else {
			bufs[i] = uninit.Bytes(n) // the caller fills every byte (Allocator)
		}
	}
	return &staged{store: s, keys: keys, bufs: bufs}, nil
}

// slot rounds a small buffer's share of the arena up to 16 bytes, so every
// buffer starts aligned like the codec's tensor payloads and a decoded
// tensor's View is zero-copy.
func slot(n int) int { return (n + 15) &^ 15 }

// staged holds buffers not yet visible to readers.
type staged struct {
	store *Store
	keys  []string
	bufs  [][]byte
	done  bool
}

func (st *staged) Buffers() [][]byte { return st.bufs }

// Publish makes every buffer visible. Publishing is all in memory, so once
// the checks pass it cannot fail part-way.
func (st *staged) Publish(ctx context.Context) error {
	if st.done {
		return fmt.Errorf("%w: staged buffers already published or discarded", backends.ErrInvalid)
	}
	if err := st.store.Put(ctx, st.keys, st.bufs); err != nil {
		return err
	}
	st.done = true
	return nil
}

func (st *staged) Discard(context.Context) error {
	st.done, st.bufs = true, nil
	return nil
}
