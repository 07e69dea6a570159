package tqserve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/tqserve/tqpb"
)

// A unary gRPC call costs a new HTTP/2 stream, its headers and trailers:
// on loopback two to three times what the same request and reply cost as
// two messages of a stream that stays open. So a client makes its calls
// of Meta on Calls streams, one call at a time per stream, each stream
// kept open for the next call of its connection (PROTOCOL.md, Calls).

// onCalls reports whether a client makes the call method on a Calls
// stream: every call of Meta. (A Wait ended by its context ends the
// stream it ran on, and the next call opens another: the cost of one
// unary call. Cells are not carried on Calls: most of their cost is their
// bytes.)
func onCalls(method string) bool {
	return strings.HasPrefix(method, metaPrefix)
}

// metaPrefix begins the gRPC path of every call of Meta.
var metaPrefix = "/" + tqpb.Meta_ServiceDesc.ServiceName + "/"

// unaryFor is how long a connection whose server had no Calls makes
// unary calls before it asks again.
const unaryFor = time.Minute

// maxIdleStreams bounds the open Calls streams a connection keeps for
// later calls; past it, a stream whose call ended is closed.
const maxIdleStreams = 64

// callPool makes unary calls of Meta over Calls streams of a connection.
type callPool struct {
	// Until when to make unary calls (UnixNano): the server had no Calls
	// (it may be replaced by one that has).
	unaryUntil atomic.Int64

	mu     sync.Mutex
	idle   []*callStream
	closed bool
}

// callStream is an open Calls stream with no call in flight.
type callStream struct {
	st     grpc.ClientStream
	cancel context.CancelFunc
}

// invoke makes the call method on a Calls stream of cc, the pool's
// connection. ok false: the server
// has no Calls (an older one), nothing was sent, and the caller makes the
// call as a unary call. Its error is what the unary call's would be: a
// status, with the server's Failure when the server failed the call.
func (p *callPool) invoke(ctx context.Context, cc *grpc.ClientConn, method string, req, reply any, opts []grpc.CallOption) (err error, ok bool) {
	in, isIn := req.(proto.Message)
	out, isOut := reply.(proto.Message)
	if !onCalls(method) || !isIn || !isOut || time.Now().UnixNano() < p.unaryUntil.Load() {
		return nil, false
	}
	body, err := proto.Marshal(in)
	if err != nil {
		return status.Errorf(codes.Internal, "grpc: error while marshaling: %v", err), true
	}
	name := method[strings.LastIndexByte(method, '/')+1:]
	for {
		if err := ctx.Err(); err != nil {
			return status.FromContextError(err).Err(), true
		}
		cs := p.take()
		fresh := cs == nil
		var sctx context.Context
		if fresh {
			cs = &callStream{}
			sctx, cs.cancel = context.WithCancel(context.Background())
		}
		// The caller's context ending ends the stream, and the call on it.
		stop := context.AfterFunc(ctx, cs.cancel)
		if fresh {
			if cs.st, err = openCalls(sctx, cc, opts); err != nil {
				stop()
				cs.cancel()
				// (Its text keeps gRPC's last connection error, which
				// says why a deadline passed while connecting.)
				return err, true // nothing sent
			}
		}
		call := &tqpb.Call{Method: name, Request: body}
		if d, ok := ctx.Deadline(); ok {
			call.TimeoutNs = max(int64(time.Until(d)), 1)
		}
		var r tqpb.CallReply
		err := cs.st.SendMsg(call)
		sent := err == nil
		if err == nil || errors.Is(err, io.EOF) {
			// On EOF the stream ended before the call was sent; RecvMsg
			// says how.
			err = cs.st.RecvMsg(&r)
		}
		cut := !stop()
		if err == nil && !cut {
			p.put(cs)
		} else {
			cs.cancel()
		}
		if err != nil {
			if cut {
				return status.FromContextError(ctx.Err()).Err(), true
			}
			if errors.Is(err, io.EOF) {
				err = status.Error(codes.Unavailable, "tq server ended the Calls stream")
			}
			st := status.Convert(err)
			switch {
			case st.Code() == codes.Unimplemented && fresh && !hasFailure(st):
				// A server without Calls: it ran nothing.
				p.unaryUntil.Store(time.Now().Add(unaryFor).UnixNano())
				return nil, false
			case !fresh && (!sent && !hasFailure(st) || handingOver(err)):
				// A kept stream that ended while idle (its connection
				// lost: the call never left), or that its server, stopping,
				// ended before running the call: again on another stream
				// (each try takes a kept one; a new one is not tried
				// again), which reaches a server still serving.
				continue
			}
			return err, true
		}
		if s := r.GetStatus(); s != nil && s.GetCode() != int32(codes.OK) {
			return status.ErrorProto(&spb.Status{Code: s.GetCode(), Message: s.GetMessage(), Details: s.GetDetails()}), true
		}
		if err := proto.Unmarshal(r.GetReply(), out); err != nil {
			return status.Errorf(codes.Internal, "grpc: failed to unmarshal the received message: %v", err), true
		}
		return nil, true
	}
}

