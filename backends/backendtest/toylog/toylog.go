// Package toylog is a toy shared engine for tests: a Server value holds
// cells (a toykv map behind a mutex) and, per partition, a log, and hands
// out clients that reach it as processes reach a shared server. A client
// is a backends.Store (backends.FromKV) and a backends.Log (with
// backends.CompactTurns, a turn ending in real time); closing a
// client closes it alone. The server stamps entries with a clock the test
// gives, so a test can move time. A Read that waits blocks on a channel
// the next change to its partition closes.
package toylog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest/toykv"
	"github.com/tqgo/tqgo/backends/internal/partlog"
)

// Server is the shared state of every client: what a server process would
// hold. It is safe for concurrent use and needs no closing.
type Server struct {
	clock func() time.Time
	cells backends.KV // one toykv, which no client closes

	mu    sync.Mutex
	logs  map[string]*partlog.Log
	next  uint64                   // the next global index to hand out
	wakes map[string]chan struct{} // closed at the partition's next change (kept when a wait ends)
	// turns are the partitions' compaction turns (backends.CompactTurns):
	// their holders, each till its end (real time, not clock's).
	turns map[string]turn
}

type turn struct {
	holder string
	until  time.Time
}

// NewServer returns an empty server whose entries are stamped with
// clock() (nil: time.Now). Waits are measured in real time all the same.
func NewServer(clock func() time.Time) *Server {
	if clock == nil {
		clock = time.Now
	}
	return &Server{clock: clock, cells: toykv.New(), logs: map[string]*partlog.Log{}, next: 1, wakes: map[string]chan struct{}{},
		turns: map[string]turn{}}
}

// Engine is one client of a Server: its cells and its logs.
type Engine struct {
	Data backends.Store
	Log  backends.Log
}

// Close closes the client's Data and Log; the server and its other
// clients go on.
func (e Engine) Close() error { return errors.Join(e.Data.Close(), e.Log.Close()) }

// Engine returns a new client of s.
func (s *Server) Engine() Engine {
	return Engine{Data: backends.FromKV(&kvClient{kv: s.cells}), Log: &client{s: s, done: make(chan struct{})}}
}

// kvClient is a client's handle on the server's cells.
type kvClient struct {
	kv     backends.KV
	closed atomic.Bool
}

func (k *kvClient) check() error {
	if k.closed.Load() {
		return backends.ErrClosed
	}
	return nil
}

func (k *kvClient) Put(ctx context.Context, keys []string, values [][]byte) error {
	if err := k.check(); err != nil {
		return err
	}
	return k.kv.Put(ctx, keys, values)
}

func (k *kvClient) Get(ctx context.Context, keys []string) ([][]byte, error) {
	if err := k.check(); err != nil {
		return nil, err
	}
	return k.kv.Get(ctx, keys)
}

func (k *kvClient) Delete(ctx context.Context, keys []string) error {
	if err := k.check(); err != nil {
		return err
	}
	return k.kv.Delete(ctx, keys)
}

func (k *kvClient) Close() error { k.closed.Store(true); return nil }

// client is a client's handle on the server's logs.
type client struct {
	s    *Server
	once sync.Once
	done chan struct{} // closed by Close
}

var (
	_ backends.Log          = (*client)(nil)
	_ backends.CompactTurns = (*client)(nil)
)

func (c *client) check(ctx context.Context) error {
	select {
	case <-c.done:
		return backends.ErrClosed
	default:
		return ctx.Err()
	}
}

func (c *client) Append(ctx context.Context, partition string, from backends.Pos, recs []backends.Record) (backends.Tail, error) {
	if err := c.check(ctx); err != nil {
		return backends.Tail{}, err
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.logs[partition]
	if len(recs) > 0 {
		if l == nil {
			l = &partlog.Log{}
			s.logs[partition] = l
		}
		now := s.clock().UnixMicro()
		l.Emptied = false
		for _, r := range recs {
			l.Entries = append(l.Entries, backends.Entry{N: l.Last().N + 1, ID: r.ID, Time: now, Base: s.next, Data: bytes.Clone(r.Data)})
			s.next += r.Indexes
		}
		s.wake(partition)
	}
	t := l.After(from)
	for i := len(t.Entries) - len(recs); i < len(t.Entries); i++ {
		t.Entries[i].Data = nil // the caller has it
	}
	return t, nil
}

func (c *client) Read(ctx context.Context, partition string, from backends.Pos, wait time.Duration) (backends.Tail, error) {
	if err := c.check(ctx); err != nil {
		return backends.Tail{}, err
	}
	s := c.s
	var timeout <-chan time.Time
	for {
		s.mu.Lock()
		t := s.logs[partition].After(from)
		if t.Restart || len(t.Entries) > 0 || wait <= 0 {
			s.mu.Unlock()
			return t, nil
		}
		woken := s.wakes[partition]
		if woken == nil {
			woken = make(chan struct{})
			s.wakes[partition] = woken
		}
		s.mu.Unlock()
		if timeout == nil {
			timer := time.NewTimer(wait)
			defer timer.Stop()
			timeout = timer.C
		}
		select {
		case <-woken:
		case <-timeout:
			return backends.Tail{}, nil
		case <-ctx.Done():
			return backends.Tail{}, ctx.Err()
		case <-c.done:
			return backends.Tail{}, backends.ErrClosed
		}
	}
}

func (c *client) Compact(ctx context.Context, partition string, at backends.Pos, snapshot []byte) error {
	if err := c.check(ctx); err != nil {
		return err
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.logs[partition]; l.Compacts(at, snapshot) {
		l.Compact(at, bytes.Clone(snapshot))
	}
	return nil
}

func (c *client) Partitions(ctx context.Context) ([]string, error) {
	if err := c.check(ctx); err != nil {
		return nil, err
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	names := make([]string, 0, len(c.s.logs))
	for p, l := range c.s.logs {
		if !l.Emptied {
			names = append(names, p)
		}
	}
	slices.Sort(names)
	return names, nil
}

// CompactTurn implements backends.CompactTurns.
func (c *client) CompactTurn(ctx context.Context, partition, holder string, ttl time.Duration) (bool, error) {
	if err := c.check(ctx); err != nil {
		return false, err
	}
	if holder == "" || ttl < time.Millisecond {
		return false, fmt.Errorf("%w: compaction turn of %q: holder %q, ttl %v (at least 1ms)", backends.ErrInvalid, partition, holder, ttl)
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if t, held := s.turns[partition]; held && t.holder != holder && now.Before(t.until) {
		return false, nil
	}
	s.turns[partition] = turn{holder: holder, until: now.Add(ttl)}
	return true, nil
}

func (c *client) Close() error {
	c.once.Do(func() { close(c.done) })
	return nil
}

// wake wakes the readers waiting on partition. s.mu is held.
func (s *Server) wake(partition string) {
	if ch := s.wakes[partition]; ch != nil {
		close(ch)
		delete(s.wakes, partition)
	}
}
