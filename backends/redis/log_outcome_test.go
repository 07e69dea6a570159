package redis_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/internal/redisserver"
	"github.com/tqgo/tqgo/internal/redistest"
)

// The outcome of an Append (or AppendCells) whose request or reply a
// fault lost, read afterwards by a client the fault did not touch: an
// error matching backends.ErrOutcomeUnknown may have appended, any other
// error appended nothing, and no error appended exactly once.

// logHolds counts the entries of partition p holding record id.
func logHolds(t *testing.T, l backends.Log, p string, id uint64) int {
	t.Helper()
	tail := readOK(t, l, p, backends.Pos{})
	n := 0
	for _, e := range tail.Entries {
		if e.ID == id {
			n++
		}
	}
	return n
}

// TestLogOutcomes: faults on a standalone server, through go-redis and on
// the direct connections.
func TestLogOutcomes(t *testing.T) {
	srv := redistest.Start(t)
	p := startRequestProxy(t, srv.Addr())
	reader, _ := openLog(t, srv.URL()+"?prefix=out")
	// Load the scripts: the faulted request is an EVALSHA that runs.
	appendOK(t, reader, "warm", backends.Pos{}, rec("w", 0))
	readOK(t, reader, "warm", backends.Pos{})
	for _, c := range []struct {
		name  string
		query string // the faulted client's parameters
		kind  faultKind
		cells bool // AppendCells (on a direct connection)
		reuse bool // the connection the fault hits was used before
		// want: "unknown" (ErrOutcomeUnknown), "ok" (nil), with the
		// record applied or not.
		want    string
		applied bool
		resent  bool // the request went out twice
	}{
		// Through go-redis (direct=false).
		{name: "reply lost", query: "direct=false&max_retries=-1", kind: faultLoseReply, want: "unknown", applied: true},
		{name: "request dropped", query: "direct=false&max_retries=-1", kind: faultDrop, want: "unknown", applied: false},
		// go-redis resends a request whose reply it lost: the append
		// script finds its records and appends nothing.
		{name: "reply lost resent", query: "direct=false", kind: faultLoseReply, want: "ok", applied: true, resent: true},
		{name: "request dropped resent", query: "direct=false", kind: faultDrop, want: "ok", applied: true, resent: true},
		// On the direct connections, as AppendCells below.
		{name: "direct reply lost", kind: faultLoseReply, want: "unknown", applied: true},
		{name: "direct request dropped", kind: faultDrop, want: "unknown", applied: false},
		{name: "direct reply lost reused", reuse: true, kind: faultLoseReply, want: "ok", applied: true, resent: true},
		{name: "direct request dropped reused", reuse: true, kind: faultDrop, want: "ok", applied: true, resent: true},
		{name: "cells reply lost", cells: true, kind: faultLoseReply, want: "unknown", applied: true},
		{name: "cells request dropped", cells: true, kind: faultDrop, want: "unknown", applied: false},
		// The direct connections resend a request that failed on
		// a connection that sat idle, before any reply came.
		{name: "cells reply lost reused", cells: true, reuse: true, kind: faultLoseReply, want: "ok", applied: true, resent: true},
		{name: "cells request dropped reused", cells: true, reuse: true, kind: faultDrop, want: "ok", applied: true, resent: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, s := openLog(t, p.url("prefix=out&"+c.query))
			ctx := t.Context()
			if c.reuse {
				_, err := l.(backends.LogCells).AppendCells(ctx, "other", backends.Pos{}, []backends.Cell{{Key: "w", Body: []byte("w")}}, []backends.Record{rec("w", 0)})
				if err != nil {
					t.Fatal(err)
				}
			}
			part := "p-" + c.name
			r := rec("the record", 2)
			fired := p.arm(nil, plannedFault{nth: 1, kind: c.kind})
			var err error
			if c.cells {
				_, err = l.(backends.LogCells).AppendCells(ctx, part, backends.Pos{}, []backends.Cell{{Key: "c-" + c.name, Body: []byte("v")}}, []backends.Record{r})
			} else {
				_, err = l.Append(ctx, part, backends.Pos{}, []backends.Record{r})
			}
			select {
			case <-fired[0]:
			case <-time.After(5 * time.Second):
				t.Fatalf("the fault never fired; requests %q", p.requestsSeen())
			}
			seen := p.requestsSeen()
			t.Logf("%s: %v; requests %q", c.name, err, seen)
			switch c.want {
			case "unknown":
				if !errors.Is(err, backends.ErrOutcomeUnknown) {
					t.Fatalf("error %v, want one matching ErrOutcomeUnknown", err)
				}
			case "ok":
				if err != nil {
					t.Fatalf("error %v, want nil", err)
				}
			}
			n := logHolds(t, reader, part, r.ID)
			if want := map[bool]int{true: 1, false: 0}[c.applied]; n != want {
				t.Fatalf("the log holds the record %d times, want %d", n, want)
			}
			if sent := len(seen); c.resent && sent != 2 || !c.resent && sent != 1 {
				t.Errorf("%d requests went out, want resent=%v", sent, c.resent)
			}
			if c.cells && c.applied {
				v, err := getVals(ctx, s, []string{"c-" + c.name})
				if err != nil || string(v[0]) != "v" {
					t.Fatalf("the record applied without its cell: %q, %v", v, err)
				}
			}
		})
	}
}

