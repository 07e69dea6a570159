package replica_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest/toylog"
	"github.com/tqgo/tqgo/internal/replica"
	"github.com/tqgo/tqgo/tq"
)

// countedLog counts the snapshots a process sends (Compact with one);
// turnedLog passes the log's compaction turns on, which countedLog hides.
type countedLog struct {
	backends.Log
	snaps *atomic.Int64
}

func (l countedLog) Compact(ctx context.Context, partition string, at backends.Pos, snapshot []byte) error {
	if snapshot != nil {
		l.snaps.Add(1)
	}
	return l.Log.Compact(ctx, partition, at, snapshot)
}

type turnedLog struct {
	countedLog
	backends.CompactTurns
}

// Processes that share a log with no server between them take turns to
// compact it: each counts the log's growth and reaches the count at the
// same entries, and without turns each would encode and send the same
// snapshot. With the log's turns, one sends them; the state a new process
// reads stays whole.
func TestCompactionTakesTurns(t *testing.T) {
	const procs, puts = 6, 30
	run := func(t *testing.T, turns bool) int64 {
		srv := toylog.NewServer(nil)
		var snaps atomic.Int64
		wrap := func(l backends.Log) backends.Log {
			c := countedLog{Log: l, snaps: &snaps}
			if turns {
				return turnedLog{countedLog: c, CompactTurns: l.(backends.CompactTurns)}
			}
			return c
		}
		clients := make([]*tq.Client, procs)
		metas := make([]*replica.Meta, procs)
		for i := range clients {
			e := srv.Engine()
			t.Cleanup(func() { _ = e.Close() })
			metas[i] = replica.New(wrap(e.Log), e.Data, replica.CompactAfter(2<<10))
			c, err := tq.New(backends.Engine{Data: e.Data, Meta: metas[i]})
			if err != nil {
				t.Fatal(err)
			}
			clients[i] = c
		}
		var wg sync.WaitGroup
		for i, c := range clients {
			wg.Go(func() {
				for range puts {
					// The same keys again: the log grows, the state does not.
					put(t, c, "p", keys(8, fmt.Sprintf("c%d-", i))...)
				}
			})
		}
		wg.Wait()
		// Every compaction started has ended once the Metas close; a new
		// process reads every row.
		for i, c := range clients {
			if err := errors.Join(c.Close(), metas[i].Close()); err != nil {
				t.Fatal(err)
			}
		}
		r := client(t, srv, nil)
		m, err := r.List(context.Background(), "p")
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Rows) != procs*8 {
			t.Fatalf("a new process lists %d rows, want %d", len(m.Rows), procs*8)
		}
		return snaps.Load()
	}
	alone := run(t, false)
	inTurn := run(t, true)
	t.Logf("snapshots sent: %d without turns, %d in turn", alone, inTurn)
	if inTurn < 1 || inTurn*2 > alone {
		t.Fatalf("%d snapshots sent in turn, %d without turns: want at least 1, and at most half", inTurn, alone)
	}
}

// slowTurns is a log whose compaction turns take a while to answer (a
// loaded Redis).
type slowTurns struct {
	backends.Log
	ct    backends.CompactTurns
	delay time.Duration
}

func (l slowTurns) CompactTurn(ctx context.Context, partition, holder string, ttl time.Duration) (bool, error) {
	time.Sleep(l.delay)
	return l.ct.CompactTurn(ctx, partition, holder, ttl)
}

// A partition that empties while this process waits for a compaction
// turn still has its log emptied, whether the turn is another's (refused)
// or free (taken, with nothing left to snapshot): the emptying that came
// due while the turn was being asked for is not passed over.
func TestEmptiedWhileTurnAsked(t *testing.T) {
	for _, held := range []bool{true, false} {
		t.Run(fmt.Sprintf("held by another %v", held), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			srv := toylog.NewServer(nil)
			if held {
				if ok, err := srv.Engine().Log.(backends.CompactTurns).CompactTurn(ctx, "gone", "another process", time.Minute); err != nil || !ok {
					t.Fatalf("the other process's turn: %v, %v", ok, err)
				}
			}
			a := client(t, srv, func(l backends.Log) backends.Log {
				return slowTurns{Log: l, ct: l.(backends.CompactTurns), delay: 1500 * time.Millisecond}
			}, replica.CompactAfter(1))
			put(t, a, "gone", "a", "b") // past the count: asks for the turn
			if err := a.ClearPartition(ctx, "gone"); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Reclaim(ctx, "gone", 0); err != nil {
				t.Fatal(err)
			}
			waitNoLogs(t, srv)
		})
	}
}
