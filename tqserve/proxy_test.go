package tqserve_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"

	"github.com/tqgo/tqgo/tqserve/tqpb"
)

// grpcProxy forwards TCP between gRPC clients and one tq server, and
// reads the HTTP/2 frames it forwards, so that it can act on one call of
// a method although gRPC multiplexes every call on one connection. It
// decodes the header blocks clients send (HPACK) to learn each stream's
// method, and follows the server's frames by stream. Once armed for a
// method, it does one of, to the next call of it:
//
//   - proxyDropRequest: close the connection before the call's headers
//     reach the server (the server never sees the call);
//   - proxyDropReply: forward the call, let the server run it, and close
//     the connection when the first frame of its reply reaches the proxy
//     (the server ran the call; the client never learns how it ended);
//   - proxyDelayReply: hold the call's reply, and everything after it on
//     that connection (header blocks must arrive in order), for a while;
//   - proxyResetReply (dropAtRandom's): let the server run the call, and
//     reset its stream toward the client before the reply (the call's
//     reply is lost, the connection's other calls go on).
//
// A call is a unary call (its headers name the method) or a Call on a
// Calls stream (the proxy reads the Call).
//
// cutAll closes every connection, as a server restart does; setTarget
// points new connections at another server. Everything closes, and its
// goroutines end, with the test.
type grpcProxy struct {
	ln net.Listener
	wg sync.WaitGroup

	mu     sync.Mutex // guards the fields below
	target string
	conns  map[*proxyConn]struct{}
	armed  map[string]*proxyFault // by method ("/tqgo.v1.Meta/Commit")
	calls  map[string]int         // calls seen by method
	closed bool
	// drops are methods whose replies are dropped at random, each with
	// its probability, drawn from rng.
	drops map[string]float64
	rng   *rand.Rand
}

type proxyFaultKind int

const (
	proxyDropRequest proxyFaultKind = iota + 1
	proxyDropReply
	proxyDelayReply
	// proxyResetReply: forward the call, let the server run it, and, as
	// the first frame of its reply comes, reset the call's stream toward
	// the client (RST_STREAM) instead of forwarding it, and drop what
	// else comes for that stream: the call's reply is lost, the other
	// calls of the connection go on.
	proxyResetReply
)

// proxyFault is an armed fault; fired is closed once it acted.
type proxyFault struct {
	kind  proxyFaultKind
	delay time.Duration
	fired chan struct{}
	path  string // the call's, for proxyResetReply's count
}

// proxyConn is one client connection and its connection to the server.
type proxyConn struct {
	client, server net.Conn
	once           sync.Once
	closed         chan struct{} // closed with the connection: ends a delay

	mu      sync.Mutex
	pending map[uint32]*proxyFault // reply faults by stream
}

func (c *proxyConn) close() {
	c.once.Do(func() {
		close(c.closed)
		_ = c.client.Close()
		_ = c.server.Close()
	})
}

func startGRPCProxy(t testing.TB, target string) *grpcProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &grpcProxy{ln: ln, target: target, conns: map[*proxyConn]struct{}{},
		armed: map[string]*proxyFault{}, calls: map[string]int{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		p.cutAll()
		p.wg.Wait()
	})
	return p
}

// addr is the proxy's "host:port".
func (p *grpcProxy) addr() string { return p.ln.Addr().String() }

// arm makes the proxy act on the next call of method; the channel is
// closed once it did.
func (p *grpcProxy) arm(method string, kind proxyFaultKind, delay time.Duration) <-chan struct{} {
	f := &proxyFault{kind: kind, delay: delay, fired: make(chan struct{})}
	p.mu.Lock()
	p.armed[method] = f
	p.mu.Unlock()
	return f.fired
}

// dropAtRandom drops the reply of each call of a method of probs made on
// a Calls stream, with its probability (as proxyResetReply does), drawing
// from a source seeded with seed; seen(method+"@dropped") counts the
// replies dropped.
func (p *grpcProxy) dropAtRandom(probs map[string]float64, seed uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drops = probs
	p.rng = rand.New(rand.NewPCG(seed, seed))
}

// disarm forgets the faults not yet fired.
func (p *grpcProxy) disarm() {
	p.mu.Lock()
	clear(p.armed)
	p.mu.Unlock()
}

// seen(pingsFromClients) and seen(pingsFromServer) count the HTTP/2
// PING frames (pings and their acks) the proxy forwarded each way.
const (
	pingsFromClients = "PING frames from clients"
	pingsFromServer  = "PING frames from the server"
)

// seen is how many calls of method went through the proxy (or were
// dropped by it).
func (p *grpcProxy) seen(method string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[method]
}

