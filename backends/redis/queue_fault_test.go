package redis_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/internal/redistest"
)

// TestQueueRoundTrips counts, through a proxy and with the engine's own
// reports, the round trips of consumption on a standalone server: a claim
// of ready rows on a current view is one, an ack one, and a read of the
// claimed rows' cells (ReadRows, as BatchGetByMeta does) one more.
func TestQueueRoundTrips(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	p := startFlightProxy(t, srv.Addr())
	s := open(t, p.url("qrt"))
	m := metaOf(s)
	keys := keysOf("k", 8)
	idx := commitRows(t, m, "p", keys...)
	// Warm up: connections dialled, scripts loaded.
	warm, err := m.Claim(ctx, "p", metadata.ClaimRequest{Task: "warm", Lease: time.Minute, Rows: 1, Min: 1}, all)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Settle(ctx, "p", metadata.SettleRequest{Task: "warm", Op: metadata.Ack, Lease: warm.Lease, Indexes: idx[:1]}); err != nil {
		t.Fatal(err)
	}
	plan := func(rows []*metadata.Row) ([]backends.ReadCell, error) {
		cells := make([]backends.ReadCell, len(rows))
		for i, r := range rows {
			cells[i].Key = backends.StorageKey(r.Index, "x", r.Fields["x"].Gen)
		}
		return cells, nil
	}
	if _, err := colo(m).ReadRows(ctx, "p", keys, plan); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Consumption(ctx, "p", "t"); err != nil {
		t.Fatal(err)
	}
	watched := false // a watcher of p (after a Wait) sends rounds of its own
	count := func(what string, want int64, call func(ctx context.Context) error) {
		t.Helper()
		var rt backends.RoundTrips
		before := p.flights.Load()
		if err := call(rt.Attach(ctx)); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := p.flights.Load() - before; got != want && !watched {
			t.Errorf("%s: %d round trips through the proxy, want %d", what, got, want)
		}
		if got := rt.Load(); got != want {
			t.Errorf("%s: the engine reported %d round trips, want %d", what, got, want)
		}
	}
	var c metadata.Claimed
	count("claim", 1, func(ctx context.Context) error {
		var err error
		c, err = m.Claim(ctx, "p", metadata.ClaimRequest{Task: "t", Lease: time.Minute, Rows: 4, Min: 1}, all)
		if err == nil && len(c.Rows) != 4 {
			t.Errorf("claimed %d rows, want 4", len(c.Rows))
		}
		return err
	})
	count("read of the claimed rows", 1, func(ctx context.Context) error {
		ck := make([]string, len(c.Rows))
		for i, r := range c.Rows {
			ck[i] = r.Key
		}
		_, err := colo(m).ReadRows(ctx, "p", ck, plan)
		return err
	})
	count("ack", 1, func(ctx context.Context) error {
		res, err := m.Settle(ctx, "p", metadata.SettleRequest{Task: "t", Op: metadata.Ack, Lease: c.Lease, Indexes: claimIdx(c)})
		if err == nil && len(res.Lost) != 0 {
			t.Errorf("ack lost %v", res.Lost)
		}
		return err
	})
	count("consumption", 1, func(ctx context.Context) error {
		_, err := m.Consumption(ctx, "p", "t")
		return err
	})
	// A Wait woken by another client's commit brings the view the
	// commit's record as it wakes: the claim that follows leases the new
	// row in one round trip.
	held, err := m.Claim(ctx, "p", metadata.ClaimRequest{Task: "w", Lease: time.Minute, Rows: 64, Min: 1}, all)
	if err != nil {
		t.Fatal(err)
	}
	woke := make(chan error, 1)
	watched = true
	go func() { woke <- m.Wait(ctx, "p", held.Mark) }()
	time.Sleep(50 * time.Millisecond)
	fresh := commitRows(t, metaOf(open(t, srv.URL()+"?prefix=qrt")), "p", "y")
	if err := <-woke; err != nil {
		t.Fatal(err)
	}
	var rt backends.RoundTrips
	got, err := m.Claim(rt.Attach(ctx), "p", metadata.ClaimRequest{Task: "w", Lease: time.Minute, Rows: 64, Min: 1}, all)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(claimIdx(got), fresh) || rt.Load() != 1 {
		t.Errorf("claim after a wake: %v in %d round trips, want %v in 1", claimIdx(got), rt.Load(), fresh)
	}
	// A commit by another client: the claim's script brings the view its
	// record, and the rows come the next time.
	commitRows(t, metaOf(open(t, srv.URL()+"?prefix=qrt")), "p", "z")
	count("claim with a commit the view lacks", 1, func(ctx context.Context) error {
		var err error
		c, err = m.Claim(ctx, "p", metadata.ClaimRequest{Task: "t", Lease: time.Minute, Rows: 2, Min: 1}, all)
		if err == nil && !slices.Equal(claimIdx(c), idx[4:6]) {
			t.Errorf("claimed %v, want %v", claimIdx(c), idx[4:6])
		}
		return err
	})
}

