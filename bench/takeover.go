package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	tqredis "github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/tq"
)

// Takeover after kill -9 of a partition's owner (served targets). Per
// repetition, two tq servers of their own (`tq serve -ownership TTL`, OS
// processes) on the target's Redis server; consumers, each a tq:// client
// naming both servers, loop Claim(queueBatch) + Ack on a fresh partition,
// which the server their calls reach first owns. The owner is killed with
// SIGKILL; the time from the kill to the first claim that returns rows
// (through the survivor, once the dead owner's ownership has expired) is
// the measure, beside its aim: the ownership TTL + takeoverSlack. The
// claims and acks that fail meanwhile are counted by class, and once the
// partition is drained, no row whose Ack succeeded may have been
// delivered again.

const (
	takeoverConsumers = 2
	// takeoverWork is a consumer's pause between its Ack and its next
	// claim (the work on the rows), which paces the consumers.
	takeoverWork = time.Millisecond
	// takeoverSlack is the aim's margin over the ownership TTL.
	takeoverSlack = time.Second
	// takeoverTask names the consumers' task.
	takeoverTask = "takeover"
)

// takeoverLease is the consumers' lease: longer than a takeover is meant
// to take (an Ack of rows claimed just before the kill waits for it), so
// that such an Ack finds its lease; rows whose claim or ack the kill cut
// come back when it ends.
func takeoverLease(ttl time.Duration) time.Duration { return 2*ttl + takeoverSlack }

// takeoverBefore is how long the consumers consume before the kill of
// repetition rep of reps: at least the shortest, plus a share of a
// renewal period of the servers (TTL/3: they renew what they own every
// TTL/3) that spreads the kills evenly over it, as the ownership left at
// a kill depends on where in it the kill falls.
func takeoverBefore(ttl time.Duration, rep, reps int) time.Duration {
	return takeoverShortest(ttl) + time.Duration(float64(ttl/3)*(float64(rep)+0.5)/float64(reps))
}

// takeoverShortest is the shortest time of consuming before a kill.
func takeoverShortest(ttl time.Duration) time.Duration { return max(ttl/4, 100*time.Millisecond) }

// takeoverRows is how many rows a repetition's partition holds: twice
// what the paced consumers could consume before the kill, so that the
// survivor has rows to hand out.
func takeoverRows(ttl time.Duration) int {
	perSec := takeoverConsumers * queueBatch * int(time.Second/takeoverWork)
	return max(2*int(float64(perSec)*(takeoverShortest(ttl)+ttl/3).Seconds()), 4*takeoverConsumers*queueBatch)
}

// takeoverCallLimit bounds one call of a consumer: one that has no answer
// by then hung (the client retries an unavailable server by itself for up
// to tq.DefaultRetry.For, which is longer).
func takeoverCallLimit(ttl time.Duration) time.Duration {
	return ttl + takeoverLease(ttl) + 10*time.Second
}

func takeoverTable(cfg Config) *Table {
	ttl := cfg.TakeoverTTL
	return &Table{
		ID:    "queue-takeover",
		Title: "Queue: takeover after kill -9 of the tq server that owns the partition",
		Intro: fmt.Sprintf("Per repetition, two tq servers of their own (`tq serve -engine redis://… -ownership %[1]v`, OS processes; "+
			"tqserve.DefaultOwnership is 10 s) on the target's Redis server, and %[2]d consumers (goroutines, each a tq.Client of its "+
			"own: tq.Open of tq://A,B, the default RetryPolicy) that loop Claim(%[3]d), the Ack of the lease and %[4]v of work, on a "+
			"fresh partition of %[5]s one-field rows (task lease %[6]v). The clients' retry warnings are not printed. The partition's owner is the server the "+
			"clients' calls reached first; the bench reads which from the partition's owner key on Redis (backends/redis/LAYOUT.md). "+
			"After %[7]v of consuming, plus (r+½)/%[10]d of the servers' renewal period (TTL/3) at repetition r = 0, 1, …, so that the "+
			"kills fall evenly over it, the owner is killed (SIGKILL). kill → first claim with rows: from the kill to the return of the first claim "+
			"that returns rows among those called once the kill had returned (which the dead server cannot have answered): the "+
			"survivor serves the partition once the dead owner's ownership has expired, and the clients retry meanwhile by "+
			"themselves. Aim: the ownership TTL + %[8]v; \"÷ aim\" is the median over it, and (met) the median's verdict. "+
			"ownership left at kill: the owner key's PTTL, read just before the kill; after ownership ended: the first claim's "+
			"return minus that expiry (the clients' retry backoff and the survivor's taking the partition over). Failed calls: the "+
			"consumers' claims and acks that returned an error from the kill to the first claim, by class, summed over the "+
			"repetitions (ErrUnavailable, ErrOutcomeUnknown and, for an ack, ErrLeaseLost are expected; any other error, or a call "+
			"with no answer within %[9]v, is a failure). Then the consumers drain the partition until the task's Status counts every "+
			"row acked (rows whose claim or ack the kill cut come back when their lease ends); acked rows delivered again: rows "+
			"delivered after the delivery whose Ack succeeded, which must be none. No warm-up (each repetition starts servers of "+
			"its own); median [min–max] of %[10]d repetitions.",
			ttl, takeoverConsumers, queueBatch, takeoverWork, fmtCount(takeoverRows(ttl)), takeoverLease(ttl), takeoverShortest(ttl),
			takeoverSlack, takeoverCallLimit(ttl), cfg.Reps),
		Header: []string{"engine", "ownership TTL", "kill → first claim with rows", "aim: TTL + " + takeoverSlack.String(), "÷ aim",
			"ownership left at kill", "after ownership ended", "failed calls, kill → first claim", "acked rows delivered again"},
	}
}