// cutAll closes every open connection.
func (p *grpcProxy) cutAll() {
	p.mu.Lock()
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	clear(p.conns)
	p.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
}

// setTarget points new connections at target ("" refuses them) and
// closes the open ones.
func (p *grpcProxy) setTarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
	p.cutAll()
}

func (p *grpcProxy) accept() {
	defer p.wg.Done()
	for {
		cc, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target, closed := p.target, p.closed
		p.mu.Unlock()
		if closed || target == "" {
			_ = cc.Close()
			continue
		}
		sc, err := net.DialTimeout("tcp", target, time.Second)
		if err != nil {
			_ = cc.Close()
			continue
		}
		c := &proxyConn{client: cc, server: sc, closed: make(chan struct{}), pending: map[uint32]*proxyFault{}}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.close()
			continue
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.requests(c)
		go p.replies(c)
	}
}

// HTTP/2 frame types and flags the proxy reads.
const (
	h2Data         = 0x0
	h2Headers      = 0x1
	h2RSTStream    = 0x3
	h2Ping         = 0x6
	h2Continuation = 0x9

	h2EndHeaders = 0x4
	h2Padded     = 0x8
	h2Priority   = 0x20
)

const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// frame is one HTTP/2 frame: its 9-byte header and payload.
type frame struct {
	raw    []byte
	typ    byte
	flags  byte
	stream uint32
}

func readFrame(r io.Reader) (frame, error) {
	var h [9]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return frame{}, err
	}
	n := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
	raw := make([]byte, 9+n)
	copy(raw, h[:])
	if _, err := io.ReadFull(r, raw[9:]); err != nil {
		return frame{}, err
	}
	return frame{raw: raw, typ: h[3], flags: h[4], stream: binary.BigEndian.Uint32(h[5:9]) & 0x7fffffff}, nil
}

// fragment is the header block fragment a HEADERS or CONTINUATION frame
// carries.
func (f frame) fragment() []byte {
	b := f.raw[9:]
	if f.typ != h2Headers {
		return b
	}
	pad := 0
	if f.flags&h2Padded != 0 && len(b) > 0 {
		pad = int(b[0])
		b = b[1:]
	}
	if f.flags&h2Priority != 0 && len(b) >= 5 {
		b = b[5:]
	}
	if pad > len(b) {
		return nil
	}
	return b[:len(b)-pad]
}

// requests forwards the client's frames, decoding the header blocks to
// learn each call's method.
func (p *grpcProxy) requests(c *proxyConn) {
	defer p.wg.Done()
	defer c.close()
	pre := make([]byte, len(h2Preface))
	if _, err := io.ReadFull(c.client, pre); err != nil || !bytes.Equal(pre, []byte(h2Preface)) {
		return
	}
	if _, err := c.server.Write(pre); err != nil {
		return
	}
	var path string
	dec := hpack.NewDecoder(4096, func(f hpack.HeaderField) {
		if f.Name == ":path" {
			path = f.Value
		}
	})
	var block []byte // the raw frames of a header block not yet ended
	// Calls streams, and the bytes of a message not yet whole on each.
	calls := map[uint32][]byte{}
	for {
		f, err := readFrame(c.client)
		if err != nil {
			return
		}
		if f.typ == h2Ping {
			p.mu.Lock()
			p.calls[pingsFromClients]++
			p.mu.Unlock()
		}
		if f.typ == h2Data {
			if buf, ok := calls[f.stream]; ok {
				buf = append(buf, f.data()...)
				for len(buf) >= 5 && len(buf) >= 5+int(binary.BigEndian.Uint32(buf[1:5])) {
					n := int(binary.BigEndian.Uint32(buf[1:5]))
					method, req := callOf(buf[5 : 5+n])
					if !p.callDroppable(c, f.stream, "/tqgo.v1.Meta/"+method, droppable(method, req)) {
						return
					}
					buf = buf[5+n:]
				}
				calls[f.stream] = buf
			}
		}
		if f.typ != h2Headers && f.typ != h2Continuation {
			if _, err := c.server.Write(f.raw); err != nil {
				return
			}
			continue
		}
		if f.typ == h2Headers {
			path = ""
		}
		if _, err := dec.Write(f.fragment()); err != nil {
			return
		}
		block = append(block, f.raw...)
		if f.flags&h2EndHeaders == 0 {
			continue
		}
		if err := dec.Close(); err != nil {
			return
		}
		if path == "/tqgo.v1.Meta/Calls" {
			calls[f.stream] = []byte{}
			p.mu.Lock()
			p.calls[path]++ // the streams opened
			p.mu.Unlock()
		} else {
			p.mu.Lock()
			p.calls[path+"@unary"]++ // made as unary calls
			p.mu.Unlock()
			// Not dropped at random: the request is not read.
			if !p.callDroppable(c, f.stream, path, false) {
				return
			}
		}
		if _, err := c.server.Write(block); err != nil {
			return
		}
		block = block[:0]
	}
}

