package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/tq"
)

// The queue suite: what consuming through tq costs, each measure beside
// its limit in the same rotation, on the same server. tq is driven through
// its public API only (Open, Task, Claim, Wait, Ack, BatchPut,
// ClearPartition).
//
//   - claim+ack: a Claim of a step's rows and the Ack of them, beside
//     XREADGROUP COUNT n + XACK of as many entries of a Redis stream (the
//     at-least-once reference), and beside a List of the same rows;
//   - wake-up to row in hand: from a producer's BatchPut of one row
//     returning to a consumer blocked in Task.Wait returning its lease,
//     beside an XADD to a client blocked in XREADGROUP BLOCK, an LPUSH to
//     one blocked in BLPOP, or a channel hand-off in process;
//   - blocked put wake-up: from a consumer's Ack returning to a producer's
//     BatchPut of one row, blocked on a partition full with the acked row
//     (Capacity{Rows: 1, ClearAcked: the consumer's task}), returning,
//     beside the same limits and the wake-up above;
//   - contention: consumers claiming and acking a partition's rows
//     together, beside as many goroutines doing XREADGROUP + XACK on a
//     stream, LPOP of a list, or popping a buffered channel in process;
//   - claim cost against partition size (queuesize.go);
//   - on Redis, the server's time per claim beside XREADGROUP's and
//     XACK's (serverstats.go).

const queuePartition = "tqgo-bench/queue"

// queueBatch is how many rows each consumer of the contention and
// partition-size measures claims at a time.
const queueBatch = 8

// queueChunk is how many rows one BatchPut (or one pipeline of XADDs)
// writes when a measure fills a partition (tq.DefaultKeysLimit).
const queueChunk = 10_000

// wakeGap is how long a measure of wake-up lets its consumer block
// before the producer writes; wakeCalls is how many hand-offs make one
// sample.
const (
	wakeGap   = 2 * time.Millisecond
	wakeCalls = 32
)

// A contention measure's call consumes a whole partition (or stream, list
// or channel) and returns the time per claim, so a sample is a fixed
// number of such runs, not a calibrated one: tq's run is hundreds of
// claims, the Redis limits' a few milliseconds, a channel's microseconds.
const (
	contendCalls      = 1
	contendRedisCalls = 4
	contendChanCalls  = 32
)

func queueTargets(targets []*target) []*target {
	var out []*target
	for _, t := range targets {
		if t.kv && (t.isRedis() || t.url == "memory://") {
			out = append(out, t)
		}
	}
	return out
}

func queueSteps(cfg Config, targets []*target, m *meter) int {
	n, once := 0, 0
	for _, t := range queueTargets(targets) {
		var step, size int
		switch {
		case t.isServed(): // its contention is the consumer sweep; the gRPC relay is one more arm
			step, size = 10, 2*len(cfg.QueueSizes)
			if cfg.measures("sweep") {
				n += sweepSteps(cfg)
			}
			if cfg.measures("takeover") {
				once += cfg.Reps // one step per repetition, no warm-up
			}
		case t.isRedis():
			step, size = 9+3*len(cfg.Consumers), 2*len(cfg.QueueSizes)
		default:
			step, size = 7+2*len(cfg.Consumers), len(cfg.QueueSizes)
		}
		if cfg.measures("step") {
			n += step
		}
		if cfg.measures("size") {
			n += size
		}
	}
	return m.planSteps(n) + once
}

// queueRows writes n one-field rows into a fresh partition, in BatchPuts
// of queueChunk rows.
func queueRows(ctx context.Context, c *tq.Client, partition string, n int) error {
	if err := c.ClearPartition(ctx, partition); err != nil {
		return err
	}
	for lo := 0; lo < n; lo += queueChunk {
		hi := min(lo+queueChunk, n)
		keys := make([]string, hi-lo)
		ids := make([]int64, hi-lo)
		for i := range keys {
			keys[i] = "r" + strconv.Itoa(lo+i)
			ids[i] = int64(lo + i)
		}
		if err := c.BatchPut(ctx, partition, keys, tq.Batch{"id": tq.Stacked(ids, hi-lo)}, nil); err != nil {
			return err
		}
	}
	return nil
}

