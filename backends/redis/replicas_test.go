package redis_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

// TestReplicasURL: replicas= and replica_timeout= set WithReplicas: on a
// server with no replica, a put waits replica_timeout (default
// redis.DefaultReplicaTimeout), which its error names, and fails as not
// replicated; replicas=0, or no replicas= at all, waits for nothing.
// Values that are not a count or a duration (empty ones too), a negative
// count, a count with a timeout that is not positive, and a parameter
// given twice, as any other, are backends.ErrInvalid, found before any
// connection is made.
func TestReplicasURL(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	for _, tc := range []struct {
		query string
		wait  string // "" for no wait: the put returns nil
	}{
		{"&replicas=1&replica_timeout=150ms", "within 150ms"},
		{"&replicas=1", "within " + redis.DefaultReplicaTimeout.String()},
		{"&replicas=1&replica_timeout=400us", "within 400µs"},
		{"&replicas=0&replica_timeout=5s", ""},
		{"&replica_timeout=5s", ""},
		{"", ""},
	} {
		c := openTQ(t, srv.URL()+"?prefix=u"+tc.query)
		err := c.BatchPut(ctx, "p", []string{"a"}, rollout([]string{"a"}, 1), nil)
		switch {
		case tc.wait == "" && err != nil:
			t.Errorf("%q: put: %v, want nil (no replicas to wait for)", tc.query, err)
		case tc.wait != "":
			// The Prepare waits first: its rows stay invisible.
			if !errors.Is(err, redis.ErrNotReplicated) {
				t.Fatalf("%q: put: %v, want an error matching redis.ErrNotReplicated", tc.query, err)
			}
			if !strings.Contains(err.Error(), tc.wait) {
				t.Errorf("%q: put: %v, want the error to say %q", tc.query, err, tc.wait)
			}
		}
	}
	for _, q := range []string{
		"replicas=x", "replicas=-1", "replicas=1.5", "replicas=1&replica_timeout=0s",
		"replicas=1&replica_timeout=-1s", "replica_timeout=soon", "replica_timeout=5",
		"replicas=", "replicas=1&replica_timeout=",
		"replicas=1&replicas=0", "replicas=0&replicas=1&replica_timeout=5s&replica_timeout=120ms",
	} {
		url := "redis://127.0.0.1:1/0?" + q
		if _, err := redis.OpenURL(ctx, url); !errors.Is(err, backends.ErrInvalid) {
			t.Errorf("OpenURL(%q): %v, want ErrInvalid", url, err)
		}
		if _, err := tq.Open(ctx, url, tq.WithRetry(tq.NoRetry)); !errors.Is(err, backends.ErrInvalid) {
			t.Errorf("tq.Open(%q): %v, want ErrInvalid", url, err)
		}
	}
	if _, err := redis.OpenURL(ctx, srv.URL(), redis.WithReplicas(1, 0)); !errors.Is(err, backends.ErrInvalid) {
		t.Errorf("WithReplicas(1, 0): %v, want ErrInvalid", err)
	}
}

// waitReplyDropper forwards TCP to a server and, once armed, closes the
// connection on which the next reply ":1" (a WAIT's: one replica
// acknowledged) would come, before that reply reaches the client.
type waitReplyDropper struct {
	*tcpProxy
	armed   atomic.Bool
	dropped atomic.Int32
}

func (p *waitReplyDropper) serve(client, server net.Conn) {
	go pump(server, client, nil)
	pump(client, server, func(chunk []byte) ([]byte, bool) {
		// A WAIT is the last command of its pipeline; the script's
		// reply before it (which ends in a bulk string or an array) may
		// come in the same chunk, and goes on.
		if bytes.HasSuffix(chunk, []byte(":1\r\n")) && p.armed.CompareAndSwap(true, false) {
			p.dropped.Add(1)
			return chunk[:len(chunk)-4], true
		}
		return chunk, false
	})
}

// TestReplicatedWriteResent: with replicas=1 and a replica that
// acknowledges, the reply of a write's WAIT is lost (the connection drops
// after the script's reply came), and go-redis sends script and WAIT
// again on a new connection. The second send finds the write's record
// and writes nothing, so its WAIT counts the replicas of nothing: the
// write must not return nil (nothing says the replica has it), but an
// error matching redis.ErrNotReplicated, and for a commit, a Delete and a
// DeletePartition (whose resend finds the log deleted by it) also
// backends.ErrOutcomeUnknown; a Prepare's rows stay invisible.
func TestReplicatedWriteResent(t *testing.T) {
	f := startFailover(t)
	p := &waitReplyDropper{}
	p.tcpProxy = startTCPProxy(t, f.master.Addr(), p.serve)
	m := metaOf(open(t, p.url("resent")+"&replicas=1&replica_timeout=5s"))
	ctx := t.Context()
	// Unarmed first: the scripts get loaded and the replica acknowledges.
	res, err := m.Prepare(ctx, "p", []string{"a", "b"}, []string{"f"}, nil)
	must(t, "Prepare", err)
	_, err = m.Commit(ctx, "p", fieldUpdate([]string{"a"}, res[:1], "f"))
	must(t, "Commit", err)
	for _, w := range []struct {
		what    string
		unknown bool
		write   func(context.Context) error
	}{
		{"Prepare", false, func(ctx context.Context) error {
			_, err := m.Prepare(ctx, "p", []string{"c"}, []string{"f"}, nil)
			return err
		}},
		{"Commit", true, func(ctx context.Context) error {
			_, err := m.Commit(ctx, "p", fieldUpdate([]string{"b"}, res[1:], "f"))
			return err
		}},
		{"Delete", true, func(ctx context.Context) error {
			_, err := m.Delete(ctx, "p", []string{"a"})
			return err
		}},
		{"DeletePartition", true, func(ctx context.Context) error {
			_, err := m.DeletePartition(ctx, "p")
			return err
		}},
	} {
		dropped := p.dropped.Load()
		p.armed.Store(true)
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := w.write(ctx)
		cancel()
		p.armed.Store(false)
		if p.dropped.Load() == dropped {
			t.Fatalf("%s: no WAIT reply was dropped: the test did not run the resend", w.what)
		}
		if !errors.Is(err, redis.ErrNotReplicated) || errors.Is(err, backends.ErrOutcomeUnknown) != w.unknown {
			t.Fatalf("%s whose WAIT reply was lost: %v, want an error matching redis.ErrNotReplicated, and backends.ErrOutcomeUnknown: %v", w.what, err, w.unknown)
		}
	}
}
