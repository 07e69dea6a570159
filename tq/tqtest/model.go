package tqtest

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/tq"
)

// ModelEnv is one queue under test for RunModel.
type ModelEnv struct {
	// Open returns a new client of the queue: every client it returns
	// shares one store, as processes on one server do. RunModel opens two
	// at a time and closes each one it opens (a client closed mid-history
	// abandons its leases, as a consumer killed with SIGKILL does).
	Open func(t *testing.T) *tq.Client
	// Advance moves the engine's clock forward by d. Nil: the engine's
	// clock is not controllable, and histories never rely on a lease or a
	// Nack delay ending (their leases and delays last an hour).
	Advance func(d time.Duration)
	// Blocks says the clients Open returns put with tq.WithIndexBlocks:
	// index order is then put order among one client's puts only, so the
	// model takes each new row's index from the engine right after its
	// put (and checks that order per client) rather than predicting it.
	Blocks bool
}

var modelSeedFlag = flag.String("tqmodel.seed", "", "RunModel: run the history of this seed only (also TQ_MODEL_SEED)")

// modelConfig is what the environment asks of RunModel.
type modelConfig struct {
	histories, ops int
	parallel       int // histories run at once outside a bubble
	seeds          []int64
	shrink, log    bool
}

func readModelConfig(t *testing.T) modelConfig {
	cfg := modelConfig{histories: 100, ops: 80, parallel: 8}
	num := func(name string, into *int) {
		if s := os.Getenv(name); s != "" {
			v, err := strconv.Atoi(s)
			if err != nil || v < 1 {
				t.Fatalf("%s=%q: want a positive number", name, s)
			}
			*into = v
		}
	}
	num("TQ_MODEL_HISTORIES", &cfg.histories)
	num("TQ_MODEL_OPS", &cfg.ops)
	num("TQ_MODEL_PARALLEL", &cfg.parallel)
	base := int64(1)
	if s := os.Getenv("TQ_MODEL_BASE"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("TQ_MODEL_BASE=%q: %v", s, err)
		}
		base = v
	}
	only := *modelSeedFlag
	if only == "" {
		only = os.Getenv("TQ_MODEL_SEED")
	}
	if only != "" {
		for _, f := range strings.Split(only, ",") {
			v, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
			if err != nil {
				t.Fatalf("model seed %q: %v", f, err)
			}
			cfg.seeds = append(cfg.seeds, v)
		}
	} else {
		for i := range cfg.histories {
			cfg.seeds = append(cfg.seeds, base+int64(i))
		}
	}
	cfg.shrink = os.Getenv("TQ_MODEL_SHRINK") == "1"
	cfg.log = os.Getenv("TQ_MODEL_LOG") == "1"
	return cfg
}

