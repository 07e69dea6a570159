package redis_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/internal/redisserver"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

// The outcome suite: a fault between the tq client and a real
// redis-server (AOF on, fsync on every write) at each request of a put,
// a Clear and a ClearPartition, and afterwards, read by a fresh client,
// the outcome must be the one the call's return promised:
//
//   - nil: the write is whole (a put's rows read back with its values; a
//     clear's rows are gone);
//   - an error not matching tq.ErrOutcomeUnknown: nothing of the write is
//     visible (no new row, a replaced field keeps its old value; a
//     clear's rows are all there and read back);
//   - tq.ErrOutcomeUnknown: whole or absent, never part;
//
// and in every case every listed row reads back (nothing a row needs was
// deleted), and rows the call does not touch are as they were. One
// exception is tq's documented behaviour: a Clear (or ClearPartition)
// removes the rows first and their cells after; when deleting the cells
// fails, it returns that error although the rows are gone.
//
// The fault hits the nth request whose command the proxy counts (see
// countedCommand); each group's table lists the requests of each
// operation, which a run without faults checks first.

// durable are the server flags of the suite: a write the server replied
// to is on disk, so a server killed after it ran a request and restarted
// on its files still has what the request did.
var durable = redisserver.Options{Args: []string{"--appendonly", "yes", "--appendfsync", "always"}}

// outcomeOp is an operation the suite injects faults into.
type outcomeOp string

const (
	opPut            outcomeOp = "put"
	opClear          outcomeOp = "clear"
	opClearPartition outcomeOp = "clearpartition"
	opClearAll       outcomeOp = "clearall" // a Clear of every row: it deletes the log
)

var outcomeOps = []outcomeOp{opPut, opClear, opClearAll, opClearPartition}

// outcomeGroup is a client configuration and the requests (as the proxy
// labels them) each operation sends with it, in order: the suite faults
// each of them in turn. A put's last request deletes the cells of the
// fields it replaced, after its commit.
type outcomeGroup struct {
	name  string
	query string // URL parameters of the faulted client
	mixed bool   // the batch has a values column besides the tensor
	want  map[outcomeOp][]string
	// empty: the partition has no rows (and no log) before the put,
	// which replaces nothing.
	empty bool
	// killFirst: kill a server only at the first of requests of one
	// label in a row (a restarted Cluster node takes two seconds to
	// serve again).
	killFirst bool
}

var clearRequests = []string{"EVALSHA append", "UNLINK", "EVALSHA append"}

var outcomeGroups = []outcomeGroup{
	{
		// One write round on the direct connections: cells and
		// commit in one MULTI/EXEC.
		name: "fused",
		want: map[outcomeOp][]string{
			opPut:            {"EVALSHA append", "MULTI", "UNLINK", "EVALSHA append"},
			opClear:          clearRequests,
			opClearAll:       clearRequests,
			opClearPartition: clearRequests,
		},
	},
	{
		// Two write rounds: the first written as Store.Write writes it,
		// the last with the commit in one MULTI/EXEC.
		name:  "rounds",
		query: "write_round_bytes=1200", // two cells (512 B and their codec prefix) a round
		want: map[outcomeOp][]string{
			opPut: {"EVALSHA append", "MSET", "MULTI", "UNLINK", "EVALSHA append"},
		},
	},
	{
		name:  "empty partition",
		empty: true,
		want: map[outcomeOp][]string{
			opPut: {"EVALSHA append", "MULTI"},
		},
	},
	{
		// Everything through go-redis, which resends a command whose
		// reply it lost.
		name:  "goredis",
		query: "direct=false",
		want: map[outcomeOp][]string{
			opPut:   {"EVALSHA append", "MSET", "EVALSHA append", "UNLINK", "EVALSHA append"},
			opClear: clearRequests,
		},
	},
}

// restartMode is how a server killed after a request comes back.
type restartMode int

const (
	// restartQuick: at once, and the proxy holds new connections until
	// it serves again, so go-redis's retries (or the settle) reach it.
	restartQuick restartMode = iota + 1
	// restartAfter: only once the call returned; until then the proxy
	// refuses every connection.
	restartAfter
)