// takeoverRun is one repetition: what the consumers saw.
type takeoverRun struct {
	rows               int
	victim, survivor   string // the servers' addresses
	victimPID          int
	survivorPID        int
	read, t0, killed   time.Time     // the owner key read; the kill's call and return
	left, before       time.Duration // the ownership left at the kill; the consuming before it
	first              time.Time     // the return of the first claim with rows called after killed
	longest            time.Duration
	killedSet          atomic.Bool
	mu                 sync.Mutex
	claims             []takeoverClaim
	acked              map[string]takeoverAck // by key: the delivery acked
	failures           []takeoverFailure
	deliveries         map[string][]time.Time // by key: the returns of the claims that leased it
	redelivered        int                    // acked rows delivered again
	redeliveredBefore  int                    // of those, acked before the kill
	ackedBefore, twice int                    // rows acked before the kill; rows delivered more than once
}

type takeoverClaim struct {
	start, end time.Time
	rows       int
}

type takeoverAck struct {
	claimed, acked time.Time // the return of the claim that leased the row, and of its Ack
}

type takeoverFailure struct {
	op, class  string
	expected   bool
	start, end time.Time
}

// failClass names the class of a consumer's failed call, and whether it
// is one a takeover may cause.
func failClass(op string, callCtx context.Context, err error) (string, bool) {
	switch {
	case errors.Is(callCtx.Err(), context.DeadlineExceeded):
		return "no answer within the call limit (hung)", false
	case errors.Is(err, tq.ErrUnavailable) && errors.Is(err, tq.ErrOutcomeUnknown):
		return "unavailable, outcome unknown", true
	case errors.Is(err, tq.ErrOutcomeUnknown):
		return "outcome unknown", true
	case errors.Is(err, tq.ErrUnavailable):
		return "unavailable", true
	case op == "ack" && errors.Is(err, tq.ErrLeaseLost):
		return "lease lost", true
	}
	return "other: " + err.Error(), false
}

func (r *takeoverRun) fail(op string, callCtx context.Context, err error, start, end time.Time) {
	class, ok := failClass(op, callCtx, err)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, takeoverFailure{op, class, ok, start, end})
}

func (r *takeoverRun) claimed(start, end time.Time, keys []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.claims = append(r.claims, takeoverClaim{start, end, len(keys)})
	for _, k := range keys {
		r.deliveries[k] = append(r.deliveries[k], end)
	}
}

// ackedRows records that the rows of keys, claimed at claimed, were
// acked (the Ack returned at at).
func (r *takeoverRun) ackedRows(keys []string, claimed, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range keys {
		if a, ok := r.acked[k]; !ok || claimed.Before(a.claimed) {
			r.acked[k] = takeoverAck{claimed, at}
		}
	}
}

func (r *takeoverRun) ackCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.acked)
}