// openCalls opens a Calls stream on cc. The goroutines gRPC starts for a stream
// inherit the profiler labels of the goroutine that opens it; the stream
// outlives the call that opens it (the pool keeps it), so it is opened by
// a goroutine with no labels: its goroutines are the pool's, not the
// caller's.
func openCalls(ctx context.Context, cc *grpc.ClientConn, opts []grpc.CallOption) (grpc.ClientStream, error) {
	type opened struct {
		st  grpc.ClientStream
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		pprof.SetGoroutineLabels(context.Background())
		st, err := cc.NewStream(ctx, &tqpb.Meta_ServiceDesc.Streams[0], tqpb.Meta_Calls_FullMethodName, opts...)
		ch <- opened{st, err}
	}()
	o := <-ch
	return o.st, o.err
}

// hasFailure reports whether st carries a tq server's Failure: its
// decision, such as CLOSED (nothing of the call ran), not a transport's.
func hasFailure(st *status.Status) bool {
	for _, d := range st.Details() {
		if _, ok := d.(*tqpb.Failure); ok {
			return true
		}
	}
	return false
}

// take returns an open stream with no call in flight, or nil.
func (p *callPool) take() *callStream {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.idle)
	if n == 0 {
		return nil
	}
	cs := p.idle[n-1]
	p.idle = p.idle[:n-1]
	return cs
}

// put keeps cs for a later call, or closes it.
func (p *callPool) put(cs *callStream) {
	p.mu.Lock()
	if !p.closed && len(p.idle) < maxIdleStreams {
		p.idle = append(p.idle, cs)
		cs = nil
	}
	p.mu.Unlock()
	if cs != nil {
		cs.close()
	}
}

// close closes the streams kept; later calls open their own.
func (p *callPool) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, cs := range idle {
		cs.close()
	}
}

// close ends the stream: the server sees its end (CloseSend), then the
// stream's context.
func (cs *callStream) close() {
	_ = cs.st.CloseSend()
	cs.cancel()
}

// The server's side.

// Calls serves the unary calls of a Calls stream one after another, each
// through the interceptors of a unary call. When the server stops
// gracefully, a call in flight is answered, then the stream ends with a
// CLOSED Failure; a call read after that is not run.
func (s *Server) Calls(st tqpb.Meta_CallsServer) error {
	var mu sync.Mutex
	var busy, closing bool
	done := make(chan error, 1)
	go func() {
		ctx := st.Context()
		for {
			call, err := st.Recv()
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil // the client closed the stream
				}
				done <- err
				return
			}
			mu.Lock()
			if closing {
				mu.Unlock()
				done <- errStopping
				return
			}
			busy = true
			mu.Unlock()
			err = st.Send(s.runCall(ctx, call))
			mu.Lock()
			busy = false
			stop := closing
			mu.Unlock()
			if err != nil || stop {
				if err == nil {
					err = errStopping
				}
				done <- err
				return
			}
		}
	}()
	select {
	case err := <-done:
		return err
	case <-s.stopping.Done():
	}
	mu.Lock()
	closing = true
	inFlight := busy
	mu.Unlock()
	if inFlight {
		return <-done
	}
	// The reader is between calls: whatever it reads next is not run.
	return errStopping
}

// errStopping ends a Calls stream of a server stopping gracefully.
var errStopping = toStatus(fmt.Errorf("%w: the tq server is stopping: this stream ran no call after its last reply", backends.ErrClosed))

// runCall runs call as the unary call it names and returns its answer.
func (s *Server) runCall(ctx context.Context, call *tqpb.Call) *tqpb.CallReply {
	m, ok := s.unary[call.GetMethod()]
	if !ok {
		return replyStatus(status.Newf(codes.Unimplemented, "tq server: no unary call %q on Calls", call.GetMethod()))
	}
	if t := call.GetTimeoutNs(); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(t))
		defer cancel()
	}
	dec := func(v any) error {
		if err := proto.Unmarshal(call.GetRequest(), v.(proto.Message)); err != nil {
			return status.Errorf(codes.Internal, "grpc: error unmarshalling request: %v", err)
		}
		return nil
	}
	r, err := m.Handler(s, ctx, dec, s.intercept)
	if err != nil {
		return replyStatus(status.Convert(err))
	}
	msg, ok := r.(proto.Message)
	if !ok || msg == nil {
		return replyStatus(status.Newf(codes.Internal, "tq server: call %s made no reply", call.GetMethod()))
	}
	body, err := proto.Marshal(msg)
	if err != nil {
		return replyStatus(status.Newf(codes.Internal, "grpc: error while marshaling: %v", err))
	}
	return &tqpb.CallReply{Reply: body}
}

func replyStatus(st *status.Status) *tqpb.CallReply {
	p := st.Proto()
	return &tqpb.CallReply{Status: &tqpb.Status{Code: p.GetCode(), Message: p.GetMessage(), Details: p.GetDetails()}}
}

// unaryMethods maps the names of Meta's unary calls to their handlers.
func unaryMethods() map[string]grpc.MethodDesc {
	m := map[string]grpc.MethodDesc{}
	for _, d := range tqpb.Meta_ServiceDesc.Methods {
		m[d.MethodName] = d
	}
	return m
}

// chainUnary runs ints around a unary handler, the first outermost, as
// grpc.ChainUnaryInterceptor does.
func chainUnary(ints []grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		for i := len(ints) - 1; i >= 0; i-- {
			in, next := ints[i], h
			h = func(ctx context.Context, req any) (any, error) { return in(ctx, req, info, next) }
		}
		return h(ctx, req)
	}
}