// TestIdleWaitRequests: a Wait on a partition where nothing changes sends
// at most about one request a second (its watcher's round: a pipeline of
// the XREAD that blocks and the log's read), once its connection is set
// up (dial handshake).
func TestIdleWaitRequests(t *testing.T) {
	srv := redistest.Start(t)
	p := startFlightProxy(t, srv.Addr())
	m := metaOf(open(t, p.url("qidle")))
	commitRows(t, m, "p", "a")
	c, err := m.Claim(t.Context(), "p", metadata.ClaimRequest{Task: "t", Lease: time.Hour, Rows: 1, Min: 1}, all)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	start := p.flights.Load()
	go func() { done <- m.Wait(ctx, "p", c.Mark) }()
	time.Sleep(1500 * time.Millisecond)
	before := p.flights.Load()
	t0 := time.Now()
	time.Sleep(3 * time.Second)
	got := p.flights.Load() - before
	secs := time.Since(t0).Seconds()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("idle wait: %v", err)
	}
	if float64(got) > secs+1 {
		t.Errorf("an idle wait sent %d requests in %.1f s", got, secs)
	}
	if setup := before - start; setup > 10 {
		t.Errorf("setting up a wait took %d requests", setup)
	}
}

// TestQueueFaults: a claim or settle whose request or reply is lost.
func TestQueueFaults(t *testing.T) {
	srv := redistest.Start(t)
	p := startRequestProxy(t, srv.Addr())
	ctx := t.Context()
	n := 0
	setup := func(t *testing.T, query string) (metadata.MetaStore, []uint64) {
		n++
		prefix := "qf" + string(rune('a'+n))
		m := metaOf(open(t, p.url("prefix="+prefix+query)))
		idx := commitRows(t, m, "p", keysOf("k", 4)...)
		warm, err := m.Claim(ctx, "p", metadata.ClaimRequest{Task: "warm", Lease: time.Minute, Rows: 1, Min: 1}, all)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Settle(ctx, "p", metadata.SettleRequest{Task: "warm", Op: metadata.Ack, Lease: warm.Lease, Indexes: claimIdx(warm)}); err != nil {
			t.Fatal(err)
		}
		return m, idx
	}
	leasedTo := func(t *testing.T, m metadata.MetaStore) map[string][]uint64 {
		out := map[string][]uint64{}
		for i, d := range states(t, m, "p", "t") {
			if d.State == metadata.Leased {
				out[d.Lease] = append(out[d.Lease], i)
			}
		}
		for _, v := range out {
			slices.Sort(v)
		}
		return out
	}
	req := metadata.ClaimRequest{Task: "t", Lease: 400 * time.Millisecond, Rows: 2, Min: 1}
	t.Run("ClaimReplyLostResent", func(t *testing.T) {
		// go-redis sends the script again: it finds its rows leased to
		// its token and replies with them.
		m, idx := setup(t, "")
		fired := p.arm(nil, plannedFault{nth: 1, kind: faultLoseReply})
		c, err := m.Claim(ctx, "p", req, all)
		<-fired[0]
		if err != nil || !slices.Equal(claimIdx(c), idx[:2]) {
			t.Fatalf("claim %v %v (leases %v, requests %v)", claimIdx(c), err, leasedTo(t, m), p.requestsSeen())
		}
		if got := leasedTo(t, m); len(got) != 1 || !slices.Equal(got[c.Lease], idx[:2]) {
			t.Fatalf("leases %v, want %v to %s", got, idx[:2], c.Lease)
		}
	})
	t.Run("BatchTakeReplyLostResent", func(t *testing.T) {
		// Rank 1 takes its share of rank 0's batch; the reply is lost
		// and go-redis sends the claim again: the receipt gives it the
		// same batch, not the next one.
		m, idx := setup(t, "")
		rank := func(r int) metadata.ClaimRequest {
			return metadata.ClaimRequest{Task: "t", Lease: time.Minute, Rows: 2, Min: 2, Batch: &metadata.Batch{Ranks: 2, Rank: r}}
		}
		b1, err := m.Claim(ctx, "p", rank(0), all)
		if err != nil || !slices.Equal(claimIdx(b1), idx[:2]) {
			t.Fatal(b1, err)
		}
		fired := p.arm(nil, plannedFault{nth: 1, kind: faultLoseReply})
		r1, err := m.Claim(ctx, "p", rank(1), all)
		<-fired[0]
		if err != nil || r1.Lease != b1.Lease || !slices.Equal(claimIdx(r1), idx[:2]) {
			t.Fatalf("rank 1's share %+v %v, want batch %s", r1, err, b1.Lease)
		}
		r2, err := m.Claim(ctx, "p", rank(1), all)
		if err != nil || r2.Lease == b1.Lease || !slices.Equal(claimIdx(r2), idx[2:]) {
			t.Fatalf("rank 1's next claim %+v %v", r2, err)
		}
	})
	t.Run("ClaimReplyLost", func(t *testing.T) {
		m, idx := setup(t, "&max_retries=-1")
		fired := p.arm(nil, plannedFault{nth: 1, kind: faultLoseReply})
		lost, err := m.Claim(ctx, "p", req, all)
		<-fired[0]
		// It applied, before the fence that settled it: the claim
		// returns its lease, which the caller holds.
		if err != nil || !slices.Equal(claimIdx(lost), idx[:2]) {
			t.Fatalf("claim whose reply was lost: %v %v, want its lease of %v", claimIdx(lost), err, idx[:2])
		}
		if got := leasedTo(t, m); len(got) != 1 || len(got[lost.Lease]) != 2 {
			t.Fatalf("leases %v, want the lost reply's %s", got, lost.Lease)
		}
		c, err := m.Claim(ctx, "p", req, all)
		if err != nil || !slices.Equal(claimIdx(c), idx[2:]) {
			t.Fatalf("next claim %v %v", claimIdx(c), err)
		}
	})
	t.Run("ClaimDropped", func(t *testing.T) {
		m, idx := setup(t, "&max_retries=-1")
		fired := p.arm(nil, plannedFault{nth: 1, kind: faultDrop})
		c, err := m.Claim(ctx, "p", req, all)
		<-fired[0]
		// It never ran; sent again (its connection failed before any
		// reply), or settled by a fence and claimed again, it leases the
		// rows once.
		if err != nil || !slices.Equal(claimIdx(c), idx[:2]) || c.Deliveries[0].Deliveries != 1 {
			t.Fatalf("claim whose request was dropped: %+v %v", c, err)
		}
		if got := leasedTo(t, m); len(got) != 1 || len(got[c.Lease]) != 2 {
			t.Fatalf("leases %v, want the claim's only", got)
		}
	})
	for _, kind := range []faultKind{faultDrop, faultLoseReply} {
		for _, op := range []metadata.SettleOp{metadata.Ack, metadata.Nack} {
			t.Run("Settle-"+kind.String()+"-"+[]string{"", "ack", "nack"}[op], func(t *testing.T) {
				// The engine sends it again and learns what it did.
				m, _ := setup(t, "&max_retries=-1")
				c, err := m.Claim(ctx, "p", metadata.ClaimRequest{Task: "t", Lease: time.Minute, Rows: 2, Min: 1}, all)
				if err != nil {
					t.Fatal(err)
				}
				fired := p.arm(nil, plannedFault{nth: 1, kind: kind})
				res, err := m.Settle(ctx, "p", metadata.SettleRequest{Task: "t", Op: op, Lease: c.Lease, Indexes: claimIdx(c)})
				<-fired[0]
				if err != nil || len(res.Lost) != 0 {
					t.Fatalf("settle %+v %v", res, err)
				}
				want := map[metadata.SettleOp]metadata.State{metadata.Ack: metadata.Acked, metadata.Nack: metadata.Ready}[op]
				for _, i := range claimIdx(c) {
					if d := states(t, m, "p", "t")[i]; d.State != want || d.Deliveries != 1 {
						t.Fatalf("row %d after the settle %+v", i, d)
					}
				}
			})
		}
	}
	t.Run("RetryReplyLost", func(t *testing.T) {
		m, _ := setup(t, "&max_retries=-1")
		c, err := m.Claim(ctx, "p", metadata.ClaimRequest{Task: "t", Lease: time.Minute, Rows: 1, Min: 1, MaxDeliveries: 1}, all)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Settle(ctx, "p", metadata.SettleRequest{Task: "t", Op: metadata.Nack, Lease: c.Lease, Indexes: claimIdx(c)}); err != nil {
			t.Fatal(err)
		}
		fired := p.arm(nil, plannedFault{nth: 1, kind: faultLoseReply})
		res, err := m.Settle(ctx, "p", metadata.SettleRequest{Task: "t", Op: metadata.Retry, Indexes: claimIdx(c)})
		<-fired[0]
		// Settled: it applied, and the row is ready again.
		if err != nil || len(res.Lost) != 0 {
			t.Fatalf("retry whose reply was lost: %+v %v", res, err)
		}
		if d := states(t, m, "p", "t")[claimIdx(c)[0]]; d.State != metadata.Ready {
			t.Fatalf("row after the retry %+v, want ready", d)
		}
	})
}

