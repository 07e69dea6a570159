package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

// The parameters of TestServeKillOwnerUnderLoad.
const (
	killPrefix = "killtest"
	killPart   = "p"
	killTask   = "work"
	killTTL    = time.Second     // the servers' -ownership
	killLease  = 2 * time.Second // the consumers' lease: longer than a takeover mostly takes
	// killCallLimit bounds every client call: one that has not ended by
	// then hung. A Wait too: rows come while the producer runs, and the
	// drain after it ends well within this (killDrainLimit).
	killCallLimit = 20 * time.Second
	// killClockTol is the tolerance of comparing lease times: the servers
	// and Redis are on this host, and the client maps their times to its
	// own by a skew measured over a round trip.
	killClockTol = 250 * time.Millisecond
	// killResumeAim bounds the time from a kill to the first claim with
	// rows called after it: the dead owner's ownership ends, the survivor
	// takes the partition, the clients' retries find it.
	killResumeAim = killTTL + 4*time.Second
	// killDrainLimit bounds the drain once the producer stopped: rows
	// whose leases the kills cut come back after killLease.
	killDrainLimit = 15 * time.Second
)

// Kill -9 of a partition's owner during puts, claims, acks and waits, with
// two servers on one Redis: nothing acknowledged is lost (every row whose
// put succeeded ends acked), nothing acknowledged comes back, no row is
// held by two live leases, every client call ends, and the job goes on
// (claims get rows again soon after each kill). The owner is killed, then
// started again on its address, and the other server, owner by then, is
// killed too.
func TestServeKillOwnerUnderLoad(t *testing.T) {
	rs := redistest.Start(t) // skips without redis-server, unless TQ_REQUIRE_REDIS=1
	engine := rs.URL() + "?prefix=" + killPrefix
	addrs := [2]string{freePort(t), freePort(t)}
	serverArgs := func(addr string) []string {
		return []string{"-engine", engine, "-listen", addr, "-ownership", killTTL.String()}
	}
	var procs [2]*exec.Cmd
	for i, a := range addrs {
		procs[i] = serveChild(t, serverArgs(a)...)
	}
	raw := goredis.NewClient(&goredis.Options{Addr: rs.Addr()})
	defer raw.Close()
	url := "tq://" + addrs[0] + "," + addrs[1]
	open := func(name string) *tq.Client {
		c, err := tq.Open(t.Context(), url, tq.Quiet(), tq.WithName(name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}

	r := &killRun{t0: time.Now(), put: map[string]putOutcome{}, errs: map[string]int{}, inflight: map[int]*killCall{}}
	producer := open("producer")
	checker := open("checker")
	check, err := checker.Task(killPart, killTask, []string{"x"})
	if err != nil {
		t.Fatal(err)
	}

	// The producer puts three rows at a time until told to stop; the
	// consumers consume until ctx ends.
	ctx, stopConsumers := context.WithCancel(t.Context())
	defer stopConsumers()
	var stopProducer atomic.Bool
	var producing, consuming sync.WaitGroup
	producing.Go(func() { r.produce(ctx, producer, &stopProducer) })
	kinds := []consumerKind{waitAck, waitAcking, claimAcking}
	for i, kind := range kinds {
		name := fmt.Sprintf("c%d-%s", i, kind)
		task, err := open(name).Task(killPart, killTask, []string{"x"}, tq.LeaseFor(killLease))
		if err != nil {
			t.Fatal(err)
		}
		consuming.Go(func() { r.consume(ctx, task, name, kind) })
	}

	// Steady state first: some rows acked.
	r.waitUntil(t, "50 rows acked before the first kill", 10*time.Second, func() bool { return r.certainAcks() >= 50 })
	time.Sleep(500 * time.Millisecond)

	// killOwner kills the partition's owner, and returns which of the
	// servers it was once the job went on.
	killOwner := func(round int) int {
		t.Helper()
		// Anywhere in the servers' renewal period (they renew every
		// TTL/3): the ownership left at the kill depends on it.
		time.Sleep(rand.N(killTTL / 3))
		owner, pttl := partitionOwner(t, raw, killPrefix, killPart, addrs[:])
		killed := time.Now()
		if err := procs[owner].Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = procs[owner].Wait()
		r.mu.Lock()
		r.kills = append(r.kills, killed)
		r.mu.Unlock()
		t.Logf("kill %d: SIGKILL of the owner %s (pid %d) at %v, its ownership with %v left",
			round, addrs[owner], procs[owner].Process.Pid, killed.Sub(r.t0).Round(time.Millisecond), pttl)
		r.waitUntil(t, fmt.Sprintf("a claim with rows after kill %d", round), killResumeAim+5*time.Second, func() bool {
			return !r.firstRowsAfter(killed).IsZero()
		})
		took := r.firstRowsAfter(killed).Sub(killed)
		t.Logf("kill %d: the first claim with rows called after the kill returned %v after it (aim %v)", round, took.Round(time.Millisecond), killResumeAim)
		if took > killResumeAim {
			t.Errorf("kill %d: the job went on only %v after the kill, want within %v", round, took.Round(time.Millisecond), killResumeAim)
		}
		return owner
	}
	first := killOwner(1)
	time.Sleep(500 * time.Millisecond)
	procs[first] = serveChild(t, serverArgs(addrs[first])...) // back on its address
	t.Logf("restarted %s (pid %d) at %v", addrs[first], procs[first].Process.Pid, time.Since(r.t0).Round(time.Millisecond))
	time.Sleep(time.Second)
	if second := killOwner(2); second == first {
		t.Logf("kill 2: the restarted server owned the partition again")
	}
	time.Sleep(time.Second)

	// The producer stops; the consumers drain the partition.
	stopProducer.Store(true)
	r.waitUntil(t, "the producer to stop", killCallLimit+5*time.Second, func() bool { return r.producerDone.Load() })
	producing.Wait()
	drainStart := time.Now()
	var st tq.TaskStatus
	drained := r.poll(t, "the partition drained", killDrainLimit, func() bool {
		err := r.do(t.Context(), "status", "checker", func(ctx context.Context) error {
			var err error
			st, err = check.Status(ctx)
			return err
		})
		return err == nil && st.Ready == 0 && st.Waiting == 0 && st.Leased == 0 && st.Acked >= r.countPut(putOK)
	})
	if drained {
		t.Logf("drained %v after the producer stopped: %+v", time.Since(drainStart).Round(time.Millisecond), st)
	} else {
		t.Errorf("the partition not drained %v after the producer stopped: %+v (%s); in flight:\n%s", killDrainLimit, st, r.summary(), r.inflightList())
	}
	stopConsumers()
	done := make(chan struct{})
	go func() { consuming.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("consumers still running 10s after their context ended: calls in flight:\n%s", r.inflightList())
	}

	// Nothing whose put succeeded is lost: acked, by the server's word.
	var okKeys []string
	r.mu.Lock()
	for k, o := range r.put {
		if o == putOK {
			okKeys = append(okKeys, k)
		}
	}
	r.mu.Unlock()
	sort.Strings(okKeys)
	var cons []tq.KeyConsumption
	if err := r.do(t.Context(), "consumption", "checker", func(ctx context.Context) error {
		var err error
		cons, err = checker.Consumption(ctx, killPart)
		return err
	}); err != nil {
		t.Fatalf("consumption of the partition: %v", err)
	}
	state := map[string]tq.KeyState{}
	for _, kc := range cons {
		state[kc.Key] = kc.Tasks[killTask]
	}
	for _, k := range okKeys {
		switch s, ok := state[k]; {
		case !ok:
			t.Errorf("row %s, put with success, is not in the partition", k)
		case s.State != tq.StateAcked:
			t.Errorf("row %s, put with success, is %s for the task at the end (%+v), want acked", k, s.State, s)
		}
	}
	r.verify(t, okKeys)
	t.Logf("%v in all; %s", time.Since(r.t0).Round(time.Millisecond), r.summary())
}

type consumerKind int

const (
	waitAck     consumerKind = iota // Wait, work, Lease.Ack (a Nack now and then, or no settle at all)
	waitAcking                      // Wait acking the lease before, work
	claimAcking                     // Claim acking the lease before, work
)

func (k consumerKind) String() string {
	return [...]string{"wait-ack", "wait-acking", "claim-acking"}[k]
}

type putOutcome int

const (
	putPending putOutcome = iota // called, not returned
	putOK                        // returned nil: the rows must be consumed
	putUnknown                   // ErrOutcomeUnknown: the rows may exist
	putFailed                    // any other error: nothing of it visible
)

// killRun is what the clients of TestServeKillOwnerUnderLoad (and of
// TestServeSIGTERMHandsOver) saw.
type killRun struct {
	t0           time.Time
	producerDone atomic.Bool

	mu       sync.Mutex
	put      map[string]putOutcome
	leases   []*killDelivery
	kills    []time.Time
	errs     map[string]int // allowed failures by "op: class"
	failures []string       // what breaks the rules, as found
	inflight map[int]*killCall
	nextCall int
}

// killDelivery is one delivery: a lease a claim or wait returned.
type killDelivery struct {
	consumer   string
	keys       []string
	deliveries []int
	start, end time.Time // the call that returned it
	granted    time.Time
	until      time.Time
	acked      map[string]time.Time // keys certainly acked, and when the ack returned
	ackUnsure  bool                 // an ack was tried whose outcome is unknown
	nacked     time.Time            // the start of a Nack of the whole lease (any outcome)
}

type killCall struct {
	desc  string
	start time.Time
}

func (r *killRun) failf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, fmt.Sprintf("%v: ", time.Since(r.t0).Round(time.Millisecond))+fmt.Sprintf(format, args...))
}

