package tqserve_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tqgo/tqgo/tq"
	"github.com/tqgo/tqgo/tqserve"
	"github.com/tqgo/tqgo/tqserve/tqpb"
)

// dropFirstClaimReply is a server interceptor that loses the reply of the
// first Claim call whose reply matches lost, after the claim applied.
type dropFirstClaimReply struct {
	lost    func(*tqpb.ClaimReply) bool
	mu      sync.Mutex
	dropped int
}

func (d *dropFirstClaimReply) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	resp, err := next(ctx, req)
	if !strings.HasSuffix(info.FullMethod, "/Claim") || err != nil {
		return resp, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if r, ok := resp.(*tqpb.ClaimReply); ok && d.dropped == 0 && d.lost(r) {
		d.dropped++
		return nil, status.Error(codes.Unavailable, "test: the reply is lost")
	}
	return resp, err
}

func (d *dropFirstClaimReply) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dropped
}

// A claim whose reply is lost on its way back from the server (the claim
// applied: a row leased to its token) is undone by the client, which
// chose the token: the row goes back undelivered, the error no longer
// says the outcome is unknown, and the client's retry leases the row,
// delivered once. Before, the error was an outcome unknown, not retried,
// and the row stayed leased to a token nobody held for the whole lease.
func TestClaimReplyLostUndone(t *testing.T) {
	for name, engine := range engines(t) {
		t.Run(name, func(t *testing.T) {
			d := &dropFirstClaimReply{lost: func(r *tqpb.ClaimReply) bool { return r.GetLease() != "" }}
			s := startServer(t, engine(t), tqserve.WithInterceptor(d.intercept))
			c := openClient(t, s.URL)
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			if err := c.Put(ctx, "p", "k", map[string]any{"x": int64(1)}, nil); err != nil {
				t.Fatal(err)
			}
			task, err := c.Task("p", "t", []string{"x"}, tq.LeaseFor(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			l, err := task.Claim(ctx, 1)
			if err != nil {
				t.Fatalf("a claim whose reply was lost: %v (the row held by no one for the lease)", err)
			}
			if d.count() != 1 {
				t.Fatalf("%d claim replies dropped, want 1", d.count())
			}
			if l.Len() != 1 || l.Keys()[0] != "k" || l.Deliveries[0] != 1 {
				t.Fatalf("leased %q, deliveries %v; want k, delivered once", l.Keys(), l.Deliveries)
			}
			if err := l.Ack(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A Wait whose registering claim's reply is lost (the claim stands at the
// server under a token the reply would have told) does not leave that
// claim to be served the next row: the client undoes it, registers again,
// and the Wait returns the row put after, delivered once. Before, the
// lost claim stood first in line and took the row for a lease.
func TestStandingClaimReplyLostUndone(t *testing.T) {
	for name, engine := range engines(t) {
		t.Run(name, func(t *testing.T) {
			d := &dropFirstClaimReply{lost: func(r *tqpb.ClaimReply) bool { return r.GetWaiting() != "" }}
			s := startServer(t, engine(t), tqserve.WithInterceptor(d.intercept))
			l := waitForPut(t, s.URL, func() {})
			if d.count() != 1 {
				t.Fatalf("%d claim replies dropped, want 1", d.count())
			}
			if err := l.Ack(t.Context()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A claim held up on its way to the server past its caller's deadline,
// which the client undoes meanwhile (in the background: the caller
// returns at its deadline), leases nothing when it arrives: the row stays
// ready, so the next claim leases it, delivered once. Before, the claim
// leased the row on arrival to a token nobody held.
func TestClaimArrivingAfterUndo(t *testing.T) {
	for name, engine := range engines(t) {
		t.Run(name, func(t *testing.T) {
			undone := make(chan struct{})
			arrived := make(chan *tqpb.ClaimReply, 1)
			var once sync.Once
			hold := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
				switch r := req.(type) {
				case *tqpb.SettleRequest:
					resp, err := next(ctx, req)
					if r.GetOp() == tqpb.SettleRequest_UNDO && err == nil {
						once.Do(func() { close(undone) })
					}
					return resp, err
				case *tqpb.ClaimRequest:
					select {
					case <-undone:
						return next(ctx, req)
					default:
					}
					// The first claim: held until the client undid it,
					// then let through (its caller gone).
					<-undone
					resp, err := next(context.WithoutCancel(ctx), req)
					reply, _ := resp.(*tqpb.ClaimReply)
					if err != nil {
						t.Errorf("the claim arriving after its undo: %v, want a claim that leases nothing", err)
					}
					arrived <- reply
					return resp, err
				}
				return next(ctx, req)
			}
			s := startServer(t, engine(t), tqserve.WithInterceptor(hold))
			c := openClient(t, s.URL)
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			if err := c.Put(ctx, "p", "k", map[string]any{"x": int64(1)}, nil); err != nil {
				t.Fatal(err)
			}
			task, err := c.Task("p", "t", []string{"x"}, tq.LeaseFor(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
			_, err = task.Claim(short, 1)
			stop()
			// Its error: the context's, or (the stream reset before the
			// client's deadline timer ran) the undo's; never a lease.
			if err == nil {
				t.Fatal("a claim held past its deadline returned a lease")
			}
			select {
			case r := <-arrived:
				if r.GetLease() != "" || r.GetWaiting() != "" {
					t.Fatalf("the claim arriving after its undo leased %q (standing %q), want nothing", r.GetLease(), r.GetWaiting())
				}
			case <-ctx.Done():
				t.Fatal("the held claim never reached the server")
			}
			l, err := task.Claim(ctx, 1)
			if err != nil || l.Len() != 1 || l.Deliveries[0] != 1 {
				t.Fatalf("the next claim: %v, %v; want k, delivered once", l, err)
			}
			if err := l.Ack(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// undoSeen is a server interceptor that records the claims' tokens and
// the undos it is sent; with v1 it answers Info as a server of version 1
// (which knows neither), and with decided it fails the first claim, after
// it ran, with the server's own outcome unknown (a Failure).
type undoSeen struct {
	v1, decided bool
	mu          sync.Mutex
	tokens      []string
	undos       int
	failed      bool
}

func (u *undoSeen) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	resp, err := next(ctx, req)
	u.mu.Lock()
	defer u.mu.Unlock()
	switch r := req.(type) {
	case *tqpb.ClaimRequest:
		u.tokens = append(u.tokens, r.GetToken())
		if u.decided && !u.failed && err == nil {
			u.failed = true
			st, derr := status.New(codes.Unknown, "test: the append's outcome is unknown").WithDetails(
				&tqpb.Failure{Kind: tqpb.Failure_OUTCOME_UNKNOWN, Message: "test: the append's outcome is unknown"})
			if derr != nil {
				return nil, derr
			}
			return nil, st.Err()
		}
	case *tqpb.SettleRequest:
		if r.GetOp() == tqpb.SettleRequest_UNDO {
			u.undos++
		}
	case *tqpb.InfoRequest:
		if i, ok := resp.(*tqpb.InfoReply); ok && u.v1 {
			i.Version = 1
		}
	}
	return resp, err
}

// A client of a server of version 1, which knows neither claim tokens nor
// undos, sends neither; and a claim the server itself failed with an
// outcome unknown (its append may still land) is not undone: its error
// says the outcome is unknown.
func TestUndoOnlyWhereItHolds(t *testing.T) {
	for _, c := range []struct {
		name   string
		u      *undoSeen
		tokens bool
	}{
		{"server of version 1", &undoSeen{v1: true}, false},
		{"outcome unknown decided by the server", &undoSeen{decided: true}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := startServer(t, "memory://tqserve-undo-"+strings.ReplaceAll(c.name, " ", "-"), tqserve.WithInterceptor(c.u.intercept))
			cl := openClient(t, s.URL)
			ctx := t.Context()
			if err := cl.Put(ctx, "p", "k", map[string]any{"x": int64(1)}, nil); err != nil {
				t.Fatal(err)
			}
			task, err := cl.Task("p", "t", []string{"x"})
			if err != nil {
				t.Fatal(err)
			}
			_, err = task.Claim(ctx, 1)
			c.u.mu.Lock()
			defer c.u.mu.Unlock()
			if len(c.u.tokens) == 0 || (c.u.tokens[0] != "") != c.tokens {
				t.Fatalf("claims' tokens %q: want the client to choose one: %v", c.u.tokens, c.tokens)
			}
			if c.u.undos != 0 {
				t.Fatalf("%d undos sent", c.u.undos)
			}
			if c.u.decided && !errors.Is(err, tq.ErrOutcomeUnknown) {
				t.Fatalf("a claim the server failed with an outcome unknown: %v, want ErrOutcomeUnknown", err)
			}
		})
	}
}
