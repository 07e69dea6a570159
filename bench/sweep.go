package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/tq"
)

// The consumer sweep (served targets): C consumers, each a tq:// client of
// its own, claim queueBatch rows and ack them in a loop, beside C Redis
// Streams consumers doing XREADGROUP COUNT queueBatch + XACK on the same
// Redis server and, up to sweepDirectMax consumers, C tq clients of the
// redis:// engine itself (no server: each replays the partition's log).
// A sample lasts cfg.SweepTime: the consumers stop claiming once it has
// passed (or the rows run out). Per sample: the median of the claims'
// times (each claim with the ack of its lease, timed alone), the claims
// per second of wall time, and the CPU time per claim of the tq server
// process, the Redis server's main thread and the bench process.

// sweepDirectMax is the largest consumer count at which the sweep runs tq
// on redis:// directly: every client replays the log, so the cost grows
// with the count.
const sweepDirectMax = 64

// sweepMaxRows bounds the rows (or entries) one sample writes.
const sweepMaxRows = 1_000_000

// sweepHeadroom is how many more rows than the last sample's rate needs
// a sample writes, so that it ends by its time, not by running out.
const sweepHeadroom = 1.25

const (
	sweepPartition = queuePartition + "/sweep"
	streamSweep    = "tqgo-bench:sweep-stream"
	sweepPrefix    = "tqgo-bench-direct" // the direct clients' keys on the served Redis server
)

// sweepSample is one sample of one arm of the sweep.
type sweepSample struct {
	claims    int     // claims (reads) that returned rows
	wall      float64 // seconds from the start to the last consumer's stop
	latency   float64 // median seconds of one claim+ack (read+ack)
	serverCPU float64 // tq server process, seconds per claim (0: no server)
	redisCPU  float64 // Redis main thread, seconds per claim
	redisOut  float64 // bytes Redis sent its clients, per claim
	benchCPU  float64 // this process, seconds per claim
}

// sweepArm is one kind of consumer at one count.
type sweepArm struct {
	label  string
	served bool // through the tq server: its CPU is the arm's
	a      *arm
	runs   []sweepSample
	rate   float64 // claims per second of the last sample
}

// last is the arm's repetitions: its runs after the warm-up.
func (s *sweepArm) last(reps int) []sweepSample {
	return s.runs[max(len(s.runs)-reps, 0):]
}