// consume is one consumer: Claim, Ack, work, until ctx ends; once the
// owner is killed, a claim that finds no row asks the task's Status
// whether every row is acked, and calls drained if so.
func (r *takeoverRun) consume(ctx context.Context, task *tq.Task, limit time.Duration, drained func()) {
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, limit)
		start := time.Now()
		l, err := task.Claim(cctx, queueBatch)
		end := time.Now()
		switch {
		case ctx.Err() != nil:
			cancel()
			return
		case err != nil:
			r.fail("claim", cctx, err, start, end)
			cancel()
			pause(ctx, 10*time.Millisecond)
			continue
		}
		r.claimed(start, end, l.Keys())
		if l.Len() == 0 {
			if r.killedSet.Load() {
				if st, err := task.Status(cctx); err == nil && st.Acked >= r.rows {
					drained()
				}
			}
			cancel()
			pause(ctx, 20*time.Millisecond)
			continue
		}
		astart := time.Now()
		err = l.Ack(cctx)
		aend := time.Now()
		var lost *tq.LeaseLostError
		switch {
		case err == nil:
			r.ackedRows(l.Keys(), end, aend)
		case ctx.Err() != nil:
			cancel()
			return
		default:
			if errors.As(err, &lost) { // the other rows were acked
				r.ackedRows(slices.DeleteFunc(l.Keys(), func(k string) bool { return slices.Contains(lost.Keys, k) }), end, aend)
			}
			r.fail("ack", cctx, err, astart, aend)
		}
		cancel()
		pause(ctx, takeoverWork)
	}
}

// pause sleeps for d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// redisPrefix is the key prefix of the engine at a redis:// URL.
func redisPrefix(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("redis URL %q: %w", redact(raw), err)
	}
	if p := u.Query().Get("prefix"); p != "" {
		return p, nil
	}
	return tqredis.DefaultPrefix, nil
}

// ownerKey is the key naming partition's owner on a redis:// engine of
// key prefix prefix: base:owner, base being <prefix>:{<prefix>:<partition
// with %, { and } escaped>} (backends/redis/LAYOUT.md).
func ownerKey(prefix, partition string) string {
	p := strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D").Replace(partition)
	return prefix + ":{" + prefix + ":" + p + "}:owner"
}

func runTakeover(ctx context.Context, cfg Config, m *meter, t *target, tbl *Table, rep *Report) error {
	raw := redis.NewClient(t.redisOpts)
	defer raw.Close()
	prefix, err := redisPrefix(t.redisURL)
	if err != nil {
		return err
	}
	var runs []*takeoverRun
	for r := range cfg.Reps {
		run, err := takeoverOnce(ctx, cfg, t, raw, prefix, r)
		if err != nil {
			return fmt.Errorf("takeover, repetition %d: %w", r+1, err)
		}
		runs = append(runs, run)
		m.prog.step(fmt.Sprintf("queue takeover %s rep %d/%d", t.name, r+1, cfg.Reps))
	}
	addTakeoverRows(cfg, t, runs, tbl, rep)
	return nil
}

