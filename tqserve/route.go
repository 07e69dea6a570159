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

// router sends each call naming a partition to the server that owns it,
// as it learned from MOVED replies; other calls, and a partition's calls
// before any MOVED, go to the connection of the URL's servers. It is a
// unary client interceptor on that connection, so each call of Meta is
// routed without knowing it.
type router struct {
	dial func(addr string) (*grpc.ClientConn, error)

	mu     sync.Mutex
	routes map[string]*grpc.ClientConn // partition -> its owner's connection
	conns  map[string]*grpc.ClientConn // address -> connection
	closed bool
}

func newRouter(dial func(addr string) (*grpc.ClientConn, error)) *router {
	return &router{dial: dial, routes: map[string]*grpc.ClientConn{}, conns: map[string]*grpc.ClientConn{}}
}

func (r *router) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	p, ok := req.(interface{ GetPartition() string })
	if !ok {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	part := p.GetPartition()
	for hop := 0; ; hop++ {
		target := r.route(part)
		var err error
		if target == nil {
			err = invoker(ctx, method, req, reply, cc, opts...)
		} else {
			err = target.Invoke(ctx, method, req, reply, opts...)
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

func (r *router) route(part string) *grpc.ClientConn {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.routes[part]
}

// setRoute routes part to the server at addr, dialling it once; false if
// it could not.
func (r *router) setRoute(part, addr string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || addr == "" {
		return false
	}
	c := r.conns[addr]
	if c == nil {
		var err error
		if c, err = r.dial(addr); err != nil {
			return false
		}
		r.conns[addr] = c
	}
	r.routes[part] = c
	return true
}

func (r *router) dropRoute(part string, c *grpc.ClientConn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.routes[part] == c {
		delete(r.routes, part)
	}
}

func (r *router) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for _, c := range r.conns {
		_ = c.Close()
	}
	r.conns, r.routes = map[string]*grpc.ClientConn{}, map[string]*grpc.ClientConn{}
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
