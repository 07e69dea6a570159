package tqserve_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/tq"
	"github.com/tqgo/tqgo/tqserve"
)

// Methods of the Meta and Cells services, as the proxy sees them.
const (
	mLookup  = "/tqgo.v1.Meta/Lookup"
	mList    = "/tqgo.v1.Meta/List"
	mView    = "/tqgo.v1.Meta/View"
	mSummary = "/tqgo.v1.Meta/Summary"
	mPrepare = "/tqgo.v1.Meta/Prepare"
	mCommit  = "/tqgo.v1.Meta/Commit"
	mBlock   = "/tqgo.v1.Meta/Block"
	mPutNew  = "/tqgo.v1.Meta/PutNew"
	mClaim   = "/tqgo.v1.Meta/Claim"
	mSettle  = "/tqgo.v1.Meta/Settle"
	mWait    = "/tqgo.v1.Meta/Wait"
	mWrite   = "/tqgo.v1.Cells/Write"
)

// faultEnv is a server, a proxy in front of it, a client through the
// proxy (m) and one straight to the server (d), which sees what a call
// through the proxy did.
type faultEnv struct {
	srv  *server
	p    *grpcProxy
	m, d metadata.MetaStore
}

func newFaultEnv(t *testing.T, engineURL string) *faultEnv {
	t.Helper()
	s := startServer(t, engineURL)
	p := startGRPCProxy(t, strings.TrimPrefix(s.URL, "tq://"))
	return &faultEnv{srv: s, p: p, m: openMeta(t, "tq://"+p.addr()), d: openMeta(t, s.URL)}
}

// callCtx bounds a call of a fault test: none may hang.
func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// commitRow commits key with one field through m.
func commitRow(t *testing.T, m metadata.MetaStore, part, key string) {
	t.Helper()
	if err := tryCommit(m, part, key); err != nil {
		t.Fatal(err)
	}
}

func tryCommit(m metadata.MetaStore, part, key string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := m.Prepare(ctx, part, []string{key}, []string{"x"}, nil)
	if err != nil {
		return err
	}
	_, err = m.Commit(ctx, part, []metadata.RowUpdate{{Key: key, Index: res[0].Index,
		Fields: map[string]metadata.FieldInfo{"x": {Gen: res[0].Gens["x"]}}}})
	return err
}

// visible reports whether key is a committed row of part.
func visible(t *testing.T, m metadata.MetaStore, part, key string) bool {
	t.Helper()
	rows, err := m.Lookup(callCtx(t), part, []string{key})
	if err != nil {
		t.Fatal(err)
	}
	return rows[0] != nil
}

// stateOf is row index's state for task.
func stateOf(t *testing.T, m metadata.MetaStore, part, task string, index uint64) metadata.State {
	t.Helper()
	v, err := m.View(callCtx(t), part, task)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range v.Tasks[task] {
		if d.Index == index {
			return d.State
		}
	}
	return metadata.Ready
}

func claimReq(task string) metadata.ClaimRequest {
	return metadata.ClaimRequest{Task: task, Lease: time.Minute, Rows: 1, Min: 1}
}

// definiteOrUnknown fails unless err is a failure the caller can act on:
// ErrUnavailable alone (nothing applied: retry) or ErrOutcomeUnknown.
// It returns whether the outcome is unknown.
func definiteOrUnknown(t *testing.T, what string, err error) bool {
	t.Helper()
	switch {
	case err == nil:
		t.Fatalf("%s: no error", what)
	case errors.Is(err, backends.ErrOutcomeUnknown):
		return true
	case !errors.Is(err, backends.ErrUnavailable):
		t.Fatalf("%s: %v, want ErrUnavailable or ErrOutcomeUnknown", what, err)
	}
	return false
}

// onlyUnavailable fails unless err is ErrUnavailable and says the call
// applied nothing.
func onlyUnavailable(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, backends.ErrUnavailable) || errors.Is(err, backends.ErrOutcomeUnknown) {
		t.Fatalf("%s: %v, want ErrUnavailable alone", what, err)
	}
}

// fired fails unless the proxy's fault acted.
func fired(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	default:
		t.Fatal("the proxy's fault did not act")
	}
}

