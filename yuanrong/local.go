package yuanrong

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// Local is an in-process DataSystem with the datasystem's semantics:
// created buffers are invisible until published, publishing never
// overwrites (ErrKeyExists), missing keys read as nil. It is what
// "yuanrong://" opens, and what the tests and benchmarks of this package
// run against. It is safe for concurrent use.
//
// Published bytes are never modified or reused, so a slice MGet returned
// stays valid after the key is deleted (the garbage collector frees it).
type Local struct {
	closed  atomic.Bool
	pending atomic.Int64 // buffers created and neither published nor released

	mu sync.RWMutex      // guards m
	m  map[string][]byte // published values
}

var _ DataSystem = (*Local)(nil)

// NewLocal returns an empty in-process datasystem.
func NewLocal() *Local {
	return &Local{m: make(map[string][]byte)}
}

// Buffer states.
const (
	stateCreated uint32 = iota
	statePublished
	stateReleased
)

// localBuffer is a Buffer of a Local.
type localBuffer struct {
	owner *Local
	key   string
	data  []byte
	state atomic.Uint32 // stateCreated → statePublished or stateReleased
}

func (b *localBuffer) Key() string  { return b.key }
func (b *localBuffer) Data() []byte { return b.data }

func (b *localBuffer) Release() {
	if b.state.CompareAndSwap(stateCreated, stateReleased) {
		b.owner.pending.Add(-1)
		b.data = nil
	}
}

func (l *Local) check(ctx context.Context) error {
	if l.closed.Load() {
		return ErrClosed
	}
	return ctx.Err()
}

// smallBuffer is the size under which created buffers of one call share an
// allocation: a batch of small cells costs one allocation, while a large
// buffer gets its own so that deleting a key frees its memory.
const smallBuffer = 4 << 10

// MCreate implements DataSystem.
func (l *Local) MCreate(ctx context.Context, keys []string, sizes []int) ([]Buffer, error) {
	if err := l.check(ctx); err != nil {
		return nil, err
	}
	if len(keys) != len(sizes) {
		return nil, invalidf("MCreate: %d keys, %d sizes", len(keys), len(sizes))
	}
	small := 0
	for i, n := range sizes {
		if keys[i] == "" {
			return nil, invalidf("MCreate: key %d is empty", i)
		}
		if n < 0 {
			return nil, &KeyError{Key: keys[i], Err: invalidf("MCreate: negative size %d", n)}
		}
		if n < smallBuffer {
			small += n
		}
	}
	arena := make([]byte, small)
	out := make([]Buffer, len(keys))
	bufs := make([]localBuffer, len(keys)) // one allocation for the handles
	for i, n := range sizes {
		b := &bufs[i]
		b.owner, b.key = l, keys[i]
		if n < smallBuffer {
			b.data, arena = arena[:n:n], arena[n:]
		} else {
			b.data = make([]byte, n)
		}
		out[i] = b
	}
	l.pending.Add(int64(len(keys)))
	return out, nil
}

// MPublish implements DataSystem.
func (l *Local) MPublish(ctx context.Context, bufs []Buffer) error {
	if err := l.check(ctx); err != nil {
		return err
	}
	lbs := make([]*localBuffer, len(bufs))
	for i, b := range bufs {
		lb, ok := b.(*localBuffer)
		if !ok || lb == nil || lb.owner != l {
			return invalidf("MPublish: buffer %d was not created by this datasystem", i)
		}
		if lb.state.Load() != stateCreated {
			return &KeyError{Key: lb.key, Err: invalidf("MPublish: buffer %d already published or released", i)}
		}
		lbs[i] = lb
	}
	var errs []error
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() { // Close ran since the check
		return ErrClosed
	}
	for _, b := range lbs {
		if _, exists := l.m[b.key]; exists {
			errs = append(errs, &KeyError{Key: b.key, Err: ErrKeyExists})
			continue
		}
		if !b.state.CompareAndSwap(stateCreated, statePublished) {
			// The same buffer twice in one call: its first copy won.
			errs = append(errs, &KeyError{Key: b.key, Err: ErrKeyExists})
			continue
		}
		l.m[b.key] = b.data
		l.pending.Add(-1)
	}
	return errors.Join(errs...)
}

// MGet implements DataSystem.
func (l *Local) MGet(ctx context.Context, keys []string) ([][]byte, error) {
	if err := l.check(ctx); err != nil {
		return nil, err
	}
	out := make([][]byte, len(keys))
	l.mu.RLock()
	defer l.mu.RUnlock()
	for i, k := range keys {
		out[i] = l.m[k]
	}
	return out, nil
}

// Delete implements DataSystem.
func (l *Local) Delete(ctx context.Context, keys []string) error {
	if err := l.check(ctx); err != nil {
		return err
	}
	if len(keys) == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		delete(l.m, k)
	}
	return nil
}

// Close drops every published value. Later calls return ErrClosed; buffers
// still created can be released.
func (l *Local) Close() error {
	l.closed.Store(true)
	l.mu.Lock()
	l.m = make(map[string][]byte)
	l.mu.Unlock()
	return nil
}

// Len is the number of published keys.
func (l *Local) Len() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.m)
}

// Pending is the number of buffers created and neither published nor
// released: after any call of a Client or Backend returns, it is 0 unless
// cells staged by Backend.Stage are neither written nor unstaged.
func (l *Local) Pending() int { return int(l.pending.Load()) }
