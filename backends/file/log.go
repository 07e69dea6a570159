package file

import (
	"context"
	"slices"
	"time"

	"github.com/tqgo/tqgo/backends"
)

// log is a client's backends.Log and backends.LogCells: the partitions'
// logs in the engine's memory, every append a frame of its write-ahead
// log.
type log struct{ handle }

var _ backends.LogCells = (*log)(nil)

func (l *log) Append(ctx context.Context, partition string, from backends.Pos, recs []backends.Record) (backends.Tail, error) {
	return l.AppendCells(ctx, partition, from, nil, recs)
}

// AppendCells writes the cells and appends the records in one frame: a
// crash keeps both or neither.
func (l *log) AppendCells(ctx context.Context, partition string, from backends.Pos, cells []backends.Cell, recs []backends.Record) (backends.Tail, error) {
	if err := l.check(ctx); err != nil {
		return backends.Tail{}, err
	}
	if len(cells) == 0 && len(recs) == 0 {
		l.e.mu.RLock()
		defer l.e.mu.RUnlock()
		return l.e.st.logs[partition].after(from), nil
	}
	kind, size := byte(kindAppend), appendLen(partition, recs)
	if cells != nil {
		kind = kindCells
		size += cellsLen(cells)
	}
	b := l.e.frames.builder(kind, size)
	if cells != nil {
		b.cells(cells)
	}
	b.appendBody(partition, recs)
	o := &op{from: from}
	if err := l.submit(ctx, &b, o); err != nil {
		return backends.Tail{}, err
	}
	for i := range cells {
		cells[i].Tag = ""
	}
	return o.tail, nil
}

func (l *log) Read(ctx context.Context, partition string, from backends.Pos, wait time.Duration) (backends.Tail, error) {
	if err := l.check(ctx); err != nil {
		return backends.Tail{}, err
	}
	e := l.e
	var timeout <-chan time.Time
	for {
		e.mu.RLock()
		t := e.st.logs[partition].after(from)
		e.mu.RUnlock()
		if t.Restart || len(t.Entries) > 0 || wait <= 0 {
			return t, nil
		}
		e.mu.Lock()
		woken := e.wakes[partition]
		if woken == nil {
			woken = make(chan struct{})
			e.wakes[partition] = woken
		}
		// Look again, now that an append would close woken.
		t = e.st.logs[partition].after(from)
		e.mu.Unlock()
		if t.Restart || len(t.Entries) > 0 {
			return t, nil
		}
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
		case <-l.done:
			return backends.Tail{}, backends.ErrClosed
		}
	}
}

// ReadCells reads the cells and the log at one instant, under the
// engine's lock.
func (l *log) ReadCells(ctx context.Context, partition string, from backends.Pos, cells []backends.ReadCell) (backends.Tail, error) {
	if err := l.check(ctx); err != nil {
		return backends.Tail{}, err
	}
	e := l.e
	e.mu.RLock()
	vals, held := e.st.values(cells)
	t := e.st.logs[partition].after(from)
	e.mu.RUnlock()
	e.fill(cells, vals, held)
	return t, nil
}

// Compact writes a frame only when it would change the log now; the
// frame's replay decides alike.
func (l *log) Compact(ctx context.Context, partition string, at backends.Pos, snapshot []byte) error {
	if err := l.check(ctx); err != nil {
		return err
	}
	l.e.mu.RLock()
	does := l.e.st.logs[partition].compacts(at, snapshot)
	l.e.mu.RUnlock()
	if !does {
		return nil
	}
	b := newBuilder(kindCompact, strLen(len(partition))+17+strLen(len(snapshot)))
	b.str(partition)
	b.u64(at.N)
	b.u64(at.ID)
	b.bool(snapshot != nil)
	b.bytes(snapshot)
	return l.submit(ctx, &b, &op{})
}

func (l *log) Partitions(ctx context.Context) ([]string, error) {
	if err := l.check(ctx); err != nil {
		return nil, err
	}
	l.e.mu.RLock()
	names := make([]string, 0, len(l.e.st.logs))
	for p, pl := range l.e.st.logs {
		if !pl.Emptied {
			names = append(names, p)
		}
	}
	l.e.mu.RUnlock()
	slices.Sort(names)
	return names, nil
}