// TestLogRefused: a request that never left (nothing listens) is a
// definite error.
func TestLogRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	rc := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
	defer rc.Close()
	s, err := redis.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	defer s.Log().Close()
	l := s.Log()
	defer l.Close()
	for _, cells := range []bool{false, true} {
		var err error
		if cells {
			_, err = l.(backends.LogCells).AppendCells(t.Context(), "p", backends.Pos{}, []backends.Cell{{Key: "k", Body: []byte("v")}}, []backends.Record{rec("a", 0)})
		} else {
			_, err = l.Append(t.Context(), "p", backends.Pos{}, []backends.Record{rec("a", 0)})
		}
		if err == nil || errors.Is(err, backends.ErrOutcomeUnknown) || !errors.Is(err, redis.ErrUnavailable) {
			t.Errorf("cells %v: Append with nothing listening: %v, want a definite ErrUnavailable", cells, err)
		}
	}
}

// TestLogReplicas: with WithReplicas, an Append waits for the replicas;
// too few make an error matching ErrNotReplicated and
// ErrOutcomeUnknown, the records appended on the master; and an Append
// found applied by a resend (its first WAIT reply lost) cannot say it
// was replicated.
func TestLogReplicas(t *testing.T) {
	master := redistest.Start(t)
	ctx := t.Context()
	for _, cells := range []bool{false, true} {
		l, _ := openLog(t, master.URL()+"?prefix=norep&replicas=1&replica_timeout=100ms")
		r := rec("a", 1)
		var err error
		if cells {
			_, err = l.(backends.LogCells).AppendCells(ctx, "p", backends.Pos{}, []backends.Cell{{Key: "k", Body: []byte("v")}}, []backends.Record{r})
		} else {
			_, err = l.Append(ctx, "p", backends.Pos{}, []backends.Record{r})
		}
		if !errors.Is(err, redis.ErrNotReplicated) || !errors.Is(err, backends.ErrOutcomeUnknown) {
			t.Fatalf("cells %v: Append with no replica: %v, want ErrNotReplicated and ErrOutcomeUnknown", cells, err)
		}
		if n := logHolds(t, l, "p", r.ID); n != 1 {
			t.Fatalf("cells %v: the master holds the record %d times", cells, n)
		}
	}
	// On the cluster path the index reservation waits first: too few
	// replicas fail the Append before anything is appended.
	l, _ := openLog(t, master.URL()+"?prefix=norepc&replicas=1&replica_timeout=100ms", redis.WithClusterSafe())
	r := rec("a", 1)
	if _, err := l.Append(ctx, "p", backends.Pos{}, []backends.Record{r}); !errors.Is(err, redis.ErrNotReplicated) || errors.Is(err, backends.ErrOutcomeUnknown) {
		t.Fatalf("cluster path, no replica: %v, want a definite ErrNotReplicated", err)
	}
	if n := logHolds(t, l, "p", r.ID); n != 0 {
		t.Fatalf("cluster path: the record was appended although its indexes were not replicated")
	}

	replica := redistest.Start(t)
	if err := replica.ReplicaOf(ctx, master.Addr()); err != nil {
		t.Fatal(err)
	}
	if err := redisserver.WaitReplicated(ctx, master, replica); err != nil {
		t.Fatal(err)
	}
	p := startRequestProxy(t, master.Addr())
	for _, cells := range []bool{false, true} {
		l, _ := openLog(t, p.url("prefix=rep&replicas=1&replica_timeout=5s"))
		r := rec("b", 1)
		appendIt := func() error {
			var err error
			if cells {
				_, err = l.(backends.LogCells).AppendCells(ctx, "p", backends.Pos{}, []backends.Cell{{Key: "k", Body: []byte("v")}}, []backends.Record{r})
			} else {
				_, err = l.Append(ctx, "p", backends.Pos{}, []backends.Record{r})
			}
			return err
		}
		if err := appendIt(); err != nil {
			t.Fatalf("cells %v: Append with its replica: %v", cells, err)
		}
		on := goredis.NewClient(&goredis.Options{Addr: replica.Addr()})
		n, err := on.XLen(ctx, logKey("rep", "p", "log")).Result()
		on.Close()
		if err != nil || n == 0 {
			t.Fatalf("cells %v: the replica's stream holds %d entries (%v)", cells, n, err)
		}
		if cells {
			continue // the direct connection's resend is tested by TestLogOutcomes
		}
		// The reply lost, go-redis resends: the script finds the records.
		r = rec("c", 0)
		p.arm(nil, plannedFault{nth: 1, kind: faultLoseReply})
		err = appendIt()
		if !errors.Is(err, redis.ErrNotReplicated) || !errors.Is(err, backends.ErrOutcomeUnknown) {
			t.Fatalf("Append resent after its reply was lost: %v, want ErrNotReplicated and ErrOutcomeUnknown", err)
		}
		if n := logHolds(t, l, "p", r.ID); n != 1 {
			t.Fatalf("the record appended %d times", n)
		}
	}
}