// fillStream makes key a stream of n entries (one field each), in
// pipelines of queueChunk XADDs.
func fillStream(ctx context.Context, raw *redis.Client, key string, n int) error {
	if err := raw.Del(ctx, key).Err(); err != nil {
		return err
	}
	for lo := 0; lo < n; lo += queueChunk {
		_, err := raw.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := lo; i < min(lo+queueChunk, n); i++ {
				p.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: []any{"id", i}})
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// queueRig is what the measures of one target share.
type queueRig struct {
	t *target
	// clients[0] is the producer, clients[1] the consumer of the other
	// measures, clients[i] the contention measure's consumer i: a Client
	// per producer and per consumer, as processes of their own have. On
	// memory they are made with tq.New over one embedded engine (a memory
	// engine is one process's).
	clients []*tq.Client
	raw     *redis.Client // Redis limits: a pool of a connection per consumer
	info    *redis.Client // INFO, and the end marker of a MONITOR probe
	blocked *blockedPut   // the blocked put measure, once queueArms made it
	closers []func()
}

func openRig(ctx context.Context, cfg Config, t *target) (*queueRig, error) {
	rig := &queueRig{t: t}
	n := max(slices.Max(cfg.Consumers), 2)
	open := func() (*tq.Client, error) { return tq.Open(ctx, t.url) }
	if !t.isRedis() {
		eng, err := backends.Open(ctx, t.url)
		if err != nil {
			return nil, err
		}
		rig.closers = append(rig.closers, func() {
			eng.Data.Close()
			eng.Meta.Close()
		})
		open = func() (*tq.Client, error) { return tq.New(eng) }
	}
	for range n {
		c, err := open()
		if err != nil {
			rig.close()
			return nil, fmt.Errorf("open %s: %w", t.name, err)
		}
		rig.clients = append(rig.clients, c)
	}
	if t.isRedis() {
		opts := *t.redisOpts
		opts.PoolSize = max(n+4, 10)
		rig.raw = redis.NewClient(&opts)
		rig.info = redis.NewClient(t.redisOpts)
	}
	return rig, nil
}

func (r *queueRig) close() {
	ctx := context.Background()
	if len(r.clients) > 0 {
		// The full partition's capacity first: a server given by -urls
		// keeps no trace of the run.
		r.clients[0].SetCapacity(ctx, fullPartition, tq.Capacity{})
		for _, p := range []string{queuePartition, queuePartition + "/wake", fullPartition, queuePartition + "/contend", sweepPartition} {
			r.clients[0].ClearPartition(ctx, p)
		}
	}
	if r.raw != nil {
		r.raw.Del(ctx, streamStep, streamWake, streamContend, listWake, listContend, streamSweep)
		r.raw.Close()
		r.info.Close()
	}
	for _, c := range r.clients {
		c.Close()
	}
	for _, f := range slices.Backward(r.closers) {
		f()
	}
}

// The Redis limits' keys.
const (
	streamStep    = "tqgo-bench:step-stream"
	streamWake    = "tqgo-bench:wake-stream"
	streamContend = "tqgo-bench:contend-stream"
	listWake      = "tqgo-bench:wake"
	listContend   = "tqgo-bench:contend"
	streamGroup   = "g"
)

func runQueue(ctx context.Context, cfg Config, m *meter, targets []*target, rep *Report) error {
	ts := queueTargets(targets)
	if len(ts) == 0 {
		rep.note("queue: no engine to run")
		return nil
	}
	cs := joinInts(cfg.Consumers)
	step := &Table{
		ID:    "queue",
		Title: fmt.Sprintf("Queue: claim and ack of a %d-row step; wake-up to a row in hand; a blocked put's wake-up; %s consumers", cfg.Samples, strings.ReplaceAll(cs, ",", " and ")),
		Intro: fmt.Sprintf("tq through its public API: a producer (BatchPut, ClearPartition) and a consumer (Task, Claim, Wait, "+
			"Ack) each on a tq.Client of their own (on memory, Clients made by tq.New over one embedded engine). "+
			"claim+ack: one Claim(%[1]d) of a partition holding %[1]d ready one-field rows (put before each call, untimed) and "+
			"one Ack of the lease. Limits: on Redis, XREADGROUP GROUP g c COUNT %[1]d STREAMS s > on a stream holding %[1]d "+
			"XADD'ed one-field entries and one XACK of the %[1]d IDs read (go-redis, same server); and a List of the rows. "+
			"wake-up to row in hand: from the producer's BatchPut of one row returning to the consumer, blocked in "+
			"Task.Wait(ctx, 1) for %[2]v before the put, returning its lease; a sample is the mean of %[3]d hand-offs, and a "+
			"hand-off counts 0 when the consumer returned first. Limits: an XADD returning to a client blocked in XREADGROUP "+
			"BLOCK returning the entry; an LPUSH returning to one blocked in BLPOP (same server); a channel hand-off in process; "+
			"on a tq server (tq+redis), "+relayLimit+": the same hand-off through a relay process (the bench binary run "+
			"again) that is grpc-go and nothing of tq, on loopback, raw bytes with no protobuf: the consumer, on a connection of "+
			"its own, sends a wait message on a bidirectional stream it keeps open, and the stream's handler blocks on a "+
			"channel until the producer, on a connection and stream of its own, sends a put message, whose handler wakes it "+
			"and replies (50 bytes); the woken handler replies to the consumer (200 bytes); the time is from the producer's "+
			"reply read to the consumer's. "+
			"blocked put wake-up: a partition with Capacity{Rows: 1, ClearAcked: [the consumer's task]} holds one row, which the "+
			"consumer has claimed; the producer's BatchPut of one more row blocks (the Block policy) for %[2]v, then the consumer "+
			"acks the row, which clears it; the time is from the Ack returning to the BatchPut returning, a sample the mean of "+
			"%[3]d hand-offs (0 when the put returned first); limits: the wake-up's, and the wake-up itself. The same hand-off "+
			"timed from the Ack's call instead, beside the Ack alone (its call to its return; it deletes the cleared row's "+
			"cells before returning, while the woken put proceeds). "+
			"contention: C consumers (goroutines, each a tq.Client of its own, the first the producer's, and a Task "+
			"of one task name) claim %[4]d rows at a time and ack them until a partition of max(4×%[1]d, 4×C×%[4]d) rows is "+
			"consumed; the time per claim is the wall time over the claims that returned rows, a sample one such run. Limits: "+
			"C goroutines, each a consumer of one group on a connection of its own, doing XREADGROUP COUNT %[4]d + XACK until "+
			"a stream of as many entries is consumed; C goroutines doing LPOP COUNT %[4]d of a list; C goroutines popping a "+
			"buffered channel (in process); the time per read or pop likewise, a sample %[5]d runs (%[6]d for the channel). "+
			"Median [min–max] of the repetitions; \"ratio\" is the engine's time over the limit's (n/a over a limit of 0).",
			cfg.Samples, wakeGap, wakeCalls, queueBatch, contendRedisCalls, contendChanCalls),
		Header: []string{"engine", "measure", "tq", "limit", "limit time", "ratio"},
	}
	size := sizeTable(cfg)
	server := serverTable(cfg)
	sweep := sweepTable(cfg)
	take := takeoverTable(cfg)
	for _, t := range ts {
		if err := runQueueTarget(ctx, cfg, m, t, step, size, server, sweep, take, rep); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
	}
	if cfg.measures("takeover") && !slices.ContainsFunc(ts, (*target).isServed) {
		rep.note("queue takeover: skipped, it needs a tq server target (-urls tq+redis)")
	}
	for _, t := range []*Table{step, size, server, sweep, take} {
		if len(t.Rows) > 0 {
			rep.Tables = append(rep.Tables, t)
		}
	}
	return nil
}

func runQueueTarget(ctx context.Context, cfg Config, m *meter, t *target, step, size, server, sweep, take *Table, rep *Report) error {
	rig, err := openRig(ctx, cfg, t)
	if err != nil {
		return err
	}
	defer rig.close()
	if cfg.measures("step") {
		if err := runQueueStep(ctx, cfg, m, rig, step, server, rep); err != nil {
			return err
		}
	}
	if cfg.measures("size") {
		srows, err := runQueueSize(ctx, cfg, m, rig, size, rep)
		if err != nil {
			return err
		}
		addServerRows(cfg, t, srows, server, rep)
	}
	if t.isServed() && cfg.measures("sweep") {
		if err := runSweep(ctx, cfg, m, rig, sweep, rep); err != nil {
			return err
		}
	}
	if t.isServed() && cfg.measures("takeover") {
		return runTakeover(ctx, cfg, m, t, take, rep)
	}
	return nil
}

// runQueueStep runs the measures of the queue table: claim+ack of a
// step, the wake-ups and contention.
func runQueueStep(ctx context.Context, cfg Config, m *meter, rig *queueRig, step, server *Table, rep *Report) (err error) {
	t := rig.t
	arms, rows, srows, cleanup, err := queueArms(ctx, cfg, rig)
	defer func() { err = errors.Join(err, cleanup()) }()
	if err != nil {
		return err
	}
	if _, err := m.run(ctx, "queue "+t.name, arms); err != nil {
		return err
	}
	if b := rig.blocked; b != nil {
		step.Notes = append(step.Notes, fmt.Sprintf("%s: %d of the %d blocked puts (warm-up included) returned before the Ack that made room for them did, and counted 0.",
			t.name, b.first, b.calls))
	}
	for _, r := range rows {
		d, ld := summarize(r.a.samples), summarize(r.lim.samples)
		step.Rows = append(step.Rows, []string{t.name, r.measure, fmtTime(d), r.limName, fmtTime(ld), fmtRatio(d.Median / ld.Median)})
		rep.Records = append(rep.Records,
			Record{Suite: "queue", Table: step.ID, Row: t.name, Series: r.measure, Unit: "s", Dist: d},
			Record{Suite: "queue", Table: step.ID, Row: t.name, Series: r.measure + " limit: " + r.limName, Unit: "s", Dist: ld})
	}
	addServerRows(cfg, t, srows, server, rep)
	return nil
}

type queueRow struct {
	measure, limName string
	a, lim           *arm
}

// queueArms makes the arms of the queue table and its rows, and of the
// server table's. cleanup (never nil, even with an error) ends what they
// hold open beyond the rig: on a served target, the gRPC relay process.
func queueArms(ctx context.Context, cfg Config, rig *queueRig) (arms []*arm, rows []queueRow, srows []serverRow, cleanup func() error, err error) {
	cleanup = func() error { return nil }
	name, c, consumer, raw, redisOn := rig.t.name, rig.clients[0], rig.clients[1], rig.raw, rig.t.isRedis()
	n := cfg.Samples
	meter := func(probe bool) *serverMeter {
		if !redisOn {
			return nil
		}
		return newServerMeter(rig.info, rig.t.redisOpts, probe)
	}

	// claim+ack of a step, beside a stream's XREADGROUP + XACK and a List.
	task, err := consumer.Task(queuePartition, "bench", []string{"id"}, tq.LeaseFor(time.Minute))
	if err != nil {
		return nil, nil, nil, cleanup, err
	}
	claimMeter := meter(true)
	claimAck := &arm{name: name + " claim+ack", timed: func() (time.Duration, error) {
		if err := queueRows(ctx, c, queuePartition, n); err != nil {
			return 0, err
		}
		sp, err := claimMeter.begin(ctx)
		if err != nil {
			return 0, err
		}
		start := time.Now()
		l, err := task.Claim(ctx, n)
		if err != nil {
			return 0, err
		}
		if err := l.Ack(ctx); err != nil {
			return 0, err
		}
		d := time.Since(start)
		if err := sp.end(ctx, 1); err != nil {
			return 0, err
		}
		if l.Len() != n {
			return 0, fmt.Errorf("claim leased %d rows of %d", l.Len(), n)
		}
		return d, nil
	}}
	list := &arm{name: name + " List", timed: func() (time.Duration, error) {
		if err := queueRows(ctx, c, queuePartition, n); err != nil {
			return 0, err
		}
		start := time.Now()
		m, err := c.List(ctx, queuePartition)
		if err != nil {
			return 0, err
		}
		d := time.Since(start)
		if len(m.Rows) != n {
			return 0, fmt.Errorf("list found %d rows of %d", len(m.Rows), n)
		}
		return d, nil
	}}
	stepName := fmt.Sprintf("claim+ack of %d rows", n)
	arms = []*arm{claimAck, list}
	if redisOn {
		xMeter := meter(false)
		xstep := &arm{name: name + " XREADGROUP+XACK step", timed: func() (time.Duration, error) {
			return streamsStep(ctx, raw, n, xMeter)
		}}
		arms = append(arms, xstep)
		lim := fmt.Sprintf("XREADGROUP COUNT %d + XACK", n)
		rows = append(rows, queueRow{stepName, lim, claimAck, xstep})
		srows = append(srows, serverRow{stepName, claimAck, claimMeter, lim, xstep, xMeter})
	}
	rows = append(rows, queueRow{stepName, "List", claimAck, list})

	// Wake-up.
	wake := &arm{name: name + " wake-up", calls: wakeCalls, timed: func() (time.Duration, error) { return wakeOnce(ctx, c, consumer) }}
	arms = append(arms, wake)
	const inHand = "wake-up to row in hand: Task.Wait returns the lease"
	if redisOn {
		if err := raw.Del(ctx, streamWake).Err(); err != nil {
			return nil, nil, nil, cleanup, err
		}
		if err := raw.XGroupCreateMkStream(ctx, streamWake, streamGroup, "$").Err(); err != nil {
			return nil, nil, nil, cleanup, err
		}
		xwake := &arm{name: name + " XREADGROUP BLOCK", calls: wakeCalls, timed: func() (time.Duration, error) { return xreadWakeOnce(ctx, raw) }}
		blpop := &arm{name: name + " BLPOP", calls: wakeCalls, timed: func() (time.Duration, error) { return blpopOnce(ctx, raw) }}
		arms = append(arms, xwake, blpop)
		rows = append(rows,
			queueRow{inHand, "XADD to XREADGROUP BLOCK", wake, xwake},
			queueRow{inHand, "LPUSH to BLPOP", wake, blpop})
		if rig.t.isServed() {
			r, err := openRelay(ctx)
			if err != nil {
				return nil, nil, nil, cleanup, err
			}
			cleanup = r.close
			grpcWake := &arm{name: name + " gRPC relay", calls: wakeCalls, timed: func() (time.Duration, error) { return r.wakeOnce(ctx) }}
			arms = append(arms, grpcWake)
			rows = append(rows, queueRow{inHand, relayLimit, wake, grpcWake})
		}
	} else {
		handoff := &arm{name: name + " channel", calls: wakeCalls, timed: chanOnce}
		arms = append(arms, handoff)
		rows = append(rows, queueRow{inHand, "channel hand-off", wake, handoff})
	}

	// A blocked put's wake-up, beside the same limits and the wake-up.
	blocked, err := newBlockedPut(ctx, c, consumer)
	if err != nil {
		return nil, nil, nil, cleanup, err
	}
	rig.blocked = blocked
	timeBlocked := func(from blockedFrom) func() (time.Duration, error) {
		return func() (time.Duration, error) { return blocked.once(ctx, from) }
	}
	bput := &arm{name: name + " blocked put", calls: wakeCalls, timed: timeBlocked(ackReturned)}
	bcall := &arm{name: name + " blocked put from the Ack's call", calls: wakeCalls, timed: timeBlocked(ackCalled)}
	back := &arm{name: name + " blocked put's Ack", calls: wakeCalls, timed: timeBlocked(ackOnly)}
	arms = append(arms, bput, bcall, back)
	const unblocked = "blocked put wake-up: BatchPut returns after the Ack that makes room"
	for _, r := range rows {
		if r.measure == inHand {
			rows = append(rows, queueRow{unblocked, r.limName, bput, r.lim})
		}
	}
	rows = append(rows, queueRow{unblocked, "tq wake-up (Task.Wait, above)", bput, wake},
		queueRow{"blocked put wake-up from the Ack's call: BatchPut returns", "the Ack alone (call to return)", bcall, back})

	// Contention (a served target's is the consumer sweep, runSweep).
	for _, k := range cfg.Consumers {
		if rig.t.isServed() {
			break
		}
		total := contentionRows(cfg, k)
		measure := fmt.Sprintf("contention: %d consumers, per claim", k)
		cm := meter(true)
		contend := &arm{name: fmt.Sprintf("%s contention %d", name, k), calls: contendCalls, timed: func() (time.Duration, error) {
			return contention(ctx, rig.clients[:k], total, cm)
		}}
		arms = append(arms, contend)
		if redisOn {
			xm := meter(false)
			xc := &arm{name: fmt.Sprintf("%s XREADGROUP contention %d", name, k), calls: contendRedisCalls, timed: func() (time.Duration, error) {
				return streamsContention(ctx, raw, total, k, xm)
			}}
			lpop := &arm{name: fmt.Sprintf("%s LPOP %d", name, k), calls: contendRedisCalls, timed: func() (time.Duration, error) {
				return lpopContention(ctx, raw, total, k)
			}}
			arms = append(arms, xc, lpop)
			lim := fmt.Sprintf("XREADGROUP COUNT %d + XACK", queueBatch)
			rows = append(rows,
				queueRow{measure, lim, contend, xc},
				queueRow{measure, fmt.Sprintf("LPOP COUNT %d of a list", queueBatch), contend, lpop})
			srows = append(srows, serverRow{fmt.Sprintf("contention: %d consumers", k), contend, cm, lim, xc, xm})
		} else {
			pop := &arm{name: fmt.Sprintf("%s channel pop %d", name, k), calls: contendChanCalls, timed: func() (time.Duration, error) {
				return chanContention(total, k), nil
			}}
			arms = append(arms, pop)
			rows = append(rows, queueRow{measure, "channel pop", contend, pop})
		}
	}
	return arms, rows, srows, cleanup, nil
}

// contentionRows is how many rows the contention measure of k consumers
// consumes: four steps, and at least four claims per consumer.
func contentionRows(cfg Config, k int) int {
	return max(4*cfg.Samples, 4*k*queueBatch)
}

// streamsStep times XREADGROUP COUNT n of a stream of n entries and the
// XACK of the n IDs read.
func streamsStep(ctx context.Context, raw *redis.Client, n int, sm *serverMeter) (time.Duration, error) {
	if err := fillStream(ctx, raw, streamStep, n); err != nil {
		return 0, err
	}
	if err := raw.XGroupCreate(ctx, streamStep, streamGroup, "0").Err(); err != nil {
		return 0, err
	}
	sp, err := sm.begin(ctx)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	res, err := raw.XReadGroup(ctx, &redis.XReadGroupArgs{Group: streamGroup, Consumer: "c", Streams: []string{streamStep, ">"}, Count: int64(n), Block: -1}).Result()
	if err != nil {
		return 0, err
	}
	ids := entryIDs(res)
	acked, err := raw.XAck(ctx, streamStep, streamGroup, ids...).Result()
	if err != nil {
		return 0, err
	}
	d := time.Since(start)
	if err := sp.end(ctx, 1); err != nil {
		return 0, err
	}
	if len(ids) != n || acked != int64(n) {
		return 0, fmt.Errorf("XREADGROUP read %d entries of %d, XACK acked %d", len(ids), n, acked)
	}
	return d, nil
}

func entryIDs(res []redis.XStream) []string {
	var ids []string
	for _, s := range res {
		for _, m := range s.Messages {
			ids = append(ids, m.ID)
		}
	}
	return ids
}

// wakeOnce times one hand-off through the queue: a consumer blocked in
// Task.Wait(ctx, 1) on its own Client has the row the producer put in
// hand.
func wakeOnce(ctx context.Context, c, consumer *tq.Client) (time.Duration, error) {
	p := queuePartition + "/wake"
	if err := c.ClearPartition(ctx, p); err != nil {
		return 0, err
	}
	task, err := consumer.Task(p, "waker", []string{"id"})
	if err != nil {
		return 0, err
	}
	put := func(ctx context.Context) error {
		return c.BatchPut(ctx, p, []string{"x"}, tq.Batch{"id": tq.Stacked([]int64{1}, 1)}, nil)
	}
	return timeWake(ctx, put, func(ctx context.Context) (func() error, error) {
		l, err := task.Wait(ctx, 1)
		if err != nil {
			return nil, err
		}
		if l.Len() != 1 {
			return nil, fmt.Errorf("Wait leased %d rows, want 1", l.Len())
		}
		return func() error { return l.Ack(ctx) }, nil
	})
}

// fullPartition is the blocked put measure's partition, fullTask the
// consumer's task there, whose acks clear rows.
const (
	fullPartition = queuePartition + "/full"
	fullTask      = "unblocker"
)

// blockedPut is the blocked put measure: a partition bounded at one row,
// cleared as fullTask acks it, which always holds one row between calls.
type blockedPut struct {
	c     *tq.Client // the producer's
	task  *tq.Task   // the consumer's
	n     int        // rows put so far: the next key
	calls int        // hand-offs timed from the Ack's return, warm-up included
	first int        // of those, puts that returned before the Ack
}

// blockedFrom is what blockedPut.once times.
type blockedFrom uint8

const (
	ackReturned blockedFrom = iota // the Ack returning to the put returning
	ackCalled                      // the Ack's call to the put returning
	ackOnly                        // the Ack's call to its return
)

// newBlockedPut bounds fullPartition and puts its one row.
func newBlockedPut(ctx context.Context, c, consumer *tq.Client) (*blockedPut, error) {
	if err := c.ClearPartition(ctx, fullPartition); err != nil {
		return nil, err
	}
	if err := c.SetCapacity(ctx, fullPartition, tq.Capacity{Rows: 1, ClearAcked: []string{fullTask}}); err != nil {
		return nil, err
	}
	task, err := consumer.Task(fullPartition, fullTask, []string{"id"})
	if err != nil {
		return nil, err
	}
	b := &blockedPut{c: c, task: task}
	return b, b.put(ctx)
}

func (b *blockedPut) put(ctx context.Context) error {
	b.n++
	return b.c.BatchPut(ctx, fullPartition, []string{"b" + strconv.Itoa(b.n)}, tq.Batch{"id": tq.Stacked([]int64{int64(b.n)}, 1)}, nil)
}

// once times one hand-off: the consumer claims the partition's row
// (untimed), the producer's put of the next blocks for wakeGap, the
// consumer acks the row (which clears it); the time is from the Ack
// returning to the put returning (0 when the put returned first), or as
// from says. The put's row is the next call's.
func (b *blockedPut) once(ctx context.Context, from blockedFrom) (time.Duration, error) {
	l, err := b.task.Claim(ctx, 1)
	if err != nil {
		return 0, err
	}
	if l.Len() != 1 {
		return 0, fmt.Errorf("claim of the full partition leased %d rows, want 1", l.Len())
	}
	done, cancel := background(ctx, func(ctx context.Context) stamped {
		err := b.put(ctx)
		return stamped{time.Now(), err}
	})
	defer cancel()
	time.Sleep(wakeGap)
	select {
	case p := <-done:
		return 0, fmt.Errorf("a put into the full partition returned before the Ack (%v)", p.err)
	default:
	}
	called := time.Now()
	err = l.Ack(ctx)
	acked := time.Now()
	if err != nil {
		cancel()
		<-done
		return 0, err
	}
	p := <-done
	if p.err != nil {
		return 0, p.err
	}
	switch from {
	case ackCalled:
		return p.at.Sub(called), nil
	case ackOnly:
		return acked.Sub(called), nil
	}
	b.calls++
	if p.at.Before(acked) {
		b.first++
	}
	return max(p.at.Sub(acked), 0), nil
}

// stamped is what a call run in the background returned, and when.
type stamped struct {
	at  time.Time
	err error
}

// background runs f in a goroutine on ctx bounded at 30 s (a hand-off
// that never happens fails the sample) and delivers its result; cancel
// ends it.
func background(ctx context.Context, f func(context.Context) stamped) (done <-chan stamped, cancel context.CancelFunc) {
	ch := make(chan stamped, 1)
	ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
	go func() { ch <- f(ctx) }()
	return ch, cancel
}

// timeWake runs wait, lets it block for wakeGap, runs put (of one row),
// and returns the time from put returning to wait returning (0 when wait
// returned first). What wait returns to do next (an ack; nil for nothing)
// runs after the time is taken.
func timeWake(ctx context.Context, put func(context.Context) error, wait func(context.Context) (func() error, error)) (time.Duration, error) {
	done, cancel := background(ctx, func(ctx context.Context) stamped {
		then, err := wait(ctx)
		at := time.Now()
		if err == nil && then != nil {
			err = then()
		}
		return stamped{at, err}
	})
	defer cancel()
	time.Sleep(wakeGap)
	if err := put(ctx); err != nil {
		return 0, err
	}
	returned := time.Now()
	w := <-done
	if w.err != nil {
		return 0, w.err
	}
	return max(w.at.Sub(returned), 0), nil
}

func chanOnce() (time.Duration, error) {
	ch := make(chan struct{})
	done := make(chan time.Time, 1)
	go func() {
		<-ch
		done <- time.Now()
	}()
	time.Sleep(wakeGap)
	sent := time.Now()
	ch <- struct{}{}
	return max((<-done).Sub(sent), 0), nil
}

func blpopOnce(ctx context.Context, raw *redis.Client) (time.Duration, error) {
	done := make(chan error, 1)
	var at time.Time
	go func() {
		_, err := raw.BLPop(ctx, 30*time.Second, listWake).Result()
		at = time.Now()
		done <- err
	}()
	time.Sleep(wakeGap)
	if err := raw.LPush(ctx, listWake, "1").Err(); err != nil {
		return 0, err
	}
	pushed := time.Now()
	if err := <-done; err != nil {
		return 0, err
	}
	return max(at.Sub(pushed), 0), nil
}

// xreadWakeOnce times an XADD returning to a client blocked in
// XREADGROUP BLOCK returning the entry (0 when the reader returned first);
// the reader acks it after.
func xreadWakeOnce(ctx context.Context, raw *redis.Client) (time.Duration, error) {
	type read struct {
		at  time.Time
		ids []string
		err error
	}
	done := make(chan read, 1)
	go func() {
		res, err := raw.XReadGroup(ctx, &redis.XReadGroupArgs{Group: streamGroup, Consumer: "waker",
			Streams: []string{streamWake, ">"}, Count: 1, Block: 30 * time.Second}).Result()
		done <- read{time.Now(), entryIDs(res), err}
	}()
	time.Sleep(wakeGap)
	id, err := raw.XAdd(ctx, &redis.XAddArgs{Stream: streamWake, MaxLen: 1000, Approx: true, Values: []any{"id", 1}}).Result()
	if err != nil {
		return 0, err
	}
	added := time.Now()
	r := <-done
	if r.err != nil {
		return 0, r.err
	}
	if len(r.ids) != 1 || r.ids[0] != id {
		return 0, fmt.Errorf("XREADGROUP BLOCK returned %v, want [%s]", r.ids, id)
	}
	if err := raw.XAck(ctx, streamWake, streamGroup, id).Err(); err != nil {
		return 0, err
	}
	return max(r.at.Sub(added), 0), nil
}

// contention times one consumer per client claiming and acking total
// rows, and returns the time per claim that returned rows.
func contention(ctx context.Context, clients []*tq.Client, total int, sm *serverMeter) (time.Duration, error) {
	p := queuePartition + "/contend"
	if err := queueRows(ctx, clients[0], p, total); err != nil {
		return 0, err
	}
	tasks, err := tasksOf(clients, p, "contend")
	if err != nil {
		return 0, err
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var claims, got int
	var first error
	sp, err := sm.begin(ctx)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	for _, task := range tasks {
		wg.Go(func() {
			for {
				l, err := task.Claim(ctx, queueBatch)
				if err == nil && l.Len() > 0 {
					err = l.Ack(ctx)
				}
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				done := err != nil || l.Len() == 0
				if !done {
					claims++
					got += l.Len()
				}
				mu.Unlock()
				if done {
					return
				}
			}
		})
	}
	wg.Wait()
	d := time.Since(start)
	if err := sp.end(ctx, claims); err != nil {
		return 0, err
	}
	if first != nil {
		return 0, first
	}
	if got != total {
		return 0, fmt.Errorf("consumers claimed %d rows of %d", got, total)
	}
	return d / time.Duration(claims), nil
}

// streamsContention times consumers goroutines, each a consumer of the
// group, doing XREADGROUP COUNT queueBatch + XACK until a stream of total
// entries is consumed, and returns the time per read that returned
// entries.
func streamsContention(ctx context.Context, raw *redis.Client, total, consumers int, sm *serverMeter) (time.Duration, error) {
	if err := fillStream(ctx, raw, streamContend, total); err != nil {
		return 0, err
	}
	if err := raw.XGroupCreate(ctx, streamContend, streamGroup, "0").Err(); err != nil {
		return 0, err
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var reads, got int
	var first error
	sp, err := sm.begin(ctx)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	for i := range consumers {
		consumer := "c" + strconv.Itoa(i)
		wg.Go(func() {
			for {
				res, err := raw.XReadGroup(ctx, &redis.XReadGroupArgs{Group: streamGroup, Consumer: consumer,
					Streams: []string{streamContend, ">"}, Count: queueBatch, Block: -1}).Result()
				ids := entryIDs(res)
				if errors.Is(err, redis.Nil) || err == nil && len(ids) == 0 {
					return
				}
				if err == nil {
					err = raw.XAck(ctx, streamContend, streamGroup, ids...).Err()
				}
				mu.Lock()
				if err != nil {
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
				reads++
				got += len(ids)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	d := time.Since(start)
	if err := sp.end(ctx, reads); err != nil {
		return 0, err
	}
	if first != nil {
		return 0, first
	}
	if got != total {
		return 0, fmt.Errorf("XREADGROUP consumers read %d entries of %d", got, total)
	}
	return d / time.Duration(reads), nil
}

func chanContention(total, consumers int) time.Duration {
	ch := make(chan int, total)
	for i := range total {
		ch <- i
	}
	close(ch)
	var wg sync.WaitGroup
	start := time.Now()
	for range consumers {
		wg.Go(func() {
			for range ch {
			}
		})
	}
	wg.Wait()
	return time.Since(start) / time.Duration((total+queueBatch-1)/queueBatch)
}

func lpopContention(ctx context.Context, raw *redis.Client, total, consumers int) (time.Duration, error) {
	items := make([]any, total)
	for i := range items {
		items[i] = i
	}
	if err := raw.Del(ctx, listContend).Err(); err != nil {
		return 0, err
	}
	if err := raw.RPush(ctx, listContend, items...).Err(); err != nil {
		return 0, err
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var pops int
	var first error
	start := time.Now()
	for range consumers {
		wg.Go(func() {
			for {
				vals, err := raw.LPopCount(ctx, listContend, queueBatch).Result()
				if errors.Is(err, redis.Nil) || err == nil && len(vals) == 0 {
					return
				}
				mu.Lock()
				if err != nil {
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
				pops++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	d := time.Since(start)
	if first != nil {
		return 0, first
	}
	return d / time.Duration(pops), nil
}

// tasksOf is a Task of name on partition (its rows' one field "id") for
// each of clients: a consumer each.
func tasksOf(clients []*tq.Client, partition, name string) ([]*tq.Task, error) {
	tasks := make([]*tq.Task, len(clients))
	for i, c := range clients {
		var err error
		if tasks[i], err = c.Task(partition, name, []string{"id"}); err != nil {
			return nil, err
		}
	}
	return tasks, nil
}