// TestQueueReplicas: with WithReplicas, claims, settles and resets wait for
// the replicas: with the one replica there is, they succeed; asking for
// two, each fails with an error matching redis.ErrNotReplicated and
// backends.ErrOutcomeUnknown (it applied on the master).
func TestQueueReplicas(t *testing.T) {
	f := startFailover(t)
	ctx := t.Context()
	one := metaOf(open(t, f.master.URL()+"?prefix=qrep&replicas=1&replica_timeout=5s"))
	idx := commitRows(t, one, "p", "a", "b")
	c, err := one.Claim(ctx, "p", metadata.ClaimRequest{Task: "t", Lease: time.Minute, Rows: 1, Min: 1}, all)
	if err != nil || len(c.Rows) != 1 {
		t.Fatalf("replicated claim %+v %v", c, err)
	}
	if res, err := one.Settle(ctx, "p", metadata.SettleRequest{Task: "t", Op: metadata.Ack, Lease: c.Lease, Indexes: claimIdx(c)}); err != nil || len(res.Lost) != 0 {
		t.Fatalf("replicated ack %+v %v", res, err)
	}
	two := metaOf(open(t, f.master.URL()+"?prefix=qrep&replicas=2&replica_timeout=50ms"))
	_, err = two.Claim(ctx, "p", metadata.ClaimRequest{Task: "t", Lease: time.Minute, Rows: 1, Min: 1}, all)
	if !errors.Is(err, redis.ErrNotReplicated) || !errors.Is(err, backends.ErrOutcomeUnknown) {
		t.Fatalf("claim with too few replicas: %v", err)
	}
	st := states(t, one, "p", "t")
	if st[idx[1]].State != metadata.Leased {
		t.Fatalf("the claim did not apply on the master: %+v", st)
	}
	_, err = two.Settle(ctx, "p", metadata.SettleRequest{Task: "t", Op: metadata.Nack, Lease: st[idx[1]].Lease, Indexes: idx[1:]})
	if !errors.Is(err, redis.ErrNotReplicated) || !errors.Is(err, backends.ErrOutcomeUnknown) {
		t.Fatalf("settle with too few replicas: %v", err)
	}
	if err := two.Reset(ctx, "p", "t", nil); !errors.Is(err, redis.ErrNotReplicated) || !errors.Is(err, backends.ErrOutcomeUnknown) {
		t.Fatalf("reset with too few replicas: %v", err)
	}
}