func sweepTable(cfg Config) *Table {
	return &Table{
		ID: "queue-sweep",
		Title: fmt.Sprintf("Queue: %s consumers through a tq server, beside Redis Streams and tq on redis:// directly",
			joinInts(cfg.Consumers)),
		Intro: fmt.Sprintf("A tq server (`tq serve -engine redis://… -listen 127.0.0.1:PORT`, an OS process of its own) in front of "+
			"a Redis server. C consumers (goroutines of the bench, each a tq.Client of its own: tq.Open of the tq:// URL, which "+
			"writes and reads cells on the Redis server itself and makes its metadata calls to the tq server; one Task name) "+
			"each loop Claim(%[1]d) and the Ack of the lease on a partition of one-field rows; beside them, on the same Redis "+
			"server, C Redis Streams consumers of one group (a connection each) loop XREADGROUP COUNT %[1]d and the XACK of the "+
			"IDs read; up to %[7]d consumers, the tq loop again in C OS processes of their own (the bench binary run as a "+
			"consumer, each a tq:// client; the bench CPU column is then theirs, from the start signal to their loop's end); and, up to %[2]d consumers, C tq clients of the redis:// engine itself (no server: each replays the "+
			"partition's log), under a key prefix of their own. A sample lasts %[3]v: the rows (entries) are written "+
			"beforehand, untimed, %.2[4]fx what the arm's previous sample consumed in that time (its warm-up's: 4 claims per "+
			"consumer), at most %[5]s; the consumers stop at the first claim that ends after %[3]v or returns no rows. "+
			"latency: the median time of one claim with its ack (read with its XACK) over the sample's claims; claims/s: "+
			"the claims that returned rows over the wall time; time per claim: its inverse. CPU per claim: user + system time "+
			"of the tq server process (/proc/PID/stat), of the Redis server's main thread (INFO cpu) and of the bench process "+
			"(every consumer's client; /proc/self/stat), each over the sample, divided by its claims; Redis bytes out per claim: "+
			"what the Redis server sent all its clients (INFO stats total_net_output_bytes) over the sample, per claim. The arms of one C rotate "+
			"(interleaved repetitions); median [min–max] of %[6]d repetitions; \"÷ Streams\" is the median over the Streams "+
			"arm's at the same C. Two shared cores run the bench, the tq server and Redis together. "+
			"The gRPC limit, "+echoLimit+": C clients of a relay process (the bench binary run again: grpc-go and nothing of "+
			"tq, raw bytes with no protobuf), each on a connection and a bidirectional stream of its own, loop sending a "+
			"message of %[8]d bytes, which the relay answers at once with %[9]d bytes: the sizes of a Claim(%[1]d) with the "+
			"ack of the previous lease riding on it as a tq client sends it on its Calls stream, and of its compact reply; an "+
			"exchange counts as a claim, and the relay's CPU is in the tq server column.",
			queueBatch, sweepDirectMax, cfg.SweepTime, sweepHeadroom, fmtCount(sweepMaxRows), cfg.Reps, sweepProcMax,
			len(relayEchoMsg), len(relayEchoReply)),
		Header: []string{"consumers", "consumer", "claim+ack latency", "claims/s", "time per claim", "latency ÷ Streams",
			"time per claim ÷ Streams", "tq server CPU per claim", "Redis CPU per claim", "bench CPU per claim", "Redis bytes out per claim"},
	}
}

// sweepSteps is the number of arms the sweep runs.
func sweepSteps(cfg Config) int {
	n := 0
	for _, k := range cfg.Consumers {
		n += 3
		if k <= sweepDirectMax {
			n++
		}
		if k <= sweepProcMax {
			n++
		}
	}
	return n
}

// directURL is the served Redis server's URL with the direct clients'
// key prefix.
func directURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("redis URL %q: %w", redact(raw), err)
	}
	q := u.Query()
	q.Set("prefix", sweepPrefix)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func runSweep(ctx context.Context, cfg Config, m *meter, rig *queueRig, tbl *Table, rep *Report) error {
	t := rig.t
	var direct []*tq.Client
	defer func() {
		if len(direct) > 0 {
			direct[0].ClearPartition(context.WithoutCancel(ctx), sweepPartition)
		}
		for _, c := range direct {
			c.Close()
		}
	}()
	if nd := maxUpTo(cfg.Consumers, sweepDirectMax); nd > 0 {
		u, err := directURL(t.redisURL)
		if err != nil {
			return err
		}
		for range nd {
			c, err := tq.Open(ctx, u)
			if err != nil {
				return fmt.Errorf("open %s directly: %w", redact(u), err)
			}
			direct = append(direct, c)
		}
	}
	// The gRPC limit: a relay process and, per consumer, a client of it
	// with a connection of its own (see relay.go).
	rp, err := startRelay(ctx)
	if err != nil {
		return err
	}
	var echo []*relayClient
	defer func() {
		for _, c := range echo {
			_ = c.close()
		}
		_ = rp.stop()
	}()
	for range slices.Max(cfg.Consumers) {
		c, err := dialRelay(ctx, rp.addr)
		if err != nil {
			return err
		}
		echo = append(echo, c)
	}
	pid := t.serve.pid()
	for _, k := range cfg.Consumers {
		served := &sweepArm{label: "tq:// (tq serve)", served: true}
		served.a = &arm{name: fmt.Sprintf("%s sweep %d", t.name, k), calls: 1, timed: func() (time.Duration, error) {
			return served.tqRun(ctx, cfg, rig, rig.clients[:k], pid)
		}}
		arms := []*sweepArm{served}
		if k <= sweepProcMax {
			procs := &sweepArm{label: "tq:// (tq serve), OS processes", served: true}
			procs.a = &arm{name: fmt.Sprintf("%s sweep processes %d", t.name, k), calls: 1, timed: func() (time.Duration, error) {
				return procs.procRun(ctx, cfg, rig, k, pid)
			}}
			arms = append(arms, procs)
		}
		if k <= sweepDirectMax {
			d := &sweepArm{label: "tq on redis:// (no server)"}
			d.a = &arm{name: fmt.Sprintf("%s sweep direct %d", t.name, k), calls: 1, timed: func() (time.Duration, error) {
				return d.tqRun(ctx, cfg, rig, direct[:k], pid)
			}}
			arms = append(arms, d)
		}
		grpcArm := &sweepArm{label: echoLimit, served: true}
		grpcArm.a = &arm{name: fmt.Sprintf("%s sweep gRPC %d", t.name, k), calls: 1, timed: func() (time.Duration, error) {
			return grpcArm.echoRun(ctx, cfg, rig, echo[:k], rp.cmd.Process.Pid)
		}}
		arms = append(arms, grpcArm)
		streams := &sweepArm{label: fmt.Sprintf("XREADGROUP COUNT %d + XACK", queueBatch)}
		streams.a = &arm{name: fmt.Sprintf("%s sweep XREADGROUP %d", t.name, k), calls: 1, timed: func() (time.Duration, error) {
			return streams.streamsRun(ctx, cfg, rig, k, pid)
		}}
		arms = append(arms, streams)
		var as []*arm
		for _, s := range arms {
			as = append(as, s.a)
		}
		if _, err := m.run(ctx, fmt.Sprintf("queue sweep %s %d", t.name, k), as); err != nil {
			return err
		}
		addSweepRows(cfg, t, k, arms, streams, tbl, rep)
	}
	return nil
}