// do runs one client call of op by who, bounded by killCallLimit, and
// sorts its error: one the tq API allows of a call meeting a dead server
// is counted, any other recorded as a failure, as is a call that did not
// end within the limit. A call that ends with parent is not judged.
func (r *killRun) do(parent context.Context, op, who string, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(parent, killCallLimit)
	defer cancel()
	r.mu.Lock()
	id := r.nextCall
	r.nextCall++
	start := time.Now()
	r.inflight[id] = &killCall{desc: op + " by " + who, start: start}
	r.mu.Unlock()
	err := f(ctx)
	r.mu.Lock()
	delete(r.inflight, id)
	r.mu.Unlock()
	switch {
	case err == nil || parent.Err() != nil:
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		r.failf("%s by %s called at %v did not end within %v (hung): %v", op, who, start.Sub(r.t0).Round(time.Millisecond), killCallLimit, err)
	default:
		class := ""
		switch {
		case errors.Is(err, tq.ErrOutcomeUnknown):
			class = "outcome unknown"
		case errors.Is(err, tq.ErrUnavailable):
			class = "unavailable"
		case (op == "ack" || op == "nack") && errors.Is(err, tq.ErrLeaseLost):
			class = "lease lost"
		}
		if class == "" {
			r.failf("%s by %s called at %v: an error the API does not allow there: %v", op, who, start.Sub(r.t0).Round(time.Millisecond), err)
			break
		}
		r.mu.Lock()
		r.errs[op+": "+class]++
		r.mu.Unlock()
	}
	return err
}