// RunModel drives the queue newEnv makes (a fresh one per history) through
// random histories of calls of the public tq API, from two clients of the
// queue, and holds every result to one reference model of the documented
// contract: puts, reads, tags, clears of fields, and the consumption of the partition by
// eight tasks (a plain task, one that needs two fields, a MaxDeliveries
// task, a group task, a group task whose groups are released partial past
// a GroupDeadline and one whose overdue groups wait as stragglers, a pair
// of ranks and a staleness task), with claims, waits, settles, resets,
// dead rows, Status and the waiting groups it lists, Stragglers, Pace,
// and a Ratio's AwaitInsert and AwaitSample.
//
// Each history is a subtest named by its seed. TQ_MODEL_HISTORIES (100)
// and TQ_MODEL_OPS (80) size the run, TQ_MODEL_BASE (1) is the first
// seed; TQ_MODEL_SEED=N[,M...] or -args -tqmodel.seed=N replays those
// seeds only, and TQ_MODEL_SHRINK=1 shrinks a failing history to a
// minimal one (each try replays it on a fresh queue) and prints it too;
// TQ_MODEL_LOG=1 prints every history, passing ones included. RunModel
// plays TQ_MODEL_PARALLEL (8) histories at once, each on its own queue
// (1: one after another), so newEnv and the ModelEnvs it returns must be
// safe for concurrent use; RunModelFakeClock plays one at a time.
//
// Two knobs help tell divergences apart: TQ_MODEL_LIST_FIRST=1 makes the
// client of each claim List the partition first, so that its copy of the
// metadata is current (it hides the divergences of a client's stale view,
// so that others show), and TQ_MODEL_NO=reset,clear,... leaves those step
// kinds out of the histories it generates (the kinds: put, put1, tags,
// badput, clear, clearp, clearf, get, list, lookup, claim, wait, ack, nack,
// extend, advance, reset, dead, retry, drop, status, tstatus, version,
// reopen, capacity, stragglers, pace, insert, sample). A seed names a
// history only together with both.
//
// Where the contract leaves a choice open the model accepts every allowed
// outcome (the comments at each place in model_step.go and model_state.go
// say why): which rows make up a rank's share of a new batch (any split
// whose sizes differ by at most one), the order of rows within a group
// and within a rank's share, whether a share's metadata is the rows' as
// the batch was selected or as they are now, whether Status lists a task
// whose rows are all ready and undelivered, which error a read that both
// names an unknown key and misses a field returns, whether a Nack resent
// after a Retry is Lost, and, once the partition held no row, whether the
// engine forgot it (the groups it learned from claims, a Ratio's counts):
// those are not judged until a claim teaches it again. Waiting groups are
// compared by id, rows and overdue, not by Since (the engine's clock). Steps whose outcome would depend on a choice left open
// and then be invisible (a Nack resent with a new delay; an Extend that
// revives a lease of a rank batch closed with none running; a step landing
// exactly on a deadline) are not generated, and are skipped on replay.
func RunModel(t *testing.T, newEnv func(t *testing.T) ModelEnv) {
	t.Helper()
	runModel(t, newEnv, false)
}

// RunModelFakeClock is RunModel with each history in a testing/synctest
// bubble, where time moves only when every goroutine of the bubble waits:
// the engine's clock is the bubble's, and an Advance that newEnv leaves nil
// sleeps, which moves it at once. Leases then last seconds, and histories
// let them end, Nack delays pass and lost leases come back. It suits an
// engine whose goroutines and timers all live in the test's process (the
// memory engine); newEnv is called inside the bubble.
func RunModelFakeClock(t *testing.T, newEnv func(t *testing.T) ModelEnv) {
	t.Helper()
	runModel(t, newEnv, true)
}

func runModel(t *testing.T, newEnv func(t *testing.T) ModelEnv, bubble bool) {
	cfg := readModelConfig(t)
	start := time.Now()
	var failed atomic.Int64
	history := func(seed int64) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			res := playIn(t, newEnv, bubble, seed, cfg.ops, nil)
			if res.div == nil {
				if cfg.log {
					t.Logf("history of seed %d:\n%s", seed, res.report())
				}
				return
			}
			failed.Add(1)
			var b strings.Builder
			fmt.Fprintf(&b, "model divergence, seed %d (replay: TQ_MODEL_SEED=%d go test -run '%s', or -args -tqmodel.seed=%d)\n", seed, seed, t.Name(), seed)
			b.WriteString(res.report())
			if cfg.shrink {
				min := shrink(t, newEnv, bubble, seed, res)
				fmt.Fprintf(&b, "\nminimal history (%d steps, replayed on a fresh queue):\n%s", len(min.hist), min.report())
			}
			t.Error(b.String())
		})
	}
	// A history in a bubble runs on the CPU alone (its clock moves at
	// once), so histories there run one at a time. Outside, a history
	// mostly waits (for round trips, and out the calls it predicts to
	// block), so cfg.parallel of them run at once, each on its own queue;
	// their subtests are started from goroutines of their own, which
	// -parallel does not bound.
	if bubble || cfg.parallel == 1 {
		for _, seed := range cfg.seeds {
			history(seed)
		}
	} else {
		slots := make(chan struct{}, cfg.parallel)
		var wg sync.WaitGroup
		for _, seed := range cfg.seeds {
			slots <- struct{}{}
			wg.Go(func() {
				defer func() { <-slots }()
				history(seed)
			})
		}
		wg.Wait()
	}
	t.Logf("%d model histories of %d steps: %d diverged (%v)", len(cfg.seeds), cfg.ops, failed.Load(), time.Since(start).Round(time.Millisecond))
}