// takeoverOnce is one repetition.
func takeoverOnce(ctx context.Context, cfg Config, t *target, raw *redis.Client, prefix string, rep int) (_ *takeoverRun, err error) {
	ttl := cfg.TakeoverTTL
	var procs []*serveProc
	defer func() {
		for _, p := range procs {
			err = errors.Join(err, p.stop()) // the killed one's is a no-op
		}
	}()
	for range 2 {
		p, err := startServePath(ctx, t.serve.cmd.Path, t.redisURL, "", "-ownership", ttl.String())
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
	}
	u := "tq://" + procs[0].addr + "," + procs[1].addr
	var clients []*tq.Client
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for range 1 + takeoverConsumers {
		// Their retries are counted by the failures they end in, if any.
		c, err := tq.Open(ctx, u, tq.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", u, err)
		}
		clients = append(clients, c)
	}
	part := fmt.Sprintf("%s/takeover/%d-%s", queuePartition, rep, rand.Text()[:8])
	run := &takeoverRun{rows: takeoverRows(ttl), acked: map[string]takeoverAck{}, deliveries: map[string][]time.Time{}}
	if err := queueRows(ctx, clients[0], part, run.rows); err != nil {
		return nil, err
	}
	defer clients[0].ClearPartition(context.WithoutCancel(ctx), part)
	var tasks []*tq.Task
	for _, c := range clients[1:] {
		task, err := c.Task(part, takeoverTask, []string{"id"}, tq.LeaseFor(takeoverLease(ttl)))
		if err != nil {
			return nil, err
		}
		tasks = append(tasks, task)
	}

	cctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stop()
		wg.Wait()
	}()
	drained := make(chan struct{})
	var once sync.Once
	limit := takeoverCallLimit(ttl)
	for _, task := range tasks {
		wg.Go(func() { run.consume(cctx, task, limit, func() { once.Do(func() { close(drained) }) }) })
	}

	// Consume for takeoverBefore (and until some row is acked), or until
	// half the rows are.
	began, before := time.Now(), takeoverBefore(ttl, rep, cfg.Reps)
	for {
		n := run.ackCount()
		el := time.Since(began)
		if n >= run.rows/2 || n > 0 && el >= before {
			break
		}
		if el > before+10*time.Second {
			return nil, fmt.Errorf("the consumers acked no row in %v (failures: %s)", el.Round(time.Millisecond), run.failureSummary(time.Time{}, time.Now()))
		}
		pause(ctx, 5*time.Millisecond)
	}

	// The owner, and how long its ownership has left.
	key := ownerKey(prefix, part)
	run.read = time.Now()
	run.before = run.read.Sub(began)
	var get *redis.StringCmd
	var pttl *redis.DurationCmd
	if _, err := raw.Pipelined(ctx, func(p redis.Pipeliner) error {
		get, pttl = p.Get(ctx, key), p.PTTL(ctx, key)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("reading the owner key %s: %w", key, err)
	}
	owner, _, _ := strings.Cut(get.Val(), " ")
	run.left = pttl.Val()
	var victim *serveProc
	for _, p := range procs {
		if p.addr == owner {
			victim = p
		} else {
			run.survivor, run.survivorPID = p.addr, p.pid()
		}
	}
	if victim == nil || run.left <= 0 {
		return nil, fmt.Errorf("the owner key %s names %q (PTTL %v), neither of the servers %s and %s", key, get.Val(), run.left, procs[0].addr, procs[1].addr)
	}
	run.victim, run.victimPID = victim.addr, victim.pid()

	// Kill it.
	run.t0 = time.Now()
	if err := victim.cmd.Process.Kill(); err != nil {
		return nil, fmt.Errorf("kill -9 of tq serve (pid %d): %w", victim.pid(), err)
	}
	run.killed = time.Now()
	run.killedSet.Store(true)
	select {
	case <-victim.exited:
	case <-time.After(10 * time.Second):
		return nil, fmt.Errorf("tq serve (pid %d) still runs 10 s after SIGKILL", victim.pid())
	}

	// Drain.
	deadline := ttl + takeoverLease(ttl) + 15*time.Second
	select {
	case <-drained:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(deadline - time.Since(run.t0)):
		st, serr := tasks[0].Status(ctx)
		return nil, fmt.Errorf("the partition was not drained %v after the kill (status %+v, %v; first claim with rows after the kill: %v; failures: %s)",
			deadline, st, serr, run.firstClaim(), run.failureSummary(run.t0, time.Now()))
	}
	stop()
	wg.Wait()
	run.settle()
	if run.first.IsZero() {
		return nil, fmt.Errorf("the partition was drained, but by no claim called after the kill (failures: %s)", run.failureSummary(run.t0, time.Now()))
	}
	return run, nil
}

// fmtSeconds prints a time in the unit fmtTime would: "3.00 s".
func fmtSeconds(sec float64) string {
	scale, unit := timeUnit(sec)
	return sig3(sec*scale) + " " + unit
}

// firstClaim is the return of the first claim with rows called after the
// kill returned (zero: none).
func (r *takeoverRun) firstClaim() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	var first time.Time
	for _, c := range r.claims {
		if c.rows > 0 && !c.start.Before(r.killed) && (first.IsZero() || c.end.Before(first)) {
			first = c.end
		}
	}
	return first
}

// settle works out the repetition once the consumers stopped: the first
// claim, the longest call, and the rows acked and delivered again.
func (r *takeoverRun) settle() {
	r.first = r.firstClaim()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.claims {
		r.longest = max(r.longest, c.end.Sub(c.start))
	}
	for _, f := range r.failures {
		r.longest = max(r.longest, f.end.Sub(f.start))
	}
	for k, ds := range r.deliveries {
		if len(ds) > 1 {
			r.twice++
		}
		a, ok := r.acked[k]
		if !ok {
			continue
		}
		if a.acked.Before(r.t0) {
			r.ackedBefore++
		}
		for _, d := range ds {
			if d.After(a.claimed) {
				r.redelivered++
				if a.acked.Before(r.t0) {
					r.redeliveredBefore++
				}
				break
			}
		}
	}
}

// failureSummary counts the failures that returned in [from, to] by
// operation and class: "claim: outcome unknown ×2; ack: ...", or "none".
func (r *takeoverRun) failureSummary(from, to time.Time) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return summarizeFailures(r.failures, from, to)
}

func summarizeFailures(fs []takeoverFailure, from, to time.Time) string {
	counts := map[string]int{}
	var order []string
	for _, f := range fs {
		if f.end.Before(from) || f.end.After(to) {
			continue
		}
		k := f.op + ": " + f.class
		if !f.expected {
			k = "UNEXPECTED " + k
		}
		if counts[k] == 0 {
			order = append(order, k)
		}
		counts[k]++
	}
	if len(order) == 0 {
		return "none"
	}
	slices.Sort(order)
	out := make([]string, len(order))
	for i, k := range order {
		out[i] = fmt.Sprintf("%s ×%d", k, counts[k])
	}
	return strings.Join(out, "; ")
}