// TestWaitConnections: Waits of one Meta on one partition share one
// watcher, blocked in XREAD on one connection; Waits on three partitions
// block three; each wakes on its own partition's commit only; a watcher
// stops within a read's block once its last Wait returns, and Close ends
// a blocked read at once.
func TestWaitConnections(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	m := metaOf(open(t, srv.URL()+"?prefix=qone"))
	other := metaOf(open(t, srv.URL()+"?prefix=qone"))
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer admin.Close()
	blocked := func() int {
		out, err := admin.ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, " flags=b ") && strings.Contains(l, " cmd=xread ") {
				n++
			}
		}
		return n
	}
	// await waits until want reads block at once (a watcher re-blocks
	// after each round, so a sample between rounds may see fewer).
	await := func(want int, what string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		n := blocked()
		for n != want && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
			n = blocked()
		}
		if n != want {
			t.Fatalf("%d blocked reads %s, want %d", n, what, want)
		}
	}
	// quiet waits until no read has blocked for longer than a watcher
	// outlives its last Wait and a read lasts (about two seconds).
	quiet := func(what string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		since := time.Now()
		for time.Since(since) < 2500*time.Millisecond {
			if n := blocked(); n != 0 {
				if time.Now().After(deadline) {
					t.Fatalf("%d blocked reads %s, want none", n, what)
				}
				since = time.Now()
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	parts := []string{"p0", "p1", "p2"}
	marks := map[string]metadata.Mark{}
	for _, p := range parts {
		commitRows(t, m, p, "a")
		c, err := m.Claim(ctx, p, metadata.ClaimRequest{Task: "t", Lease: time.Hour, Rows: 1, Min: 1}, all)
		if err != nil {
			t.Fatal(err)
		}
		marks[p] = c.Mark
	}
	wait := func(p string) chan error {
		ch := make(chan error, 1)
		go func() { ch <- m.Wait(ctx, p, marks[p]) }()
		return ch
	}
	same := []chan error{wait("p0"), wait("p0"), wait("p0")}
	await(1, "for three waits on one partition")
	commitRows(t, other, "p0", "b")
	for _, ch := range same {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	c, err := m.Claim(ctx, "p0", metadata.ClaimRequest{Task: "t", Lease: time.Hour, Rows: 1, Min: 1}, all)
	if err != nil {
		t.Fatal(err)
	}
	marks["p0"] = c.Mark
	done := map[string]chan error{}
	for _, p := range parts {
		done[p] = wait(p)
	}
	await(3, "for waits on three partitions")
	for k, p := range parts {
		commitRows(t, other, p, "c")
		select {
		case err := <-done[p]:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("a commit of %s did not wake its wait", p)
		}
		for _, q := range parts[k+1:] {
			select {
			case err := <-done[q]:
				t.Fatalf("the wait on %s returned %v after a commit of %s", q, err, p)
			default:
			}
		}
	}
	quiet("after the waits returned")
	c, err = m.Claim(ctx, "p0", metadata.ClaimRequest{Task: "t", Lease: time.Hour, Rows: 1, Min: 1}, all)
	if err != nil {
		t.Fatal(err)
	}
	marks["p0"] = c.Mark
	last := wait("p0")
	await(1, "for a wait")
	closed := time.Now()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-last; !errors.Is(err, backends.ErrClosed) {
		t.Fatalf("a wait when its Meta closed: %v", err)
	}
	if d := time.Since(closed); d > 500*time.Millisecond {
		t.Errorf("Close took %v with a blocked read", d)
	}
	await(0, "after Close")
}

// blockedWait commits a row of p through m, claims it for task t, and
// starts a Wait with the claim's mark, which nothing has changed since: it
// returns the claim, the Wait's result and what cancels the Wait.
func blockedWait(t *testing.T, m metadata.MetaStore, p string) (metadata.Claimed, <-chan error, context.CancelFunc) {
	t.Helper()
	commitRows(t, m, p, "a")
	c, err := m.Claim(t.Context(), p, metadata.ClaimRequest{Task: "t", Lease: time.Hour, Rows: 1, Min: 1}, all)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Wait(ctx, p, c.Mark) }()
	return c, done, cancel
}

// stillBlocked fails t if the Wait whose result done carries has
// returned (what: when), then cancels it and checks that it returns the
// cancellation.
func stillBlocked(t *testing.T, done <-chan error, cancel context.CancelFunc, what string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("a wait returned %v %s", err, what)
	default:
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}