// A call through a connection that closes before its request reaches the
// server, or after the server ran it but before its reply arrives, fails
// in a way that says what may have happened: a read with ErrUnavailable
// (it changed nothing; tq retries it); a Prepare with ErrUnavailable (it
// reserved at most rows that stay invisible: the MetaStore contract); a
// write whose request was lost with ErrUnavailable or ErrOutcomeUnknown,
// having applied nothing; a write whose reply was lost with
// ErrOutcomeUnknown, never as if it had not applied, but a claim, which
// the client undoes either way: ErrUnavailable, nothing held. The next
// call goes through.
func TestFaultDropped(t *testing.T) {
	e := newFaultEnv(t, "memory://tqserve-fault-dropped")
	const part = "p"
	commitRow(t, e.d, part, "seed")
	for _, kind := range []proxyFaultKind{proxyDropRequest, proxyDropReply} {
		name := map[proxyFaultKind]string{proxyDropRequest: "request", proxyDropReply: "reply"}[kind]
		t.Run(name, func(t *testing.T) {
			reads := map[string]func(ctx context.Context) error{
				mLookup: func(ctx context.Context) error { _, err := e.m.Lookup(ctx, part, []string{"seed"}); return err },
				mList:   func(ctx context.Context) error { _, err := e.m.List(ctx, part); return err },
				mView:   func(ctx context.Context) error { _, err := e.m.View(ctx, part, "t"); return err },
				mSummary: func(ctx context.Context) error {
					_, err := metadata.Summarize(ctx, e.m, part, metadata.SummaryRequest{Tasks: []string{"t"}, Counts: true})
					return err
				},
			}
			for method, call := range reads {
				ch := e.p.arm(method, kind, 0)
				err := call(callCtx(t))
				fired(t, ch)
				onlyUnavailable(t, method, err)
				if err := call(callCtx(t)); err != nil {
					t.Fatalf("%s after the fault: %v", method, err)
				}
			}

			key := "prep-" + name
			ch := e.p.arm(mPrepare, kind, 0)
			_, err := e.m.Prepare(callCtx(t), part, []string{key}, []string{"x"}, nil)
			fired(t, ch)
			onlyUnavailable(t, "prepare", err)
			if visible(t, e.d, part, key) {
				t.Fatalf("prepare: %q visible after a failed prepare", key)
			}

			// Commit: the reservation taken straight at the server.
			key = "commit-" + name
			res, err := e.d.Prepare(callCtx(t), part, []string{key}, []string{"x"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			up := []metadata.RowUpdate{{Key: key, Index: res[0].Index, Fields: map[string]metadata.FieldInfo{"x": {Gen: res[0].Gens["x"]}}}}
			ch = e.p.arm(mCommit, kind, 0)
			_, err = e.m.Commit(callCtx(t), part, up)
			fired(t, ch)
			checkWrite(t, "commit", kind, err, visible(t, e.d, part, key))
			if _, err := e.m.Commit(callCtx(t), part, up); err != nil {
				t.Fatalf("commit again after the fault: %v", err)
			}
			if !visible(t, e.d, part, key) {
				t.Fatalf("commit: %q not visible after a commit that succeeded", key)
			}

			// Block: like Prepare, what one whose reply was lost
			// reserved nobody uses.
			ch = e.p.arm(mBlock, kind, 0)
			_, err = metadata.Block(callCtx(t), e.m, part, []string{"x"}, 4)
			fired(t, ch)
			onlyUnavailable(t, "block", err)

			// PutNew: a block taken straight at the server; after the
			// fault it applied (the reply was lost: ErrOutcomeUnknown)
			// or not (the request was lost); made again, it applies or
			// is refused as applied, and the row is there.
			key = "putnew-" + name
			blk, err := metadata.Block(callCtx(t), e.d, part, []string{"x"}, 4)
			if err != nil {
				t.Fatal(err)
			}
			base := blk.Base
			up = []metadata.RowUpdate{{Key: key, Index: base, Fields: map[string]metadata.FieldInfo{"x": {}}}}
			ch = e.p.arm(mPutNew, kind, 0)
			_, err = metadata.PutNew(callCtx(t), e.m, part, blk.Token, base, []string{key}, []string{"x"}, nil, up)
			fired(t, ch)
			applied := visible(t, e.d, part, key)
			checkWrite(t, "put new", kind, err, applied)
			_, err = metadata.PutNew(callCtx(t), e.m, part, blk.Token, base, []string{key}, []string{"x"}, nil, up)
			switch {
			case applied && !errors.Is(err, backends.ErrConflict):
				t.Fatalf("put new again after it applied: %v, want ErrConflict", err)
			case !applied && err != nil:
				t.Fatalf("put new again after the fault: %v", err)
			}
			if commitIndex(t, e.d, part, key) != base {
				t.Fatalf("put new: %q not at its block's index %d", key, base)
			}

			// Claim: the task's only ready row. Whether its request or
			// its reply was lost, the client undoes it (it chose its
			// token): nothing is held, and the error says nothing
			// applied.
			task := "claim-" + name
			ch = e.p.arm(mClaim, kind, 0)
			_, err = e.m.Claim(callCtx(t), part, claimReq(task), nil)
			fired(t, ch)
			ix := commitIndex(t, e.d, part, "seed")
			if st := stateOf(t, e.d, part, task, ix); st == metadata.Leased {
				t.Fatalf("claim: %v; the row is leased to the claim whose caller got that error", err)
			}
			onlyUnavailable(t, "claim", err)

			// Settle: an ack of a lease taken straight at the server.
			task = "settle-" + name
			c, err := e.d.Claim(callCtx(t), part, claimReq(task), nil)
			if err != nil || c.Lease == "" {
				t.Fatalf("claim: %+v, %v", c, err)
			}
			ch = e.p.arm(mSettle, kind, 0)
			_, err = e.m.Settle(callCtx(t), part, metadata.SettleRequest{Task: task, Op: metadata.Ack, Lease: c.Lease, Indexes: []uint64{c.Rows[0].Index}})
			fired(t, ch)
			checkWrite(t, "settle", kind, err, stateOf(t, e.d, part, task, c.Rows[0].Index) == metadata.Acked)
		})
	}
}

// checkWrite checks the error of a write through a fault of kind, given
// whether the server applied it.
func checkWrite(t *testing.T, what string, kind proxyFaultKind, err error, applied bool) {
	t.Helper()
	unknown := definiteOrUnknown(t, what, err)
	switch {
	case kind == proxyDropRequest && applied:
		t.Fatalf("%s: applied although its request never reached the server", what)
	case kind == proxyDropReply && !applied:
		t.Fatalf("%s: not applied although the server ran it (the proxy dropped the reply)", what)
	case kind == proxyDropReply && !unknown:
		t.Fatalf("%s: %v: the server applied it, and the error says it applied nothing (want ErrOutcomeUnknown)", what, err)
	}
}

func commitIndex(t *testing.T, m metadata.MetaStore, part, key string) uint64 {
	t.Helper()
	rows, err := m.Lookup(callCtx(t), part, []string{key})
	if err != nil || rows[0] == nil {
		t.Fatalf("lookup %q: %v, %v", key, rows, err)
	}
	return rows[0].Index
}

// A reply that comes later than the call's context allows ends the call
// at its context: a read with the context's error, a write with
// ErrOutcomeUnknown (the server may have applied it), a Wait with the
// context's error; none waits for the reply.
func TestFaultDelayedReply(t *testing.T) {
	e := newFaultEnv(t, "memory://tqserve-fault-delay")
	const part, delay, limit = "p", 3 * time.Second, 200 * time.Millisecond
	commitRow(t, e.d, part, "seed")
	timed := func(what, method string, call func(ctx context.Context) error) error {
		t.Helper()
		ch := e.p.arm(method, proxyDelayReply, delay)
		ctx, cancel := context.WithTimeout(t.Context(), limit)
		defer cancel()
		start := time.Now()
		err := call(ctx)
		if took := time.Since(start); took > delay-time.Second {
			t.Fatalf("%s: returned after %v, waiting for a reply delayed %v past its context's %v", what, took, delay, limit)
		}
		select {
		case <-ch:
		case <-time.After(delay):
			t.Fatalf("%s: the proxy's delay did not act", what)
		}
		// The next call not behind the delayed reply: on a new connection.
		e.p.cutAll()
		reconnect(t, e.m)
		return err
	}
	err := timed("list", mList, func(ctx context.Context) error { _, err := e.m.List(ctx, part); return err })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("list: %v, want the context's error", err)
	}
	res, err := e.d.Prepare(callCtx(t), part, []string{"k"}, []string{"x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = timed("commit", mCommit, func(ctx context.Context) error {
		_, err := e.m.Commit(ctx, part, []metadata.RowUpdate{{Key: "k", Index: res[0].Index, Fields: map[string]metadata.FieldInfo{"x": {Gen: res[0].Gens["x"]}}}})
		return err
	})
	if !errors.Is(err, backends.ErrOutcomeUnknown) {
		t.Fatalf("commit: %v, want ErrOutcomeUnknown", err)
	}
	err = timed("claim", mClaim, func(ctx context.Context) error { _, err := e.m.Claim(ctx, part, claimReq("t"), nil); return err })
	if !errors.Is(err, backends.ErrOutcomeUnknown) {
		t.Fatalf("claim: %v, want ErrOutcomeUnknown", err)
	}
	v, err := e.d.View(callCtx(t), part)
	if err != nil {
		t.Fatal(err)
	}
	woke := make(chan error, 1)
	err = timed("wait", mWait, func(ctx context.Context) error {
		go func() { woke <- tryCommit(e.d, part, "wake") }() // the change that makes the server reply
		return e.m.Wait(ctx, part, v.Mark)
	})
	if err := <-woke; err != nil {
		t.Fatal(err)
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait: %v, want nil or the context's error", err)
	}
}

// A Wait whose request or reply is lost, or whose connection is cut while
// it waits (a server restarting), returns nil, a spurious wake-up the
// contract allows, or its context's error: it never hangs past its
// context, nor fails with an error its caller would take for a verdict.
func TestFaultWait(t *testing.T) {
	e := newFaultEnv(t, "memory://tqserve-fault-wait")
	const part = "p"
	commitRow(t, e.d, part, "seed")
	mark := func() metadata.Mark {
		v, err := e.d.View(callCtx(t), part)
		if err != nil {
			t.Fatal(err)
		}
		return v.Mark
	}
	wait := func(what string, during func()) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		done := make(chan error, 1)
		mk := mark()
		go func() { done <- e.m.Wait(ctx, part, mk) }()
		during()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s: wait: %v, want nil or the context's error", what, err)
			}
		case <-time.After(4 * time.Second):
			t.Fatalf("%s: wait still waiting a second past its context", what)
		}
	}
	for i, kind := range []proxyFaultKind{proxyDropRequest, proxyDropReply} {
		ch := e.p.arm(mWait, kind, 0)
		wait(fmt.Sprint("fault ", kind), func() {
			if kind == proxyDropReply {
				waitSeen(t, e.p, mWait, i+1)
				commitRow(t, e.d, part, fmt.Sprint("wake", i))
			}
			<-ch
		})
	}
	n := e.p.seen(mWait)
	wait("cut", func() {
		waitSeen(t, e.p, mWait, n+1)
		e.p.cutAll()
	})
	if err := e.m.Wait(callCtx(t), part, metadata.Mark{}); err != nil {
		t.Fatalf("wait after the faults: %v", err)
	}
}