// outcomeFault is one fault of the matrix.
type outcomeFault struct {
	kind    faultKind
	restart restartMode // faultKill only
}

func (f outcomeFault) String() string {
	switch f.restart {
	case restartQuick:
		return f.kind.String() + "/restart-quick"
	case restartAfter:
		return f.kind.String() + "/down-until-return"
	}
	return f.kind.String()
}

var outcomeFaults = []outcomeFault{
	{kind: faultDrop},
	{kind: faultLoseReply},
	{kind: faultKill, restart: restartQuick},
	{kind: faultKill, restart: restartAfter},
}

// Rows of every case: the partition holds baseRows before the faulted
// call; the put replaces putReplaced of them and adds putNew rows; the
// clear removes clearRows.
var (
	baseRows    = []string{"a0", "a1", "a2", "a3"}
	putReplaced = []string{"a0", "a1"}
	putNew      = []string{"n0", "n1"}
	clearRows   = []string{"a0", "a1"}
)

const (
	cellBytes = 512
	oldSeed   = 1 // the base rows' cells
	newSeed   = 2 // the put's
	part      = "p"
)

// cellOf is the tensor cell of key written with seed.
func cellOf(key string, seed byte) []byte {
	b := make([]byte, cellBytes)
	h := byte(len(key))
	for _, c := range []byte(key) {
		h = h*31 + c
	}
	for i := range b {
		b[i] = byte(i*7) + h + seed*101
	}
	return b
}

// valueOf is the values-column cell of key written with seed.
func valueOf(key string, seed byte) string { return fmt.Sprintf("%s/v%d", key, seed) }

// batchOf is the batch of keys written with seed.
func batchOf(keys []string, seed byte, mixed bool) tq.Batch {
	var data []byte
	vals := make([]string, len(keys))
	for i, k := range keys {
		data = append(data, cellOf(k, seed)...)
		vals[i] = valueOf(k, seed)
	}
	b := tq.Batch{"x": tq.Stacked(data, len(keys), cellBytes)}
	if mixed {
		b["v"] = tq.ValuesOf(vals)
	}
	return b
}

func TestOutcomes(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, durable)
	p := startRequestProxy(t, srv.Addr())
	env := standaloneEnv(srv, p)
	runOutcomes(t, env, outcomeGroups)
}

// standaloneEnv runs cases on srv, behind p.
func standaloneEnv(srv *redisserver.Server, p *requestProxy) *outcomeEnv {
	return &outcomeEnv{
		p: p,
		client: func(t *testing.T, query string, settle time.Duration) *tq.Client {
			if settle > 0 {
				return settlingTQ(t, p.url(query), settle)
			}
			return proxyTQ(t, srv.URL()+"?"+query)
		},
		loadScripts: func(ctx context.Context) error {
			c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
			defer c.Close()
			return redis.LoadScripts(ctx, c)
		},
		kill:    func(string) error { return srv.Kill() },
		restart: func(ctx context.Context, _ string) error { return srv.Restart(ctx) },
	}
}

// runOutcomes runs, for each group and operation, a call without faults
// (which must send the group's requests) and then a case per request
// and fault.
func runOutcomes(t *testing.T, env *outcomeEnv, groups []outcomeGroup) {
	n := 0
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for _, op := range outcomeOps {
				want, ok := g.want[op]
				if !ok {
					continue
				}
				n++
				oc := &outcomeCase{env: env, g: g, op: op, prefix: fmt.Sprintf("oc%d", n)}
				if got := oc.run(t); !slices.Equal(got, want) {
					t.Fatalf("%s sent the counted requests %q, want %q", op, got, want)
				}
				for nth := range want {
					for _, f := range outcomeFaults {
						if f.kind == faultKill && g.killFirst && nth > 0 && want[nth] == want[nth-1] {
							continue
						}
						n++
						oc := &outcomeCase{env: env, g: g, op: op, prefix: fmt.Sprintf("oc%d", n)}
						t.Run(fmt.Sprintf("%s/%d-%s/%s", op, nth+1, strings.ReplaceAll(want[nth], " ", "-"), f), func(t *testing.T) {
							got := oc.run(t, caseFault{nth + 1, f})
							if len(got) < nth+1 || got[nth] != want[nth] {
								t.Fatalf("request %d was not %q (all: %q)", nth+1, want[nth], got)
							}
						})
						if t.Context().Err() != nil {
							return
						}
					}
				}
			}
		})
	}
}

