// Package toykv is a toy engine for tests: a map behind a mutex that
// implements backends.KV, to be made a Store with backends.FromKV. It shows
// how little an engine needs, and lets the suites of backendtest and
// tqtest run over the FromKV path. It is safe for concurrent use.
package toykv

import (
	"bytes"
	"context"
	"sync"

	"github.com/tqgo/tqgo/backends"
)

type kv struct {
	mu     sync.RWMutex // guards m and closed
	m      map[string][]byte
	closed bool
}

// New returns an empty toy KV. Put copies each value; Get returns the
// stored copies, which Put replaces and never modifies.
func New() backends.KV { return &kv{m: map[string][]byte{}} }

// lock takes the lock (write or read) and reports whether the call may go
// on: the KV is open and ctx not done.
func (s *kv) lock(ctx context.Context, write bool) error {
	if write {
		s.mu.Lock()
	} else {
		s.mu.RLock()
	}
	if s.closed {
		return backends.ErrClosed
	}
	return ctx.Err()
}

func (s *kv) unlock(write bool) {
	if write {
		s.mu.Unlock()
	} else {
		s.mu.RUnlock()
	}
}

func (s *kv) Put(ctx context.Context, keys []string, values [][]byte) error {
	copies := make([][]byte, len(values)) // copied before the lock
	for i, v := range values {
		copies[i] = bytes.Clone(v)
		if copies[i] == nil {
			copies[i] = []byte{} // nil is missing to Get
		}
	}
	defer s.unlock(true)
	if err := s.lock(ctx, true); err != nil {
		return err
	}
	for i, k := range keys {
		s.m[k] = copies[i]
	}
	return nil
}

func (s *kv) Get(ctx context.Context, keys []string) ([][]byte, error) {
	defer s.unlock(false)
	if err := s.lock(ctx, false); err != nil {
		return nil, err
	}
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = s.m[k]
	}
	return out, nil
}

func (s *kv) Delete(ctx context.Context, keys []string) error {
	defer s.unlock(true)
	if err := s.lock(ctx, true); err != nil {
		return err
	}
	for _, k := range keys {
		delete(s.m, k)
	}
	return nil
}

func (s *kv) Close() error {
	defer s.unlock(true)
	_ = s.lock(context.Background(), true)
	s.closed, s.m = true, map[string][]byte{}
	return nil
}