// maxUpTo is the largest of ns that is at most limit (0 for none).
func maxUpTo(ns []int, limit int) int {
	best := 0
	for _, n := range ns {
		if n <= limit {
			best = max(best, n)
		}
	}
	return best
}

// sweepRows is how many rows the next sample of s with k consumers
// writes.
func (s *sweepArm) sweepRows(cfg Config, k int) int {
	lo := max(4*k*queueBatch, 4*cfg.Samples)
	want := int(math.Ceil(s.rate*cfg.SweepTime.Seconds()*sweepHeadroom)) * queueBatch
	return min(max(lo, want), max(lo, sweepMaxRows))
}

// tqRun is one sample of tq consumers, one per client.
func (s *sweepArm) tqRun(ctx context.Context, cfg Config, rig *queueRig, clients []*tq.Client, pid int) (time.Duration, error) {
	rows := s.sweepRows(cfg, len(clients))
	if err := queueRows(ctx, clients[0], sweepPartition, rows); err != nil {
		return 0, err
	}
	tasks, err := tasksOf(clients, sweepPartition, "sweep")
	if err != nil {
		return 0, err
	}
	// Each consumer's loop acks its previous lease with its next claim
	// (tq.Acking): one call per claim through a tq server, as a worker
	// does; the claim that finds nothing acks the last.
	prev := make([]*tq.Lease, len(clients))
	return s.run(ctx, cfg, rig, len(clients), pid, func(i int) (int, error) {
		l, err := tasks[i].Claim(ctx, queueBatch, tq.Acking(prev[i]))
		if err != nil {
			return 0, err
		}
		prev[i] = l
		return l.Len(), nil
	})
}

// echoLimit is the sweep's gRPC limit's label.
const echoLimit = "gRPC stream round trip (grpc-go alone)"

// echoRun is one sample of the gRPC limit: each client sends an echo of a
// claim's size and reads its reply of a claim's reply's, counted as a
// claim of queueBatch rows, until the sample's time has passed. The
// relay's CPU is the server's.
func (s *sweepArm) echoRun(ctx context.Context, cfg Config, rig *queueRig, clients []*relayClient, pid int) (time.Duration, error) {
	return s.run(ctx, cfg, rig, len(clients), pid, func(i int) (int, error) {
		return queueBatch, clients[i].call(ctx, relayEchoMsg, len(relayEchoReply))
	})
}