// call counts a call of path (a unary call's headers, or a Call on a
// Calls stream) about to be forwarded on stream, and arms what fault
// waits for it; false: the connection is closed (the call dropped).
func (p *grpcProxy) call(c *proxyConn, stream uint32, path string) bool {
	return p.callDroppable(c, stream, path, true)
}

// callDroppable is call, for a call dropAtRandom may drop if droppable.
func (p *grpcProxy) callDroppable(c *proxyConn, stream uint32, path string, droppable bool) bool {
	p.mu.Lock()
	fault := p.armed[path]
	delete(p.armed, path)
	if path != "" {
		p.calls[path]++
	}
	if prob := p.drops[path]; fault == nil && droppable && prob > 0 && p.rng.Float64() < prob {
		fault = &proxyFault{kind: proxyResetReply, fired: make(chan struct{}), path: path}
	}
	p.mu.Unlock()
	if fault != nil && fault.kind == proxyDropRequest {
		close(fault.fired) // first: the client learns of it from the close
		c.close()
		return false
	}
	if fault != nil {
		c.mu.Lock()
		c.pending[stream] = fault
		c.mu.Unlock()
	}
	return true
}

// data is the payload a DATA frame carries, its padding left out.
func (f frame) data() []byte {
	b := f.raw[9:]
	if f.flags&h2Padded != 0 && len(b) > 0 {
		pad := int(b[0])
		b = b[1:]
		if pad > len(b) {
			return nil
		}
		b = b[:len(b)-pad]
	}
	return b
}

// callOf is the method a serialized Call names and its request.
func callOf(msg []byte) (method string, req []byte) {
	var call tqpb.Call
	if err := proto.Unmarshal(msg, &call); err != nil {
		return "", nil
	}
	return call.GetMethod(), call.GetRequest()
}

// droppable reports whether dropAtRandom may drop the reply of a call,
// so that a model of the contract can be held to a history whatever is
// dropped: not a claim of a rank of a batch, which the client does not
// undo (its outcome is unknown to the caller, as the contract says), nor
// a claim that may drop rows (stale, or picked to drop), whose drops an
// undo leaves standing uncounted by the task's Stats, as documented, nor
// one an ack rides on (its outcome stays unknown after an undo).
func droppable(method string, req []byte) bool {
	if method != "Claim" {
		return true
	}
	var r tqpb.ClaimRequest
	return proto.Unmarshal(req, &r) == nil && r.GetBatch() == nil && !r.GetSelect().GetStaleDrop() && len(r.GetDrop()) == 0 &&
		r.GetSettleFirst() == nil
}

// replies forwards the server's frames, acting on the first frame of a
// reply a fault waits for.
func (p *grpcProxy) replies(c *proxyConn) {
	defer p.wg.Done()
	defer c.close()
	for {
		f, err := readFrame(c.server)
		if err != nil {
			return
		}
		if f.typ == h2Ping {
			p.mu.Lock()
			p.calls[pingsFromServer]++
			p.mu.Unlock()
		}
		if f.stream != 0 && (f.typ == h2Headers || f.typ == h2Data || f.typ == h2RSTStream) {
			c.mu.Lock()
			fault := c.pending[f.stream]
			delete(c.pending, f.stream)
			c.mu.Unlock()
			switch {
			case fault == nil:
			case fault.kind == proxyDropReply:
				close(fault.fired)
				c.close()
				return
			case fault.kind == proxyResetReply:
				close(fault.fired)
				p.mu.Lock()
				p.calls[fault.path+"@dropped"]++
				p.mu.Unlock()
				// The reset goes first; the reply's frames follow, for the
				// client to drop as frames of a stream it closed: it still
				// credits their bytes to the connection's window and reads
				// their headers into the connection's HPACK table.
				var rst [13]byte // RST_STREAM, INTERNAL_ERROR
				rst[2], rst[3] = 4, h2RSTStream
				binary.BigEndian.PutUint32(rst[5:9], f.stream)
				binary.BigEndian.PutUint32(rst[9:13], 0x2)
				if _, err := c.client.Write(rst[:]); err != nil {
					return
				}
			case fault.kind == proxyDelayReply:
				close(fault.fired)
				t := time.NewTimer(fault.delay)
				select {
				case <-t.C:
				case <-c.closed:
					t.Stop()
					return
				}
			}
		}
		if _, err := c.client.Write(f.raw); err != nil {
			return
		}
	}
}