// outcomeEnv is where the cases run: the proxy, clients straight to the
// server(s) or through the proxy, and how a server the proxy names is
// killed and restarted (Restart returns once it serves again).
type outcomeEnv struct {
	p *requestProxy
	// client is a client with tq.NoRetry straight to the server(s), or
	// with settle > 0 one through the proxy whose settles try that long
	// (replica.SettleFor).
	client func(t *testing.T, query string, settle time.Duration) *tq.Client
	// loadScripts loads the engine's scripts on every server, so that
	// a case after a restart sends the same requests as one before.
	loadScripts func(ctx context.Context) error
	kill        func(addr string) error
	restart     func(ctx context.Context, addr string) error
}

// outcomeCase is one faulted call on a partition of its own (prefix).
type outcomeCase struct {
	env    *outcomeEnv
	g      outcomeGroup
	op     outcomeOp
	prefix string
}

// caseFault is a fault at the nth counted request (1-based) of a call.
type caseFault struct {
	nth int
	outcomeFault
}

// run writes the base rows, makes the faulted call through the proxy
// with faults (at most one of them a kill), checks the outcome, and
// returns the counted requests the call sent.
func (oc *outcomeCase) run(t *testing.T, faults ...caseFault) []string {
	t.Helper()
	ctx := t.Context()
	env := oc.env
	query := "prefix=" + oc.prefix
	if oc.g.query != "" {
		query += "&" + oc.g.query
	}
	if err := env.loadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	if !oc.g.empty {
		setup := env.client(t, query, 0)
		if err := setup.BatchPut(ctx, part, baseRows, batchOf(baseRows, oldSeed, oc.g.mixed), nil); err != nil {
			t.Fatalf("writing the base rows: %v", err)
		}
		setup.Close()
	}

	var restart restartMode
	planned := make([]plannedFault, len(faults))
	for i, f := range faults {
		planned[i] = plannedFault{nth: f.nth, kind: f.kind}
		if f.kind == faultKill {
			restart = f.restart
		}
	}
	// The faulted client's settles (the call's own, its rollback's and
	// cleanup's) try for long enough to outlast a quick restart. When
	// the server stays down until the call returns, every fence is
	// refused however long they try: a short try ends the same way.
	settle := 2 * time.Second
	if restart == restartAfter {
		settle = 250 * time.Millisecond
	}
	faulted := env.client(t, query, settle)
	if _, err := faulted.List(ctx, part); err != nil { // its copy is current
		t.Fatal(err)
	}
	var restarted sync.WaitGroup
	var restartErr error
	var killed string
	kill := func(addr string) {
		killed = addr
		var release func()
		if restart == restartQuick {
			release = env.p.hold() // new connections wait for the restart
		}
		if err := env.kill(addr); err != nil {
			t.Errorf("kill: %v", err)
		}
		if restart == restartQuick {
			restarted.Add(1)
			go func() {
				defer restarted.Done()
				defer release()
				time.Sleep(20 * time.Millisecond)
				restartErr = env.restart(context.WithoutCancel(ctx), addr)
			}()
		}
	}
	fired := env.p.arm(kill, planned...)
	var err error
	switch oc.op {
	case opPut:
		keys := oc.putKeys()
		err = faulted.BatchPut(ctx, part, keys, batchOf(keys, newSeed, oc.g.mixed), nil)
	case opClear:
		err = faulted.Clear(ctx, part, clearRows)
	case opClearAll:
		err = faulted.Clear(ctx, part, baseRows)
	case opClearPartition:
		err = faulted.ClearPartition(ctx, part)
	}
	seen := env.p.requestsSeen()
	env.p.reset()
	faulted.Close()
	for i, ch := range fired {
		select {
		case <-ch: // and so kill, if it was called, has returned
		case <-time.After(10 * time.Second):
			t.Fatalf("the fault at request %d did not act (requests %q); %s returned %v", faults[i].nth, seen, oc.op, err)
		}
	}
	restarted.Wait()
	if restartErr != nil {
		t.Fatalf("restart: %v", restartErr)
	}
	if restart == restartAfter && killed != "" {
		if err := env.restart(context.WithoutCancel(ctx), killed); err != nil {
			t.Fatalf("restart: %v", err)
		}
	}
	t.Logf("%s with faults %v of requests %q: %v", oc.op, faults, seen, err)
	if len(faults) == 0 && err != nil {
		t.Fatalf("%s without a fault: %v", oc.op, err)
	}
	unlinkFaulted := false
	for _, f := range faults {
		unlinkFaulted = unlinkFaulted || (f.nth <= len(seen) && seen[f.nth-1] == "UNLINK")
	}
	oc.check(t, query, unlinkFaulted, err)
	return seen
}