// streamsRun is one sample of k Streams consumers of one group.
func (s *sweepArm) streamsRun(ctx context.Context, cfg Config, rig *queueRig, k, pid int) (time.Duration, error) {
	raw := rig.raw
	if err := fillStream(ctx, raw, streamSweep, s.sweepRows(cfg, k)); err != nil {
		return 0, err
	}
	if err := raw.XGroupCreate(ctx, streamSweep, streamGroup, "0").Err(); err != nil {
		return 0, err
	}
	names := make([]string, k)
	for i := range names {
		names[i] = "c" + strconv.Itoa(i)
	}
	return s.run(ctx, cfg, rig, k, pid, func(i int) (int, error) {
		res, err := raw.XReadGroup(ctx, &redis.XReadGroupArgs{Group: streamGroup, Consumer: names[i],
			Streams: []string{streamSweep, ">"}, Count: queueBatch, Block: -1}).Result()
		ids := entryIDs(res)
		if errors.Is(err, redis.Nil) || err == nil && len(ids) == 0 {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		return len(ids), raw.XAck(ctx, streamSweep, streamGroup, ids...).Err()
	})
}

// sweepCPU is the CPU seconds used so far by the tq server, Redis's main
// thread and this process, and the bytes Redis has sent its clients.
type sweepCPU struct{ server, redis, bench, redisOut float64 }

func readSweepCPU(ctx context.Context, rig *queueRig, pid int) (sweepCPU, error) {
	var c sweepCPU
	snap, err := snapServer(ctx, rig.info)
	if err != nil {
		return c, err
	}
	c.redis = snap.cpu
	if c.redisOut, err = redisOutBytes(ctx, rig.info); err != nil {
		return c, err
	}
	if c.server, err = procCPU(pid); err != nil {
		return c, err
	}
	c.bench, err = procCPU(0)
	return c, err
}

// run runs k consumers, each calling claim(i) (which returns the rows it
// claimed and acked) until cfg.SweepTime has passed or a claim returns no
// rows, records the sample and returns the wall time per claim.
func (s *sweepArm) run(ctx context.Context, cfg Config, rig *queueRig, k, pid int, claim func(i int) (int, error)) (time.Duration, error) {
	lats := make([][]float64, k)
	errs := make([]error, k)
	before, err := readSweepCPU(ctx, rig, pid)
	if err != nil {
		return 0, err
	}
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(cfg.SweepTime)
	for i := range k {
		wg.Go(func() {
			for {
				t0 := time.Now()
				n, err := claim(i)
				t1 := time.Now()
				if err != nil {
					errs[i] = err
					return
				}
				if n == 0 {
					return
				}
				lats[i] = append(lats[i], t1.Sub(t0).Seconds())
				if t1.After(deadline) {
					return
				}
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	after, err := readSweepCPU(ctx, rig, pid)
	if err := errors.Join(append(errs, err)...); err != nil {
		return 0, err
	}
	all := slices.Concat(lats...)
	if len(all) == 0 {
		return 0, fmt.Errorf("%d consumers claimed no rows", k)
	}
	n := float64(len(all))
	smp := sweepSample{claims: len(all), wall: wall.Seconds(), latency: summarize(all).Median,
		serverCPU: (after.server - before.server) / n, redisCPU: (after.redis - before.redis) / n, benchCPU: (after.bench - before.bench) / n,
		redisOut: (after.redisOut - before.redisOut) / n}
	s.runs = append(s.runs, smp)
	s.rate = n / wall.Seconds()
	return wall / time.Duration(len(all)), nil
}

// addSweepRows adds the rows of k consumers: one per arm, the ratios over
// the Streams arm's.
func addSweepRows(cfg Config, t *target, k int, arms []*sweepArm, streams *sweepArm, tbl *Table, rep *Report) {
	type dists struct{ lat, rate, per, server, redis, bench, out Dist }
	get := func(s *sweepArm) dists {
		var d [7][]float64
		for _, r := range s.last(cfg.Reps) {
			for i, v := range []float64{r.latency, float64(r.claims) / r.wall, r.wall / float64(r.claims), r.serverCPU, r.redisCPU, r.benchCPU, r.redisOut} {
				d[i] = append(d[i], v)
			}
		}
		return dists{summarize(d[0]), summarize(d[1]), summarize(d[2]), summarize(d[3]), summarize(d[4]), summarize(d[5]), summarize(d[6])}
	}
	lim := get(streams)
	for _, s := range arms {
		d := get(s)
		latRatio, perRatio := "—", "—"
		if s != streams {
			latRatio, perRatio = fmtRatio(d.lat.Median/lim.lat.Median), fmtRatio(d.per.Median/lim.per.Median)
		}
		server := "—"
		if s.served {
			server = fmtTime(d.server)
		}
		tbl.Rows = append(tbl.Rows, []string{strconv.Itoa(k), s.label, fmtTime(d.lat), fmtCountDist(d.rate), fmtTime(d.per),
			latRatio, perRatio, server, fmtTime(d.redis), fmtTime(d.bench), fmtBytesDist(d.out)})
		row := t.name + " " + strconv.Itoa(k)
		rep.Records = append(rep.Records,
			Record{Suite: "queue", Table: tbl.ID, Row: row, Series: s.label + ": claim+ack latency", Unit: "s", Dist: d.lat},
			Record{Suite: "queue", Table: tbl.ID, Row: row, Series: s.label + ": claims per second", Unit: "1/s", Dist: d.rate},
			Record{Suite: "queue", Table: tbl.ID, Row: row, Series: s.label + ": time per claim", Unit: "s", Dist: d.per},
			Record{Suite: "queue", Table: tbl.ID, Row: row, Series: s.label + ": Redis CPU per claim", Unit: "s", Dist: d.redis},
			Record{Suite: "queue", Table: tbl.ID, Row: row, Series: s.label + ": bench CPU per claim", Unit: "s", Dist: d.bench},
			Record{Suite: "queue", Table: tbl.ID, Row: row, Series: s.label + ": Redis bytes out per claim", Unit: "B", Dist: d.out})
		if s.served {
			rep.Records = append(rep.Records,
				Record{Suite: "queue", Table: tbl.ID, Row: row, Series: s.label + ": tq server CPU per claim", Unit: "s", Dist: d.server})
		}
	}
}

// redisOutBytes is the bytes the Redis server has sent its clients
// (INFO stats total_net_output_bytes).
func redisOutBytes(ctx context.Context, c *redis.Client) (float64, error) {
	info, err := c.Info(ctx, "stats").Result()
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_net_output_bytes:"); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("INFO stats: no total_net_output_bytes")
}

// fmtBytesDist prints byte counts as "median [min–max]" in the median's
// unit: 1.2 KiB [1.1–1.4].
func fmtBytesDist(d Dist) string {
	if d.N == 0 || math.IsNaN(d.Median) {
		return "n/a"
	}
	scale, unit := 1.0, "B"
	switch {
	case d.Median >= 1<<20:
		scale, unit = 1.0/(1<<20), "MiB"
	case d.Median >= 1<<10:
		scale, unit = 1.0/(1<<10), "KiB"
	}
	return fmt.Sprintf("%s %s [%s–%s]", sig3(d.Median*scale), unit, sig3(d.Min*scale), sig3(d.Max*scale))
}

// fmtCountDist prints a rate as "median [min–max]" with thousands
// separators: 12,300 [11,900–12,800].
func fmtCountDist(d Dist) string {
	if d.N == 0 || math.IsNaN(d.Median) {
		return "n/a"
	}
	r := func(x float64) string { return fmtCount(int(math.Round(x))) }
	return fmt.Sprintf("%s [%s–%s]", r(d.Median), r(d.Min), r(d.Max))
}
