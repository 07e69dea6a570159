package memory

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tqgo/tqgo/backends"
)

// memLog is the metadata's log in process: a backends.Log whose one
// reader and writer is the MetaStore's replica (replica.Sole), which
// applies each entry as it appends it. It numbers entries, stamps them
// with the store's clock and hands out global indexes from one counter,
// as a shared engine's server does, and keeps of each partition's log
// only its end (the last entry's position): no one reads the log from
// before it, so no entry, and no snapshot, is kept. A Read from the end
// returns nothing; from elsewhere, the log's state is unknown to it, and
// it says so (an error) rather than hand out a wrong one. A Compact with
// no snapshot forgets the log (the partition is empty): it reads as no
// log, and begins again from 1.
type memLog struct {
	clock  func() time.Time
	closed atomic.Bool

	mu   sync.Mutex
	ends map[string]backends.Pos // each partition's last entry
	next uint64                  // the next global index
}

var _ backends.Log = (*memLog)(nil)

func newMemLog(clock func() time.Time) *memLog {
	return &memLog{clock: clock, ends: map[string]backends.Pos{}}
}

func (l *memLog) check(ctx context.Context) error {
	if l.closed.Load() {
		return backends.ErrClosed
	}
	return ctx.Err()
}

// tail is the log after from, given its end: nothing, or from no log.
// ok is false when the log holds from only as an entry before its end.
func tail(end, from backends.Pos, held bool) (t backends.Tail, ok bool) {
	switch {
	case held && from == end:
		return t, true
	case !held:
		// No log: the empty state, from the start.
		t.Restart = from != backends.Pos{}
		return t, true
	}
	return t, false
}

// Append implements backends.Log: the entries are the records as given
// (their Data is not kept).
func (l *memLog) Append(ctx context.Context, partition string, from backends.Pos, recs []backends.Record) (backends.Tail, error) {
	if err := l.check(ctx); err != nil {
		return backends.Tail{}, err
	}
	now := l.clock().UnixMicro()
	l.mu.Lock()
	defer l.mu.Unlock()
	end, held := l.ends[partition]
	t, ok := tail(end, from, held)
	if !ok {
		return backends.Tail{}, errBehind(partition, from, end)
	}
	if len(recs) == 0 {
		return t, nil
	}
	t.Entries = make([]backends.Entry, len(recs))
	for i, r := range recs {
		end = backends.Pos{N: end.N + 1, ID: r.ID}
		t.Entries[i] = backends.Entry{N: end.N, ID: r.ID, Time: now, Base: l.next}
		l.next += r.Indexes
	}
	l.ends[partition] = end
	return t, nil
}

// Read implements backends.Log. It never waits: every entry is appended
// by the one reader, which needs no watching.
func (l *memLog) Read(ctx context.Context, partition string, from backends.Pos, wait time.Duration) (backends.Tail, error) {
	if err := l.check(ctx); err != nil {
		return backends.Tail{}, err
	}
	l.mu.Lock()
	end, held := l.ends[partition]
	l.mu.Unlock()
	t, ok := tail(end, from, held)
	if !ok {
		return backends.Tail{}, errBehind(partition, from, end)
	}
	return t, nil
}

// Compact implements backends.Log: with no snapshot, at the end, the log
// is forgotten; a snapshot is not kept (no one reads from before the end).
func (l *memLog) Compact(ctx context.Context, partition string, at backends.Pos, snapshot []byte) error {
	if err := l.check(ctx); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if end, held := l.ends[partition]; held && snapshot == nil && end == at {
		delete(l.ends, partition)
	}
	return nil
}

// Partitions implements backends.Log.
func (l *memLog) Partitions(ctx context.Context) ([]string, error) {
	if err := l.check(ctx); err != nil {
		return nil, err
	}
	l.mu.Lock()
	names := make([]string, 0, len(l.ends))
	for name := range l.ends {
		names = append(names, name)
	}
	l.mu.Unlock()
	slices.Sort(names)
	return names, nil
}

// Close implements backends.Log.
func (l *memLog) Close() error {
	l.closed.Store(true)
	return nil
}

func errBehind(partition string, from, end backends.Pos) error {
	return invalidf("partition %q: the log is read from entry %d, before its end %d: it keeps no entries (one reader, which applied them)", partition, from.N, end.N)
}
