package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

// The parameters of TestServeSIGTERMHandsOver.
const (
	stopPrefix = "stoptest"
	stopPart   = "p"
	stopTask   = "work"
	stopRows   = 2000
	// stopTTL is the servers' -ownership: long, so that waiting it out
	// would show. An owner renews a third of the way through it, so at
	// a SIGTERM its ownership has at least two thirds of it left.
	stopTTL = 10 * time.Second
	// stopLease is every claim's lease: longer than the test, so that no
	// row comes back by its lease ending.
	stopLease = 2 * time.Minute
	// stopExitLimit bounds the exit of the server after its SIGTERM: the
	// hand-over (one delete on Redis per partition), the end of its
	// Waits and of the calls in flight.
	stopExitLimit = 10 * time.Second
	// stopResumeAim bounds the time from the SIGTERM to the first claim
	// with rows called after the server exited (so served by the other
	// one): the exit (under -race 1 s longer: the race detector sleeps
	// that long before a process exits), the clients finding their
	// connection gone and calling the other server, which takes the
	// partition at once. That takes about 1 s with -race, under 2 s on a
	// loaded machine; were the partition not handed over, the ownership
	// left at the SIGTERM, at least two thirds of stopTTL (6.7 s), would
	// have to end first.
	stopResumeAim = 4 * time.Second
)

// A tq server stopped with SIGTERM, one of two on one Redis with a long
// ownership, hands its partition over at once: it exits 0, its owner key
// is gone with it, and a client naming both servers that goes on
// claiming gets rows from the other server well before the stopped one's
// ownership would have ended. Across the hand-over no client call fails
// or hangs, no acked row is delivered again, no row is held by two live
// leases, and a lease granted before the SIGTERM is kept (its ack after
// the hand-over succeeds: tqserve/PROTOCOL.md, "Ownership and takeover").
// Run with the owner first in the clients' URL (their calls reach it
// directly) and with the owner reached through MOVED.
func TestServeSIGTERMHandsOver(t *testing.T) {
	t.Run("owner named first", func(t *testing.T) { testSIGTERMHandsOver(t, false) })
	t.Run("owner reached through MOVED", func(t *testing.T) { testSIGTERMHandsOver(t, true) })
}