// outcome is what a fresh client reads of the rows a call wrote or
// cleared.
type outcome int

const (
	outcomeAbsent outcome = iota // none of the call is visible
	outcomeWhole                 // all of it is
	outcomePart                  // some of it: never allowed
)

// check reads the partition with a fresh client and checks that the
// outcome is the one callErr promises; unlinkFaulted says a fault hit
// an UNLINK of the call.
func (oc *outcomeCase) check(t *testing.T, query string, unlinkFaulted bool, callErr error) {
	t.Helper()
	ctx := t.Context()
	fresh := oc.env.client(t, query, 0)
	m, err := fresh.List(ctx, part)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	listed := m.Keys()
	// Nothing a listed row needs is gone, and each row holds what the
	// outcome says: the put's values or the base rows'.
	var got tq.Batch
	if len(listed) > 0 {
		if got, err = fresh.BatchGet(ctx, part, listed); err != nil {
			t.Fatalf("%s returned %v; BatchGet of the listed rows %q: %v", oc.op, callErr, listed, err)
		}
	}
	seeds := make(map[string]byte, len(listed)) // the seed each listed row was written with
	for i, k := range listed {
		x, ok := got["x"].Tensor()
		if !ok {
			t.Fatalf("x is not stacked")
		}
		cell := x.Data[i*cellBytes : (i+1)*cellBytes]
		switch {
		case bytes.Equal(cell, cellOf(k, oldSeed)):
			seeds[k] = oldSeed
		case bytes.Equal(cell, cellOf(k, newSeed)):
			seeds[k] = newSeed
		default:
			t.Fatalf("%s returned %v; row %q reads back a cell no put wrote", oc.op, callErr, k)
		}
		if oc.g.mixed {
			if v := fmt.Sprint(got["v"].Row(i)); v != valueOf(k, seeds[k]) {
				t.Fatalf("%s returned %v; row %q has x of seed %d but v %q", oc.op, callErr, k, seeds[k], v)
			}
		}
	}
	var o outcome
	var untouched []string // rows the call must leave as they were
	switch oc.op {
	case opPut:
		o = putOutcome(seeds, oc.replaced())
		untouched = slices.DeleteFunc(oc.baseRows(), func(k string) bool { return slices.Contains(putReplaced, k) })
	case opClear:
		o = clearOutcome(seeds, clearRows)
		untouched = slices.DeleteFunc(oc.baseRows(), func(k string) bool { return slices.Contains(clearRows, k) })
	case opClearPartition, opClearAll:
		o = clearOutcome(seeds, baseRows)
	}
	for _, k := range untouched {
		if seeds[k] != oldSeed {
			t.Fatalf("%s returned %v; row %q, which it does not touch, is gone or changed (listed: %q)", oc.op, callErr, k, listed)
		}
	}
	unknown := errors.Is(callErr, tq.ErrOutcomeUnknown)
	if callErr != nil && !unknown && strings.Contains(callErr.Error(), "outcome unknown") {
		t.Errorf("%s returned a definite failure that says its outcome is unknown: %v", oc.op, callErr)
	}
	switch {
	case o == outcomePart:
		t.Fatalf("%s returned %v and applied in part: listed %q with seeds %v", oc.op, callErr, listed, seeds)
	case callErr == nil && o != outcomeWhole:
		t.Fatalf("%s returned nil but did not apply: listed %q with seeds %v", oc.op, listed, seeds)
	case callErr != nil && !unknown && o != outcomeAbsent:
		if oc.op != opPut && o == outcomeWhole && unlinkFaulted {
			// A clear removes the rows first, then their cells; when
			// deleting the cells fails, the rows are gone and the error
			// reports cells left behind (see tq.Client.Clear).
			t.Logf("%s returned %v after it removed the rows: their cells were left behind", oc.op, callErr)
			return
		}
		t.Fatalf("%s returned %v, a definite failure, but applied: listed %q with seeds %v", oc.op, callErr, listed, seeds)
	}
}