func (r *killRun) inflightList() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, c := range r.inflight {
		out = append(out, fmt.Sprintf("  %s, called at %v, running for %v", c.desc, c.start.Sub(r.t0).Round(time.Millisecond), time.Since(c.start).Round(time.Millisecond)))
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// waitUntil polls cond until it holds, failing t after limit, or at once
// when a call has run past its limit without ending (ignoring its
// context) or a rule was broken.
func (r *killRun) waitUntil(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	if !r.poll(t, what, limit, cond) {
		t.Fatalf("waiting for %s: not within %v (%s); in flight:\n%s", what, limit, r.summary(), r.inflightList())
	}
}

// poll is waitUntil that returns false when cond does not hold within
// limit.
func (r *killRun) poll(t *testing.T, what string, limit time.Duration, cond func() bool) bool {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		r.mu.Lock()
		failures := slices.Clone(r.failures)
		var stuck []string
		for _, c := range r.inflight {
			if time.Since(c.start) > killCallLimit+5*time.Second {
				stuck = append(stuck, c.desc)
			}
		}
		r.mu.Unlock()
		if len(stuck) > 0 {
			t.Fatalf("waiting for %s: calls ignore their deadline of %v: %v; in flight:\n%s", what, killCallLimit, stuck, r.inflightList())
		}
		if len(failures) > 0 {
			t.Fatalf("waiting for %s:\n%s\n%s", what, strings.Join(failures, "\n"), r.summary())
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// ownerKey is the key on Redis naming the server that owns partition of
// the engine with this prefix (backends/redis/LAYOUT.md).
func ownerKey(prefix, partition string) string {
	return prefix + ":{" + prefix + ":" + partition + "}:owner"
}

// partitionOwner reads which of addrs owns partition of the engine with
// this prefix (its owner key), and how long its ownership has left.
func partitionOwner(t *testing.T, raw *goredis.Client, prefix, partition string, addrs []string) (int, time.Duration) {
	t.Helper()
	key := ownerKey(prefix, partition)
	var get *goredis.StringCmd
	var pttl *goredis.DurationCmd
	if _, err := raw.Pipelined(t.Context(), func(p goredis.Pipeliner) error {
		get, pttl = p.Get(t.Context(), key), p.PTTL(t.Context(), key)
		return nil
	}); err != nil {
		t.Fatalf("reading the owner key %s: %v", key, err)
	}
	addr, _, _ := strings.Cut(get.Val(), " ")
	i := slices.Index(addrs, addr)
	if i < 0 {
		t.Fatalf("the owner key %s names %q, none of the servers %v", key, get.Val(), addrs)
	}
	return i, pttl.Val()
}

// produce puts three rows a call until stop, each put's rows recorded by
// its outcome.
func (r *killRun) produce(ctx context.Context, c *tq.Client, stop *atomic.Bool) {
	defer r.producerDone.Store(true)
	for i := 0; !stop.Load() && ctx.Err() == nil; i++ {
		keys := []string{fmt.Sprintf("r%05d", 3*i), fmt.Sprintf("r%05d", 3*i+1), fmt.Sprintf("r%05d", 3*i+2)}
		r.mu.Lock()
		for _, k := range keys {
			r.put[k] = putPending
		}
		r.mu.Unlock()
		err := r.do(ctx, "put", "producer", func(ctx context.Context) error {
			return c.BatchPut(ctx, killPart, keys, tq.Batch{"x": tq.ValuesOf([]int64{int64(3 * i), int64(3*i + 1), int64(3*i + 2)})}, nil)
		})
		o := putOK
		switch {
		case errors.Is(err, tq.ErrOutcomeUnknown):
			o = putUnknown
		case err != nil:
			o = putFailed
		}
		r.mu.Lock()
		for _, k := range keys {
			r.put[k] = o
		}
		r.mu.Unlock()
		sleepCtx(ctx, 15*time.Millisecond)
	}
}

func (r *killRun) countPut(o putOutcome) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, p := range r.put {
		if p == o {
			n++
		}
	}
	return n
}

// consume claims (or waits for) up to four rows at a time, works on them
// a little, and acks them by kind, until ctx ends.
func (r *killRun) consume(ctx context.Context, task *tq.Task, name string, kind consumerKind) {
	var prev *tq.Lease // not acked yet: the next claim acks it
	var prevRec *killDelivery
	for n := 1; ctx.Err() == nil; n++ {
		var opts []tq.ClaimOption
		if prev != nil {
			opts = append(opts, tq.Acking(prev))
		}
		op := "wait"
		if kind == claimAcking {
			op = "claim"
		}
		var l *tq.Lease
		start := time.Now()
		err := r.do(ctx, op, name, func(ctx context.Context) error {
			var err error
			if kind == claimAcking {
				l, err = task.Claim(ctx, 4, opts...)
			} else {
				l, err = task.Wait(ctx, 4, opts...)
			}
			return err
		})
		end := time.Now()
		if ctx.Err() != nil {
			return
		}
		if prev != nil {
			if err == nil {
				// The ack rode on the call, which found the lease held
				// unless it had ended: certain only if the call returned
				// before that.
				r.acked(prevRec, prevRec.keys, end, end.Before(prevRec.until.Add(-killClockTol)))
			} else {
				// It leased nothing; its ack may or may not have
				// applied: ack again, as a worker would.
				r.ack(ctx, prev, prevRec, name)
			}
			prev, prevRec = nil, nil
		}
		if err != nil {
			sleepCtx(ctx, 20*time.Millisecond)
			continue
		}
		if l.Len() == 0 {
			sleepCtx(ctx, 10*time.Millisecond)
			continue
		}
		rec := r.delivered(name, l, start, end)
		sleepCtx(ctx, time.Duration(5+rand.IntN(20))*time.Millisecond) // the work
		switch {
		case kind != waitAck:
			prev, prevRec = l, rec
		case n%13 == 0:
			// Dropped, as by a worker that died: its rows come back when
			// the lease ends (one granted by a server killed meanwhile
			// included), not before.
		case n%9 == 0:
			r.mu.Lock()
			rec.nacked = time.Now()
			r.mu.Unlock()
			_ = r.do(ctx, "nack", name, func(ctx context.Context) error { return l.Nack(ctx, 0) })
		default:
			r.ack(ctx, l, rec, name)
		}
	}
}

// ack acks l with Lease.Ack, recording which rows it certainly acked.
func (r *killRun) ack(ctx context.Context, l *tq.Lease, rec *killDelivery, name string) {
	err := r.do(ctx, "ack", name, func(ctx context.Context) error { return l.Ack(ctx) })
	end := time.Now()
	var lost *tq.LeaseLostError
	switch {
	case err == nil:
		r.acked(rec, rec.keys, end, true)
	case errors.As(err, &lost): // the other rows were acked
		r.acked(rec, slices.DeleteFunc(slices.Clone(rec.keys), func(k string) bool { return slices.Contains(lost.Keys, k) }), end, true)
	default:
		r.acked(rec, nil, end, false)
	}
}

func (r *killRun) acked(rec *killDelivery, keys []string, at time.Time, certain bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !certain {
		rec.ackUnsure = true
		return
	}
	for _, k := range keys {
		if _, ok := rec.acked[k]; !ok {
			rec.acked[k] = at
		}
	}
}

func (r *killRun) delivered(name string, l *tq.Lease, start, end time.Time) *killDelivery {
	rec := &killDelivery{consumer: name, keys: l.Keys(), deliveries: slices.Clone(l.Deliveries), start: start, end: end,
		granted: l.Granted(), until: l.Until(), acked: map[string]time.Time{}}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.leases = append(r.leases, rec)
	for _, k := range rec.keys {
		switch o, ok := r.put[k]; {
		case !ok:
			r.failures = append(r.failures, fmt.Sprintf("row %s delivered to %s: no put of it was called", k, name))
		case o == putFailed:
			r.failures = append(r.failures, fmt.Sprintf("row %s delivered to %s: its put failed, which must leave nothing of it visible", k, name))
		}
	}
	return rec
}

func (r *killRun) certainAcks() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, l := range r.leases {
		n += len(l.acked)
	}
	return n
}

// firstRowsAfter is the return of the first call called after t that
// returned rows; zero if none yet.
func (r *killRun) firstRowsAfter(t time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	var first time.Time
	for _, l := range r.leases {
		if l.start.After(t) && (first.IsZero() || l.end.Before(first)) {
			first = l.end
		}
	}
	return first
}

// verify checks the deliveries once the run is over: every row whose put
// succeeded delivered; no row acked delivered again after; no row leased
// while an earlier lease of it was live (one that had neither ended nor
// been nacked); a row's delivery count rising with each delivery.
func (r *killRun) verify(t *testing.T, okKeys []string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range r.failures {
		t.Error(f)
	}
	type delivery struct {
		l     *killDelivery
		count int
	}
	byKey := map[string][]delivery{}
	for _, l := range r.leases {
		for i, k := range l.keys {
			byKey[k] = append(byKey[k], delivery{l, l.deliveries[i]})
		}
	}
	for _, k := range okKeys {
		if len(byKey[k]) == 0 {
			t.Errorf("row %s, put with success, was never delivered", k)
		}
	}
	at := func(x time.Time) time.Duration { return x.Sub(r.t0).Round(time.Millisecond) }
	desc := func(d delivery) string {
		return fmt.Sprintf("to %s (delivery %d, granted %v, until %v, returned %v)", d.l.consumer, d.count, at(d.l.granted), at(d.l.until), at(d.l.end))
	}
	for k, ds := range byKey {
		sort.SliceStable(ds, func(i, j int) bool { return ds[i].l.granted.Before(ds[j].l.granted) })
		for i, d := range ds {
			if ackedAt, ok := d.l.acked[k]; ok {
				for _, e := range ds[i+1:] {
					t.Errorf("row %s, acked %v (the ack of its delivery %s returned nil), delivered again %s", k, at(ackedAt), desc(d), desc(e))
				}
			}
			if i == 0 {
				continue
			}
			p := ds[i-1]
			ended := !d.l.granted.Before(p.l.until.Add(-killClockTol))
			nacked := !p.l.nacked.IsZero() && !d.l.granted.Before(p.l.nacked.Add(-killClockTol))
			if !ended && !nacked {
				t.Errorf("row %s held by two live leases: delivered %s, then %s before the first lease ended", k, desc(p), desc(d))
			}
			if d.count <= p.count {
				t.Errorf("row %s: delivery %s after delivery %s: its count did not rise", k, desc(d), desc(p))
			}
		}
	}
}

func (r *killRun) summary() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	puts := map[putOutcome]int{}
	for _, o := range r.put {
		puts[o]++
	}
	keys := map[string]int{}
	var acked, unsure, nacked int
	for _, l := range r.leases {
		for _, k := range l.keys {
			keys[k]++
		}
		acked += len(l.acked)
		if l.ackUnsure {
			unsure++
		}
		if !l.nacked.IsZero() {
			nacked++
		}
	}
	across := 0             // leases live and unsettled at a kill: the survivor had to keep them
	var ahead time.Duration // the most a lease was granted after its call returned: the clients' error in mapping the servers' clock
	for _, l := range r.leases {
		ahead = max(ahead, l.granted.Sub(l.end))
		for _, k := range r.kills {
			settled := !l.nacked.IsZero() && l.nacked.Before(k)
			for _, at := range l.acked {
				settled = settled || at.Before(k)
			}
			if l.granted.Before(k) && l.until.After(k) && !settled {
				across++
			}
		}
	}
	again := 0
	for _, n := range keys {
		if n > 1 {
			again++
		}
	}
	var errs []string
	for k, n := range r.errs {
		errs = append(errs, fmt.Sprintf("%s ×%d", k, n))
	}
	sort.Strings(errs)
	return fmt.Sprintf("rows put: %d ok, %d outcome unknown, %d failed, %d in flight; %d leases of %d rows, %d rows delivered more than once; %d leases live and unsettled at a kill; %d rows certainly acked, %d leases whose ack was unsure, %d nacked; leases granted up to %v after their call returned (clock mapping); allowed errors: [%s]",
		puts[putOK], puts[putUnknown], puts[putFailed], puts[putPending], len(r.leases), len(keys), again, across, acked, unsure, nacked, ahead, strings.Join(errs, "; "))
}
