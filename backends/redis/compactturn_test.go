package redis_test

import (
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/internal/redistest"
)

// A partition's compaction turn goes to the first to ask, is renewed by
// its holder, refused to another while held, and free once it lapses; each
// partition has its own.
func TestCompactTurn(t *testing.T) {
	srv := redistest.Start(t)
	a, b := open(t, srv.URL()+"?prefix=turn"), open(t, srv.URL()+"?prefix=turn")
	ta, tb := a.Log().(backends.CompactTurns), b.Log().(backends.CompactTurns)
	ctx := t.Context()
	take := func(ct backends.CompactTurns, part, holder string, ttl time.Duration) bool {
		t.Helper()
		ok, err := ct.CompactTurn(ctx, part, holder, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	const ttl = 300 * time.Millisecond
	if !take(ta, "p", "A", ttl) {
		t.Fatal("a free turn refused")
	}
	if take(tb, "p", "B", ttl) {
		t.Fatal("a turn held by A given to B")
	}
	if !take(ta, "p", "A", ttl) {
		t.Fatal("A's renewal refused")
	}
	if !take(tb, "q", "B", ttl) {
		t.Fatal("another partition's free turn refused")
	}
	time.Sleep(ttl + 100*time.Millisecond)
	if !take(tb, "p", "B", ttl) {
		t.Fatal("a lapsed turn refused")
	}
	if _, err := ta.CompactTurn(ctx, "p", "", ttl); err == nil {
		t.Fatal("a turn for no holder: no error")
	}
}