// reconnect lists until a call goes through again: the first call after
// the proxy cut the connections may go out on one the client has not yet
// seen closed, and fail with ErrUnavailable.
func reconnect(t *testing.T, m metadata.MetaStore) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		_, err := m.Partitions(callCtx(t))
		if err == nil {
			return
		}
		if !errors.Is(err, backends.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("partitions after the connections were cut: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitSeen waits until the proxy has seen n calls of method.
func waitSeen(t *testing.T, p *grpcProxy, method string, n int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for p.seen(method) < n {
		if time.Now().After(deadline) {
			t.Fatalf("the proxy saw %d calls of %s, want %d", p.seen(method), method, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Through tq: a Put whose request or reply is lost at any of its calls
// (Prepare, the cells' Write, Commit) succeeds (tq retried what applied
// nothing), or fails with ErrOutcomeUnknown or an error that says it
// applied nothing; afterwards every row the partition lists reads whole
// (no row visible without its cells), and a key whose put succeeded
// reads back. A Claim whose reply is lost leases its row or fails with
// ErrOutcomeUnknown; either way the row comes back when the lease ends.
func TestFaultClient(t *testing.T) {
	s := startServer(t, "memory://tqserve-fault-client")
	p := startGRPCProxy(t, strings.TrimPrefix(s.URL, "tq://"))
	c := openClient(t, "tq://"+p.addr())
	direct := openClient(t, s.URL)
	const part = "p"
	ctx := context.Background()
	put := map[string]bool{} // keys whose Put succeeded
	n := 0
	for _, method := range []string{mPrepare, mWrite, mCommit} {
		for _, kind := range []proxyFaultKind{proxyDropRequest, proxyDropReply} {
			n++
			key := fmt.Sprintf("k%d", n)
			ch := p.arm(method, kind, 0)
			err := c.Put(callCtx(t), part, key, map[string]any{"x": int64(n)}, nil)
			fired(t, ch)
			t.Logf("put across a dropped %s of %s: %v", kind, method, err)
			switch {
			case err == nil:
				put[key] = true
			case errors.Is(err, tq.ErrOutcomeUnknown):
			case errors.Is(err, tq.ErrUnavailable):
			default:
				t.Fatalf("put across a dropped %s of %s: %v, want success, ErrUnavailable or ErrOutcomeUnknown", kind, method, err)
			}
		}
	}
	rows, err := direct.List(ctx, part)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, k := range rows.Keys() {
		listed[k] = true
	}
	for k := range put {
		if !listed[k] {
			t.Errorf("put %q succeeded, and the partition does not list it", k)
		}
	}
	if len(rows.Rows) > 0 {
		b, err := direct.BatchGet(ctx, part, rows.Keys(), "x")
		if err != nil {
			t.Fatalf("read of the rows listed (%q): %v: a row visible without its cells", rows.Keys(), err)
		}
		for i, k := range rows.Keys() {
			if got, want := b["x"].Row(i), int64(mustAtoi(t, k[1:])); got != want {
				t.Errorf("%q: x = %v, want %d", k, got, want)
			}
		}
	}

	// Claim across a dropped reply: a task's one lease of the partition's
	// rows, then every row comes back once the lease ends.
	task, err := c.Task(part, "t", []string{"x"}, tq.LeaseFor(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ch := p.arm(mClaim, proxyDropReply, 0)
	l, err := task.Claim(callCtx(t), len(rows.Rows))
	fired(t, ch)
	if err != nil && !errors.Is(err, tq.ErrOutcomeUnknown) {
		t.Fatalf("claim across a dropped reply: %v, want success or ErrOutcomeUnknown", err)
	}
	if err == nil && l != nil {
		t.Logf("claim across a dropped reply leased %d rows", l.Len())
	}
	dt, err := direct.Task(part, "t", []string{"x"})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	got, err := dt.Wait(wctx, len(rows.Rows), tq.AtLeast(len(rows.Rows)))
	if err != nil {
		t.Fatalf("the rows a lost claim's lease held did not come back: %v", err)
	}
	if got.Len() != len(rows.Rows) {
		t.Fatalf("claimed %d rows, want %d", got.Len(), len(rows.Rows))
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (k proxyFaultKind) String() string {
	return [...]string{"none", "request", "reply", "delay"}[k]
}

// A server restart (the proxy cuts every connection and points at a new
// server over the same directory) is ridden out by tq: a Put and a read
// made while the new server comes up succeed, and what was acknowledged
// before the restart reads back.
func TestFaultRestart(t *testing.T) {
	dir := "file://" + t.TempDir() + "?sync=never"
	s1, err := newServerAt(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	p := startGRPCProxy(t, s1.addr)
	c := openClient(t, "tq://"+p.addr())
	ctx := callCtx(t)
	if err := c.Put(ctx, "p", "before", map[string]any{"x": int64(1)}, nil); err != nil {
		t.Fatal(err)
	}
	p.setTarget("")
	if err := s1.close(); err != nil {
		t.Fatal(err)
	}
	s2, err := newServerAt(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		p.setTarget(s2.addr)
	}()
	if err := c.Put(ctx, "p", "after", map[string]any{"x": int64(2)}, nil); err != nil {
		t.Fatalf("put across the restart: %v", err)
	}
	rows, err := c.List(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rows.Keys(), ","); got != "before,after" {
		t.Fatalf("rows after the restart: %s, want before,after", got)
	}
	if _, err := c.BatchGet(ctx, "p", rows.Keys(), "x"); err != nil {
		t.Fatal(err)
	}
}

// restartable is a server a test stops before it ends.
type restartable struct {
	addr string
	srv  *tqserve.Server
	done chan error
	once sync.Once
	err  error
}

// newServerAt serves engineURL on a free loopback port until close or
// the end of the test.
func newServerAt(t *testing.T, engineURL string) (*restartable, error) {
	s, err := tqserve.NewServer(t.Context(), engineURL)
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, errors.Join(err, s.Close())
	}
	r := &restartable{addr: lis.Addr().String(), srv: s, done: make(chan error, 1)}
	go func() { r.done <- s.Serve(lis) }()
	t.Cleanup(func() {
		if err := r.close(); err != nil {
			t.Errorf("server close: %v", err)
		}
	})
	return r, nil
}

func (r *restartable) close() error {
	r.once.Do(func() { r.err = errors.Join(r.srv.Close(), <-r.done) })
	return r.err
}

// A server that stops answering without closing the connection (the
// proxy holds its replies, as a frozen host would) does not make a call
// with no deadline wait for ever: the client's keepalive finds the
// connection dead and the call fails, a write with ErrOutcomeUnknown.
// It takes the keepalive's time, so -short skips it.
func TestFaultUnanswered(t *testing.T) {
	t.Parallel() // it only waits, for the keepalive
	if testing.Short() {
		t.Skip("takes the keepalive's time (about 15 s)")
	}
	e := newFaultEnv(t, "memory://tqserve-fault-unanswered")
	res, err := e.d.Prepare(callCtx(t), "p", []string{"k"}, []string{"x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ch := e.p.arm(mCommit, proxyDelayReply, time.Hour)
	done := make(chan error, 1)
	go func() {
		_, err := e.m.Commit(context.Background(), "p", []metadata.RowUpdate{{Key: "k", Index: res[0].Index,
			Fields: map[string]metadata.FieldInfo{"x": {Gen: res[0].Gens["x"]}}}})
		done <- err
	}()
	select {
	case err := <-done:
		fired(t, ch)
		if !errors.Is(err, backends.ErrOutcomeUnknown) {
			t.Fatalf("commit to a server that stopped answering: %v, want ErrOutcomeUnknown", err)
		}
	case <-time.After(30 * time.Second):
		e.p.cutAll()
		<-done
		t.Fatal("a commit with no deadline waited 30 s on a server that stopped answering")
	}
}

// A graceful stop ends the Waits in flight (a spurious wake-up each, as
// Wait may return) rather than waiting for their deadlines, and the
// waiters return nil or their context's error, not a failure.
func TestFaultGracefulStopWait(t *testing.T) {
	r, err := newServerAt(t, "memory://tqserve-fault-graceful")
	if err != nil {
		t.Fatal(err)
	}
	m := openMeta(t, "tq://"+r.addr)
	commitRow(t, m, "p", "seed")
	v, err := m.View(callCtx(t), "p")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- m.Wait(ctx, "p", v.Mark) }()
	time.Sleep(100 * time.Millisecond) // the Wait at the server
	stopped := make(chan struct{})
	go func() { r.srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		cancel()
		<-stopped
		t.Fatal("a graceful stop waited on a Wait in flight (5 s)")
	}
	if err := <-done; err != nil {
		t.Fatalf("wait across a graceful stop: %v, want nil", err)
	}
}

// Producers and a consumer go on through a proxy that cuts every
// connection every few tens of milliseconds. Each Put succeeds or fails
// with ErrOutcomeUnknown (tq retries what applied nothing); afterwards a
// key whose put succeeded reads back whole, one whose outcome is unknown
// reads back whole or is absent, and no other key is listed. Every row
// is consumed in the end: acked by the consumer, or claimed once the
// leases its lost claims took end.
func TestFaultChurn(t *testing.T) {
	s := startServer(t, "memory://tqserve-fault-churn")
	p := startGRPCProxy(t, strings.TrimPrefix(s.URL, "tq://"))
	c := openClient(t, "tq://"+p.addr())
	direct := openClient(t, s.URL)
	const part, producers, perProducer = "p", 3, 15
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	stop := make(chan struct{})
	cutter := make(chan struct{})
	go func() {
		defer close(cutter)
		for {
			select {
			case <-stop:
				return
			case <-time.After(60 * time.Millisecond):
				p.cutAll()
			}
		}
	}()

	type outcome struct {
		key string
		err error
	}
	results := make(chan outcome, producers*perProducer)
	var wg sync.WaitGroup
	for i := range producers {
		wg.Go(func() {
			for j := range perProducer {
				key := fmt.Sprintf("k%d", i*perProducer+j)
				err := c.Put(ctx, part, key, map[string]any{"x": int64(i*perProducer + j)}, nil)
				results <- outcome{key, err}
			}
		})
	}
	task, err := c.Task(part, "t", []string{"x"}, tq.LeaseFor(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	acked, maybeAcked := map[string]bool{}, map[string]bool{}
	consumed := make(chan error, 1)
	go func() {
		defer close(consumed)
		deadline := time.Now().Add(time.Second)
		for time.Now().Before(deadline) {
			wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
			l, err := task.Wait(wctx, 5)
			wcancel()
			switch {
			case err == nil:
				err := l.Ack(ctx)
				for _, k := range l.Keys() {
					switch {
					case err == nil:
						acked[k] = true
					case errors.Is(err, tq.ErrOutcomeUnknown):
						maybeAcked[k] = true
					}
				}
				if err != nil && !errors.Is(err, tq.ErrOutcomeUnknown) && !errors.Is(err, tq.ErrLeaseLost) {
					consumed <- fmt.Errorf("ack: %w", err)
					return
				}
			case errors.Is(err, context.DeadlineExceeded), errors.Is(err, tq.ErrOutcomeUnknown):
			default:
				consumed <- fmt.Errorf("wait: %w", err)
				return
			}
		}
	}()
	wg.Wait()
	if err := <-consumed; err != nil {
		t.Fatal(err)
	}
	close(stop)
	<-cutter
	close(results)

	succeeded, unknown := map[string]bool{}, map[string]bool{}
	for r := range results {
		switch {
		case r.err == nil:
			succeeded[r.key] = true
		case errors.Is(r.err, tq.ErrOutcomeUnknown):
			unknown[r.key] = true
		default:
			t.Errorf("put %q across cut connections: %v, want success or ErrOutcomeUnknown", r.key, r.err)
		}
	}
	rows, err := direct.List(ctx, part)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, k := range rows.Keys() {
		listed[k] = true
		if !succeeded[k] && !unknown[k] {
			t.Errorf("%q listed, and its put failed as having applied nothing", k)
		}
	}
	for k := range succeeded {
		if !listed[k] {
			t.Errorf("put %q succeeded, and the partition does not list it", k)
		}
	}
	b, err := direct.BatchGet(ctx, part, rows.Keys(), "x")
	if err != nil {
		t.Fatalf("read of the rows listed: %v: a row visible without its cells", err)
	}
	for i, k := range rows.Keys() {
		if got, want := b["x"].Row(i), int64(mustAtoi(t, k[1:])); got != want {
			t.Errorf("%q: x = %v, want %d", k, got, want)
		}
	}
	t.Logf("%d puts succeeded, %d outcome unknown (%d of those applied); %d rows acked under churn, %d maybe",
		len(succeeded), len(unknown), len(rows.Rows)-len(succeeded), len(acked), len(maybeAcked))

	// The rest of the rows, claimed straight at the server once the leases
	// of claims whose replies were lost end.
	dt, err := direct.Task(part, "t", []string{"x"})
	if err != nil {
		t.Fatal(err)
	}
	for len(acked) < len(rows.Rows) {
		// Longer than the leases the lost claims took.
		wctx, wcancel := context.WithTimeout(ctx, time.Second)
		l, err := dt.Wait(wctx, len(rows.Rows))
		wcancel()
		if errors.Is(err, context.DeadlineExceeded) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range l.Keys() {
			if acked[k] {
				t.Errorf("%q delivered again after its ack succeeded", k)
			}
			acked[k] = true
		}
		if err := l.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Rows not claimable are those whose ack's outcome was unknown, and
	// that ack applied.
	cs, err := direct.Consumption(ctx, part, rows.Keys()...)
	if err != nil {
		t.Fatal(err)
	}
	for _, kc := range cs {
		if st := kc.Tasks["t"].State; !acked[kc.Key] && (!maybeAcked[kc.Key] || st != tq.StateAcked) {
			t.Errorf("%q: %s for the task, and neither claimable nor acked by an ack whose outcome was unknown", kc.Key, st)
		}
	}
}