// TestLogOutcomesCluster: a reply lost on a Cluster node.
func TestLogOutcomesCluster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a Cluster")
	}
	c := redistest.StartCluster(t)
	p := startRequestProxy(t, c.Addrs()...)
	reader, _ := openLog(t, c.URL()+"?prefix=outc")
	ctx := t.Context()
	for _, kind := range []faultKind{faultLoseReply, faultDrop} {
		part := "p-" + kind.String()
		// Load the scripts on the partition's node.
		appendOK(t, reader, part+"-warm", backends.Pos{}, rec("w", 0))
		readOK(t, reader, part, backends.Pos{})
		rc := goredis.NewClusterClient(&goredis.ClusterOptions{
			Addrs:        c.Addrs(),
			MaxRetries:   -1,
			MaxRedirects: -1, // a Cluster client resends on another attempt too
			Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, p.frontOf(addr))
			},
		})
		s, err := redis.New(rc, redis.WithPrefix("outc"))
		if err != nil {
			t.Fatal(err)
		}
		l := s.Log()
		// Register the partition first, so that the faulted request is
		// the append script.
		r0 := rec("first", 0)
		tail := appendOK(t, l, part, backends.Pos{}, r0)
		r := rec("the record", 3)
		p.arm(nil, plannedFault{nth: 1, kind: kind})
		_, err = l.Append(ctx, part, tail.End(backends.Pos{}), []backends.Record{r})
		t.Logf("%s: %v; requests %q", kind, err, p.requestsSeen())
		if !errors.Is(err, backends.ErrOutcomeUnknown) {
			t.Errorf("%s: %v, want ErrOutcomeUnknown", kind, err)
		}
		want := 0
		if kind == faultLoseReply {
			want = 1
		}
		if n := logHolds(t, reader, part, r.ID); n != want {
			t.Errorf("%s: the record is in the log %d times, want %d", kind, n, want)
		}
		l.Close()
		s.Close()
		s.Log().Close()
		rc.Close()
	}
}