// baseRows are the rows the partition holds before the call.
func (oc *outcomeCase) baseRows() []string {
	if oc.g.empty {
		return nil
	}
	return slices.Clone(baseRows)
}

// replaced are the rows the put replaces.
func (oc *outcomeCase) replaced() []string {
	if oc.g.empty {
		return nil
	}
	return putReplaced
}

// putKeys are the rows the put writes.
func (oc *outcomeCase) putKeys() []string { return slices.Concat(oc.replaced(), putNew) }

// putOutcome classifies the put, which replaced rows and added putNew,
// from the seeds of the listed rows.
func putOutcome(seeds map[string]byte, replaced []string) outcome {
	whole, absent := true, true
	for _, k := range replaced {
		whole = whole && seeds[k] == newSeed
		absent = absent && seeds[k] == oldSeed
	}
	for _, k := range putNew {
		_, listed := seeds[k]
		whole = whole && listed
		absent = absent && !listed
	}
	switch {
	case whole:
		return outcomeWhole
	case absent:
		return outcomeAbsent
	}
	return outcomePart
}

// clearOutcome classifies a clear of rows from the seeds of the listed
// rows.
func clearOutcome(seeds map[string]byte, rows []string) outcome {
	whole, absent := true, true
	for _, k := range rows {
		s, listed := seeds[k]
		whole = whole && !listed
		absent = absent && listed && s == oldSeed
	}
	switch {
	case whole:
		return outcomeWhole
	case absent:
		return outcomeAbsent
	}
	return outcomePart
}

// TestOutcomesOfSettle faults the settle itself: the fused put's
// MULTI/EXEC is dropped before it reaches the server (so the commit did
// not apply) or runs and loses its reply (so it did), and so is its one
// resend on a new connection (the first went on an idle one); the rules
// then settle the commit with a fence (an append), and that request meets
// each fault in turn. A fence sent twice finds itself; a settle that
// cannot reach the server leaves the outcome unknown.
func TestOutcomesOfSettle(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, durable)
	p := startRequestProxy(t, srv.Addr())
	env := standaloneEnv(srv, p)
	g := outcomeGroup{name: "fused"}
	const multi, resend, fence = 2, 3, 4 // the put's requests: Prepare, MULTI, MULTI again, fence
	n := 0
	for _, first := range []faultKind{faultDrop, faultLoseReply} {
		for _, f := range outcomeFaults {
			n++
			oc := &outcomeCase{env: env, g: g, op: opPut, prefix: fmt.Sprintf("st%d", n)}
			t.Run(fmt.Sprintf("%v/%v", first, f), func(t *testing.T) {
				got := oc.run(t, caseFault{multi, outcomeFault{kind: first}}, caseFault{resend, outcomeFault{kind: first}}, caseFault{fence, f})
				if len(got) < fence || got[multi-1] != "MULTI" || got[resend-1] != "MULTI" || got[fence-1] != "EVALSHA append" {
					t.Fatalf("requests %q: want MULTI twice, then the settle's fence", got)
				}
			})
		}
	}
}
