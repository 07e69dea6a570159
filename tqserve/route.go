package tqserve

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tqgo/tqgo/tqserve/tqpb"
)

// maxHops bounds how many times one call follows MOVED replies or
// falls back from an owner it cannot reach.
const maxHops = 4

// maxRoutes bounds the partitions whose owners a client remembers; past
// it, one route is forgotten for each new one (its partition's next call
// goes to the URL's servers, which send it on again).
const maxRoutes = 1024

// router sends each call naming a partition to the server that owns it,
// as it learned from MOVED replies; other calls, and a partition's calls
// before any MOVED, go to the connection of the URL's servers. It is a
// unary client interceptor on that connection, so each call of Meta is
// routed without knowing it. A connection it dialled is closed once no
// route leads to it and no call is in flight on it: servers that come
// and go leave no connection behind. Safe for concurrent use.
type router struct {
	dial func(addr string) (*grpc.ClientConn, error)

	mu     sync.Mutex
	routes map[string]*peer // partition -> its owner
	peers  map[string]*peer // address -> its connection
	closed bool

	main *callPool // the calls of the URL's servers' connection
}

// peer is a connection the router dialled, and what holds it open.
type peer struct {
	addr   string
	cc     *grpc.ClientConn
	pool   *callPool
	routes int // partitions routed to it
	calls  int // calls in flight on it
}

func newRouter(dial func(addr string) (*grpc.ClientConn, error)) *router {
	return &router{dial: dial, routes: map[string]*peer{}, peers: map[string]*peer{}, main: &callPool{}}
}

func (r *router) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	p, ok := req.(interface{ GetPartition() string })
	if !ok {
		return r.invoke(ctx, r.main, cc, method, req, reply, func() error { return invoker(ctx, method, req, reply, cc, opts...) }, opts)
	}
	part := p.GetPartition()
	for hop := 0; ; hop++ {
		target := r.route(part)
		var err error
		if target == nil {
			err = r.invoke(ctx, r.main, cc, method, req, reply, func() error { return invoker(ctx, method, req, reply, cc, opts...) }, opts)
		} else {
			err = r.invoke(ctx, target.pool, target.cc, method, req, reply, func() error { return target.cc.Invoke(ctx, method, req, reply, opts...) }, opts)
			r.done(target)
		}
		if err == nil || hop >= maxHops || ctx.Err() != nil {
			return err
		}
		if owner, ok := movedTo(err); ok {
			if r.setRoute(part, owner) {
				continue
			}
			return err
		}
		if target != nil && (unreachable(err) || handingOver(err)) {
			// The owner we were sent to is gone: ask the URL's servers,
			// one of which takes the partition once its ownership ends.
			r.dropRoute(part, target)
			continue
		}
		return err
	}
}

// invoke makes a call on a Calls stream of pool, cc's, or as a unary call
// (unary) where the server has no Calls or the call is not made there.
func (r *router) invoke(ctx context.Context, pool *callPool, cc *grpc.ClientConn, method string, req, reply any, unary func() error, opts []grpc.CallOption) error {
	if err, ok := pool.invoke(ctx, cc, method, req, reply, opts); ok {
		return err
	}
	return unary()
}

// route returns the owner part is routed to (nil: the URL's servers),
// counting a call on it until done.
func (r *router) route(part string) *peer {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.routes[part]
	if p != nil {
		p.calls++
	}
	return p
}

// done ends a call route counted.
func (r *router) done(p *peer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p.calls--
	r.release(p)
}

// setRoute routes part to the server at addr, dialling it unless a
// connection to it is open; false if it could not.
func (r *router) setRoute(part, addr string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || addr == "" {
		return false
	}
	p := r.peers[addr]
	if p == nil {
		cc, err := r.dial(addr)
		if err != nil {
			return false
		}
		p = &peer{addr: addr, cc: cc, pool: &callPool{}}
		r.peers[addr] = p
	}
	old, had := r.routes[part]
	if old == p {
		return true
	}
	if !had && len(r.routes) >= maxRoutes {
		for q, o := range r.routes { // any one
			delete(r.routes, q)
			o.routes--
			r.release(o)
			break
		}
	}
	r.routes[part] = p
	p.routes++
	if old != nil {
		old.routes--
		r.release(old)
	}
	return true
}

// dropRoute sends part's calls back to the URL's servers, if it is routed
// to p.
func (r *router) dropRoute(part string, p *peer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.routes[part] == p {
		delete(r.routes, part)
		p.routes--
		r.release(p)
	}
}

// release closes p's connection if nothing holds it. The caller holds
// r.mu.
func (r *router) release(p *peer) {
	if p.routes > 0 || p.calls > 0 {
		return
	}
	if r.peers[p.addr] == p {
		delete(r.peers, p.addr)
	}
	p.pool.close()
	_ = p.cc.Close()
}

// close closes every connection the router dialled; calls in flight on
// them end.
func (r *router) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	r.main.close()
	for _, p := range r.peers {
		p.pool.close()
		_ = p.cc.Close()
	}
	r.peers, r.routes = map[string]*peer{}, map[string]*peer{}
}

// movedTo returns the owner's address of a MOVED failure.
func movedTo(err error) (string, bool) {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.FailedPrecondition {
		return "", false
	}
	for _, d := range st.Details() {
		if f, ok := d.(*tqpb.Failure); ok && f.GetKind() == tqpb.Failure_MOVED {
			return f.GetOwner(), true
		}
	}
	return "", false
}

// handingOver reports a server's refusal as it stops.
func handingOver(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	for _, d := range st.Details() {
		if f, ok := d.(*tqpb.Failure); ok && f.GetKind() == tqpb.Failure_CLOSED {
			return true
		}
	}
	return false
}

// unreachable reports a failure to reach a server: the request never left.
func unreachable(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.Unavailable && neverSent(st.Message())
}