// unexpected is the failures of classes a takeover should not cause, at
// any time of the repetition.
func (r *takeoverRun) unexpected() []takeoverFailure {
	return slices.DeleteFunc(slices.Clone(r.failures), func(f takeoverFailure) bool { return f.expected })
}

func addTakeoverRows(cfg Config, t *target, runs []*takeoverRun, tbl *Table, rep *Report) {
	aim := cfg.TakeoverTTL + takeoverSlack
	var took, left, after []float64
	var window []takeoverFailure
	var redelivered, redeliveredBefore, acked, ackedBefore, over int
	var failed []string
	for i, r := range runs {
		d := r.first.Sub(r.t0)
		took = append(took, d.Seconds())
		left = append(left, r.left.Seconds())
		after = append(after, r.first.Sub(r.read.Add(r.left)).Seconds())
		if d > aim {
			over++
		}
		for _, f := range r.failures {
			if !f.end.Before(r.t0) && !f.end.After(r.first) {
				window = append(window, f)
			}
		}
		redelivered += r.redelivered
		redeliveredBefore += r.redeliveredBefore
		acked += len(r.acked)
		ackedBefore += r.ackedBefore
		if r.redelivered > 0 {
			failed = append(failed, fmt.Sprintf("repetition %d: %d acked rows delivered again (%d of them acked before the kill)", i+1, r.redelivered, r.redeliveredBefore))
		}
		if u := r.unexpected(); len(u) > 0 {
			failed = append(failed, fmt.Sprintf("repetition %d: failed calls of unexpected classes: %s", i+1, summarizeFailures(u, time.Time{}, r.first.Add(time.Hour))))
		}
		tbl.Notes = append(tbl.Notes, fmt.Sprintf("%s, repetition %d: killed the owner (tq serve pid %d at %s) after %v of consuming, with %v of its "+
			"ownership left; the first claim with rows through the survivor (tq serve pid %d at %s) returned %v after the kill; failed calls "+
			"from the kill to it: %s, after it: %s; longest call %v; %s rows put, all acked, %s of them before the kill; %d rows delivered "+
			"more than once (claims or acks the kill cut); %d acked rows delivered again.",
			t.name, i+1, r.victimPID, r.victim, r.before.Round(time.Millisecond), r.left, r.survivorPID, r.survivor, r.first.Sub(r.t0).Round(time.Millisecond),
			summarizeFailures(r.failures, r.t0, r.first), summarizeFailures(r.failures, r.first.Add(time.Nanosecond), r.first.Add(time.Hour)),
			r.longest.Round(time.Millisecond), fmtCount(r.rows), fmtCount(r.ackedBefore), r.twice, r.redelivered))
	}
	td, ld, ad := summarize(took), summarize(left), summarize(after)
	again := fmt.Sprintf("none (of %s acked, %s before the kills)", fmtCount(acked), fmtCount(ackedBefore))
	if redelivered > 0 {
		again = fmt.Sprintf("FAILED: %d (%d acked before the kills)", redelivered, redeliveredBefore)
	}
	fails := summarizeFailures(window, time.Time{}, time.Now().Add(time.Hour))
	ratio := td.Median / aim.Seconds()
	tbl.Rows = append(tbl.Rows, []string{t.name, cfg.TakeoverTTL.String(), fmtTime(td), fmtSeconds(aim.Seconds()),
		fmtRatio(ratio) + " " + metMark(ratio <= 1), fmtTime(ld), fmtTime(ad), fails, again})
	if over > 0 {
		tbl.Notes = append(tbl.Notes, fmt.Sprintf("%s: %d of the %d repetitions took longer than the aim of %v.", t.name, over, len(runs), aim))
	}
	for _, f := range failed {
		msg := fmt.Sprintf("**FAILED** (%s, takeover): %s", t.name, f)
		tbl.Notes = append(tbl.Notes, msg)
		rep.note("%s", msg)
	}
	rep.Records = append(rep.Records,
		Record{Suite: "queue", Table: tbl.ID, Row: t.name, Series: "kill to first claim with rows", Unit: "s", Dist: td},
		Record{Suite: "queue", Table: tbl.ID, Row: t.name, Series: "ownership left at kill", Unit: "s", Dist: ld},
		Record{Suite: "queue", Table: tbl.ID, Row: t.name, Series: "first claim after ownership ended", Unit: "s", Dist: ad})
}