// playIn plays one history (a new one from seed, or script), in a bubble
// of its own when asked.
func playIn(t *testing.T, newEnv func(t *testing.T) ModelEnv, bubble bool, seed int64, ops int, script []mop) (res playResult) {
	if !bubble {
		return play(t, newEnv(t), false, seed, ops, script)
	}
	synctest.Test(t, func(t *testing.T) {
		env := newEnv(t)
		if env.Advance == nil {
			env.Advance = time.Sleep
		}
		res = play(t, env, true, seed, ops, script)
	})
	return res
}

// divergence is a result the model does not allow.
type divergence struct {
	what      string // what differs, the same for every run of the same difference
	want, got string
}

type playResult struct {
	seed int64
	hist []mop
	div  *divergence
}

func (r playResult) report() string {
	var b strings.Builder
	for _, op := range r.hist {
		b.WriteString("  " + op.String() + "\n")
	}
	if d := r.div; d != nil {
		fmt.Fprintf(&b, "diverged at the last step: %s\n  want: %s\n  got:  %s\n", d.what, d.want, d.got)
	}
	return b.String()
}

// play runs a history on env: script's steps, or ops steps chosen from
// seed. It stops at the first divergence.
func play(t *testing.T, env ModelEnv, clock bool, seed int64, ops int, script []mop) playResult {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x7471))
	r := newRunner(t, env, clock, rng)
	defer r.closeAll()
	res := playResult{seed: seed}
	n := ops
	if script != nil {
		n = len(script)
	}
	for i := range n {
		var op mop
		if script != nil {
			op = script[i]
			op.note = ""
		} else {
			op = r.gen(rng, i)
		}
		div := r.step(&op)
		r.m.closeIdle()
		r.m.emptied()
		res.hist = append(res.hist, op)
		if div != nil {
			res.div = div
			return res
		}
	}
	return res
}

// shrink looks for a shorter history that diverges the same way: it
// drops runs of steps, halving their length, for as long as one still
// diverges (at most 400 replays, each on a fresh queue, for at most
// five minutes).
func shrink(t *testing.T, newEnv func(t *testing.T) ModelEnv, bubble bool, seed int64, res playResult) playResult {
	best := res
	tries := 0
	deadline := time.Now().Add(5 * time.Minute)
	fails := func(script []mop) (playResult, bool) {
		tries++
		if time.Now().After(deadline) {
			tries = 400
			return playResult{}, false
		}
		r := playIn(t, newEnv, bubble, seed, 0, script)
		return r, r.div != nil && r.div.what == res.div.what
	}
	for chunk := len(best.hist) / 2; chunk >= 1 && tries < 400; {
		removed := false
		for start := 0; start+chunk <= len(best.hist)-1 && tries < 400; {
			// The last step is the one that diverges: keep it.
			script := append(append([]mop{}, best.hist[:start]...), best.hist[start+chunk:]...)
			if r, ok := fails(script); ok {
				best, removed = r, true
				continue
			}
			start += chunk
		}
		if !removed {
			chunk /= 2
		}
	}
	// Steps the shrunk history skipped (a lease it never made) go too.
	var kept []mop
	for _, op := range best.hist {
		if op.note != "skipped" {
			kept = append(kept, op)
		}
	}
	if len(kept) < len(best.hist) {
		if r, ok := fails(kept); ok {
			best = r
		}
	}
	return best
}

// runner plays a history: the clients, their task handles and leases,
// and the model.
type runner struct {
	t        *testing.T
	env      ModelEnv
	clock    bool
	m        *model
	tasks    map[string]taskDef
	clients  [2]*tq.Client
	handles  [2]map[string]*tq.Task
	versions [2]int64 // each client's staleness handle's version
	dropped  [2]int64 // what that handle's Stats().Dropped must be
	leases   map[int]*mlease
	leaseIDs []int
	index    map[int]uint64 // row id -> the index the engine gave it
	owner    map[uint64]int
	// With ModelEnv.Blocks: the client that put each row first.
	putBy   map[int]*tq.Client
	rkN     int
	delays  []time.Duration // Nack delays
	extends []time.Duration
}