func testSIGTERMHandsOver(t *testing.T, moved bool) {
	rs := redistest.Start(t) // skips without redis-server, unless TQ_REQUIRE_REDIS=1
	engine := rs.URL() + "?prefix=" + stopPrefix
	addrs := [2]string{freePort(t), freePort(t)}
	var procs [2]*exec.Cmd
	for i, a := range addrs {
		procs[i] = serveChild(t, "-engine", engine, "-listen", a, "-ownership", stopTTL.String())
	}
	raw := goredis.NewClient(&goredis.Options{Addr: rs.Addr()})
	defer raw.Close()
	open := func(name, url string) *tq.Client {
		c, err := tq.Open(t.Context(), url, tq.Quiet(), tq.WithName(name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	url := "tq://" + addrs[0] + "," + addrs[1]

	// The first call to reach a server makes it the partition's owner:
	// the producer's reaches the first server of its URL.
	wantOwner := 0
	producerURL := url
	if moved {
		wantOwner = 1
		producerURL = "tq://" + addrs[1] + "," + addrs[0]
	}
	// Every client call is made by r.do, bounded by killCallLimit: one
	// that has not ended by then hung, and fails the test naming it.
	r := &killRun{t0: time.Now(), put: map[string]putOutcome{}, errs: map[string]int{}, inflight: map[int]*killCall{}}
	keys := make([]string, stopRows)
	vals := make([]int64, stopRows)
	for i := range keys {
		keys[i], vals[i] = fmt.Sprintf("r%05d", i), int64(i)
		r.put[keys[i]] = putOK
	}
	producer := open("producer", producerURL)
	if err := r.do(t.Context(), "put", "producer", func(ctx context.Context) error {
		return producer.BatchPut(ctx, stopPart, keys, tq.Batch{"x": tq.ValuesOf(vals)}, nil)
	}); err != nil {
		t.Fatalf("put: %v", err)
	}

	// A holder's lease, left unsettled across the SIGTERM, and a lease
	// acked before it.
	holder, err := open("holder", url).Task(stopPart, stopTask, []string{"x"}, tq.LeaseFor(stopLease))
	if err != nil {
		t.Fatal(err)
	}
	claim := func(ctx context.Context, task *tq.Task, who string) (*tq.Lease, *killDelivery, error) {
		var l *tq.Lease
		start := time.Now()
		err := r.do(ctx, "claim", who, func(ctx context.Context) error {
			var err error
			l, err = task.Claim(ctx, 4)
			return err
		})
		if err != nil || l.Len() == 0 {
			return l, nil, err
		}
		return l, r.delivered(who, l, start, time.Now()), nil
	}
	held, heldRec, err := claim(t.Context(), holder, "holder")
	if err != nil || heldRec == nil {
		t.Fatalf("the holder's claim: %v, %v", held, err)
	}
	l, rec, err := claim(t.Context(), holder, "holder")
	if err != nil || rec == nil {
		t.Fatalf("the holder's second claim: %v, %v", l, err)
	}
	r.ack(t.Context(), l, rec, "holder")

	// A consumer that claims and acks until told to stop.
	consumer, err := open("consumer", url).Task(stopPart, stopTask, []string{"x"}, tq.LeaseFor(stopLease))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stopConsumer := context.WithCancel(t.Context())
	defer stopConsumer()
	var consuming sync.WaitGroup
	consuming.Go(func() {
		for ctx.Err() == nil {
			l, rec, err := claim(ctx, consumer, "consumer")
			if err == nil && rec != nil {
				r.ack(ctx, l, rec, "consumer")
			}
			sleepCtx(ctx, 20*time.Millisecond)
		}
	})
	r.waitUntil(t, "20 rows acked", 10*time.Second, func() bool { return r.certainAcks() >= 20 })

	owner, left := partitionOwner(t, raw, stopPrefix, stopPart, addrs[:])
	if owner != wantOwner {
		t.Fatalf("the partition is owned by %s, want %s (the first server the producer's URL names)", addrs[owner], addrs[wantOwner])
	}
	if left < stopResumeAim+time.Second {
		t.Fatalf("the owner's ownership has %v left: too little for the test to tell a hand-over from its end", left)
	}
	sig := time.Now()
	if err := procs[owner].Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.kills = append(r.kills, sig)
	r.mu.Unlock()
	waitExit(t, procs[owner], stopExitLimit)
	exited := time.Now()
	t.Logf("SIGTERM to the owner %s (pid %d) at %v, its ownership with %v left; it exited %v after",
		addrs[owner], procs[owner].Process.Pid, sig.Sub(r.t0).Round(time.Millisecond), left, exited.Sub(sig).Round(time.Millisecond))

	// Its owner key went with it (deleted, or the other server's by now).
	key := ownerKey(stopPrefix, stopPart)
	switch v, err := raw.Get(t.Context(), key).Result(); {
	case errors.Is(err, goredis.Nil):
	case err != nil:
		t.Fatalf("reading the owner key %s: %v", key, err)
	case strings.HasPrefix(v, addrs[owner]+" "):
		pttl, _ := raw.PTTL(t.Context(), key).Result()
		t.Errorf("the owner key %s still names the stopped server once it exited (%q, %v left): it was not handed over", key, v, pttl)
	}

	r.waitUntil(t, "a claim with rows called after the stopped server exited", stopTTL+5*time.Second, func() bool {
		return !r.firstRowsAfter(exited).IsZero()
	})
	took := r.firstRowsAfter(exited).Sub(sig)
	t.Logf("the first claim with rows called after the SIGTERM returned %v after it; the first called after the exit, %v after it (aim %v)",
		r.firstRowsAfter(sig).Sub(sig).Round(time.Millisecond), took.Round(time.Millisecond), stopResumeAim)
	if took > stopResumeAim {
		t.Errorf("the other server served the partition only %v after the SIGTERM, want within %v: the ownership was waited out, not handed over", took.Round(time.Millisecond), stopResumeAim)
	}
	if owner2, _ := partitionOwner(t, raw, stopPrefix, stopPart, addrs[:]); owner2 == owner {
		t.Errorf("the owner key names the stopped server %s again", addrs[owner])
	}

	// The lease granted before the SIGTERM is kept: its ack succeeds.
	acked := make(chan error, 1)
	go func() {
		err := r.do(t.Context(), "ack", "holder", func(ctx context.Context) error { return held.Ack(ctx) })
		if err == nil {
			r.acked(heldRec, heldRec.keys, time.Now(), true)
		}
		acked <- err
	}()
	var ackErr error
	r.waitUntil(t, "the ack of the lease held across the hand-over", killCallLimit+5*time.Second, func() bool {
		select {
		case ackErr = <-acked:
			return true
		default:
			return false
		}
	})
	if ackErr != nil {
		t.Errorf("the ack, after the hand-over, of a lease granted before the SIGTERM (until %v): %v; want nil (leases keep their deadlines across a takeover)",
			held.Until().Sub(r.t0).Round(time.Millisecond), ackErr)
	}

	// The consumer goes on a little, then stops.
	time.Sleep(500 * time.Millisecond)
	stopConsumer()
	done := make(chan struct{})
	go func() { consuming.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("the consumer still running 10s after its context ended: calls in flight:\n%s", r.inflightList())
	}
	r.mu.Lock()
	errs := len(r.errs)
	r.mu.Unlock()
	if errs > 0 {
		t.Errorf("calls failed across a SIGTERM hand-over, which the clients should not see: %s", r.summary())
	}
	r.verify(t, nil)
	t.Logf("%v in all; %s", time.Since(r.t0).Round(time.Millisecond), r.summary())
}
