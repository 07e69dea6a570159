package replica_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest/toylog"
	"github.com/tqgo/tqgo/tq"
)

// slowLog makes every append take delay, and counts appends and the
// records each carried.
type slowLog struct {
	backends.Log
	delay time.Duration

	mu      sync.Mutex
	appends int
	most    int
}

func (l *slowLog) Append(ctx context.Context, partition string, from backends.Pos, recs []backends.Record) (backends.Tail, error) {
	l.mu.Lock()
	l.appends++
	l.most = max(l.most, len(recs))
	l.mu.Unlock()
	t := time.NewTimer(l.delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return backends.Tail{}, ctx.Err()
	}
	return l.Log.Append(ctx, partition, from, recs)
}

// Calls of one process that come while an append of their partition is in
// flight go together in the next append (group commit), each with its own
// outcome: 16 consumers claiming and acking take far fewer appends than
// calls, and every row is delivered once.
func TestGroupCommit(t *testing.T) {
	ctx := context.Background()
	srv := toylog.NewServer(nil)
	var sl *slowLog
	c := client(t, srv, func(l backends.Log) backends.Log { sl = &slowLog{Log: l, delay: 5 * time.Millisecond}; return sl })
	put(t, c, "p", keys(64, "k")...)
	sl.mu.Lock()
	sl.appends, sl.most = 0, 0
	sl.mu.Unlock()

	task, err := c.Task("p", "t", []string{"x"})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	calls := 0
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				l, err := task.Claim(ctx, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if l == nil || l.Len() == 0 {
					return
				}
				if err := l.Ack(ctx); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				calls += 2
				for _, k := range l.Keys() {
					seen[k]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != 64 {
		t.Fatalf("%d rows delivered, want 64", len(seen))
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("%s delivered %d times", k, n)
		}
	}
	sl.mu.Lock()
	appends, most := sl.appends, sl.most
	sl.mu.Unlock()
	if most < 2 || appends >= calls {
		t.Fatalf("%d calls took %d appends, at most %d records each: not grouped", calls, appends, most)
	}
	t.Logf("%d calls (claims and acks) in %d appends, up to %d records each", calls, appends, most)
}

// A call whose context ends while its records wait for the append in
// flight leaves the group: nothing of it is appended, and it says so with
// its context's error (not an unknown outcome).
func TestGroupLeftBeforeSent(t *testing.T) {
	ctx := context.Background()
	srv := toylog.NewServer(nil)
	var sl *slowLog
	c := client(t, srv, func(l backends.Log) backends.Log { sl = &slowLog{Log: l}; return sl })
	put(t, c, "p", keys(4, "k")...)
	task, err := c.Task("p", "t", []string{"x"})
	if err != nil {
		t.Fatal(err)
	}
	sl.mu.Lock()
	sl.delay = 300 * time.Millisecond
	sl.mu.Unlock()
	first := make(chan error, 1)
	go func() {
		l, err := task.Claim(ctx, 1) // in flight for 300ms
		if err == nil && l.Len() != 1 {
			err = errors.New("first claim leased nothing")
		}
		first <- err
	}()
	time.Sleep(50 * time.Millisecond)
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = task.Claim(cctx, 3)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, tq.ErrOutcomeUnknown) {
		t.Fatalf("claim cut off while grouped: %v, want its context's error alone", err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	sl.mu.Lock()
	sl.delay = 0
	sl.mu.Unlock()
	l, err := task.Claim(ctx, 3)
	if err != nil || l.Len() != 3 {
		t.Fatalf("the rows the cut-off claim named: %v, %v; want all 3 ready", l, err)
	}
}