// mlease is a lease a claim returned, held by a client.
type mlease struct {
	id    int // the claim's step number
	slot  int
	task  string
	rank  int
	token int // what the rows' records name: id, or the batch's for a rank's share
	rows  []leaseRow
	l     *tq.Lease
}

type leaseRow struct {
	key string
	id  int
}

func newRunner(t *testing.T, env ModelEnv, clock bool, rng *rand.Rand) *runner {
	lease := time.Hour
	delays := []time.Duration{0, 0, time.Hour}
	extends := []time.Duration{2 * time.Hour}
	if clock {
		lease = 10 * time.Second
		delays = []time.Duration{0, 0, 3 * time.Second, 15 * time.Second}
		extends = []time.Duration{5 * time.Second, 20 * time.Second}
	}
	r := &runner{t: t, env: env, clock: clock, tasks: map[string]taskDef{},
		leases: map[int]*mlease{}, index: map[int]uint64{}, owner: map[uint64]int{},
		delays: delays, extends: extends}
	r.m = newModel(lease, rng.IntN(2) == 0)
	if env.Blocks {
		// Row ids are the engine's indexes (+1); a row's id before its
		// index is read must meet none of them.
		r.m.nextID = 1 << 40
		r.putBy = map[int]*tq.Client{}
	}
	r.m.groupDL = time.Hour // never reached: a history takes seconds
	if clock {
		r.m.groupDL = 7 * time.Second
	}
	r.rkN = 2 + rng.IntN(3)
	for _, td := range modelTasks() {
		r.tasks[td.name] = td
	}
	for slot := range r.clients {
		r.clients[slot] = env.Open(t)
		r.handles[slot] = map[string]*tq.Task{}
	}
	return r
}

func (r *runner) closeAll() {
	for _, c := range r.clients {
		if c != nil {
			_ = c.Close()
		}
	}
}

// handle is slot's handle on a task (for the ranks task, on a rank).
// holderName is the ConsumerName of the tasks of client slot.
func holderName(slot int) string { return fmt.Sprintf("client %d", slot) }

func (r *runner) handle(slot int, task string, rank int) *tq.Task {
	name := task
	if task == "rk" {
		name = fmt.Sprintf("rk%d", rank)
	}
	if h := r.handles[slot][name]; h != nil {
		return h
	}
	td := r.tasks[task]
	opts := []tq.TaskOption{tq.LeaseFor(r.m.lease), tq.ConsumerName(holderName(slot))}
	switch {
	case td.max > 0:
		opts = append(opts, tq.MaxDeliveries(td.max))
	case td.groups:
		opts = append(opts, tq.WithGroups(tq.GroupTag("uid"), groupSize))
		if td.deadline {
			opts = append(opts, tq.GroupDeadline(r.m.groupDL, td.partial))
		}
	case td.ranks:
		opts = append(opts, tq.Ranks(2, rank, ""))
	case td.stale:
		opts = append(opts, tq.Staleness("ver", staleBound, r.m.staleDrop))
	}
	h, err := r.clients[slot].Task(modelPartition, task, td.fields, opts...)
	if err != nil {
		r.t.Fatalf("Task(%q): %v", task, err)
	}
	if td.stale {
		h.SetVersion(r.versions[slot])
	}
	r.handles[slot][name] = h
	return h
}

// ctx is a step's context: long enough for any call, short enough that a
// call that hangs fails the history rather than the test binary (in a
// bubble, a hang ends it at once).
func (r *runner) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

// ModelOver is the ModelEnv whose clients tq.New makes over eng (with no
// clock of its own: Advance nil). Clients share eng's MetaStore, so eng
// must have one.
func ModelOver(eng backends.Engine) ModelEnv {
	return ModelEnv{Open: func(t *testing.T) *tq.Client {
		c, err := tq.New(eng)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}}
}
