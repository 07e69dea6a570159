package redis_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends/redis"
)

// requestProxy forwards TCP between clients and redis-servers (one
// listener per server) and reads the RESP it forwards, so that it can act
// on one request: the nth of those whose command counts (see
// countedCommand), across every connection and server it serves. A
// MULTI ... EXEC is one request. Once armed, it does one of:
//
//   - faultDrop: close the connection before the request reaches the
//     server;
//   - faultLoseReply: forward the request, let the server run it, swallow
//     its reply and close the connection;
//   - faultKill: as faultLoseReply, but once the reply has reached the
//     proxy (so the server ran the request, and with appendfsync always
//     wrote it to its AOF) kill the server, then close the connection.
//
// While a server is down, a connection to its listener is closed at once,
// unless the proxy is held (see hold): then it waits (up to upWait) until
// released, and for the server to accept, before it dials, as a client's
// dial would wait on a server that restarts quickly.
type requestProxy struct {
	targets []*proxyTarget

	mu       sync.Mutex
	seen     []string            // the counted requests since reset, labelled
	armed    map[int]*armedFault // by the (1-based) request it acts on
	onKill   func(target string)
	onLost   func()        // runs when a faultLoseReply swallowed its reply
	held     chan struct{} // closed on release; nil: not held
	closed   bool
	conns    []net.Conn
	requests int // counted requests since reset
}

type faultKind int

const (
	faultDrop faultKind = iota + 1
	faultLoseReply
	faultKill
)

func (k faultKind) String() string {
	return [...]string{"none", "drop", "lose-reply", "kill"}[k]
}

// upWait bounds how long a connection waits for its server to come back.
const upWait = 5 * time.Second

// proxyTarget is one server behind the proxy and the listener in front of
// it.
type proxyTarget struct {
	addr string // the server's
	ln   net.Listener
}

// countedCommand reports whether requests of command name are counted:
// those that change state or run a script.
func countedCommand(name string) bool {
	switch name {
	case "EVALSHA", "EVAL", "MSET", "SET", "MULTI", "UNLINK", "DEL":
		return true
	}
	return false
}

// startRequestProxy starts a proxy with a listener in front of each of
// addrs; everything closes with the test.
func startRequestProxy(t *testing.T, addrs ...string) *requestProxy {
	t.Helper()
	p := &requestProxy{}
	for _, a := range addrs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		tg := &proxyTarget{addr: a, ln: ln}
		p.targets = append(p.targets, tg)
		go p.accept(tg)
	}
	t.Cleanup(p.close)
	return p
}

func (p *requestProxy) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, tg := range p.targets {
		tg.ln.Close()
	}
	for _, c := range p.conns {
		c.Close()
	}
}

// frontOf is the proxy's address in front of server addr, or addr when
// the proxy has no listener for it.
func (p *requestProxy) frontOf(addr string) string {
	for _, tg := range p.targets {
		if tg.addr == addr {
			return tg.ln.Addr().String()
		}
	}
	return addr
}

// url is a redis URL through the proxy in front of the first server.
func (p *requestProxy) url(query string) string {
	return "redis://" + p.targets[0].ln.Addr().String() + "/0?" + query
}

// reset forgets the requests seen and disarms the proxy.
func (p *requestProxy) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen, p.requests, p.armed, p.onKill = nil, 0, nil, nil
}

// plannedFault is a fault at the nth counted request (1-based).
type plannedFault struct {
	nth  int
	kind faultKind
}

// armedFault is a planned fault; fired is closed once it acted.
type armedFault struct {
	kind  faultKind
	fired chan struct{}
}

// arm makes the proxy act on the counted requests faults name, counted
// from now on; onKill, for faultKill, kills the server named. The
// channels returned, one per fault, are closed once it acted.
func (p *requestProxy) arm(onKill func(target string), faults ...plannedFault) []<-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen, p.requests, p.onKill = nil, 0, onKill
	p.armed = map[int]*armedFault{}
	out := make([]<-chan struct{}, len(faults))
	for i, f := range faults {
		a := &armedFault{kind: f.kind, fired: make(chan struct{})}
		p.armed[f.nth] = a
		out[i] = a.fired
	}
	return out
}

// setOnLostReply makes f run each time a faultLoseReply has swallowed
// its reply, before the connection closes: what f does happens between
// the request and the client's learning that its reply was lost.
func (p *requestProxy) setOnLostReply(f func()) {
	p.mu.Lock()
	p.onLost = f
	p.mu.Unlock()
}

// hold makes new connections wait, until release is called, before they
// dial their server (and then wait for it to accept).
func (p *requestProxy) hold() (release func()) {
	ch := make(chan struct{})
	p.mu.Lock()
	p.held = ch
	p.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			if p.held == ch {
				p.held = nil
			}
			p.mu.Unlock()
			close(ch)
		})
	}
}

// requestsSeen returns the counted requests since the last reset or arm.
func (p *requestProxy) requestsSeen() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.seen...)
}

func (p *requestProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns = append(p.conns, c)
	return true
}

func (p *requestProxy) accept(tg *proxyTarget) {
	for {
		client, err := tg.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(client) {
			return
		}
		go p.serve(tg, client)
	}
}

// dial connects to tg's server; while the proxy is held, it first waits
// for the release, and then for the server to accept.
func (p *requestProxy) dial(tg *proxyTarget) (net.Conn, error) {
	deadline := time.Now().Add(upWait)
	p.mu.Lock()
	held := p.held
	p.mu.Unlock()
	if held != nil {
		select {
		case <-held:
		case <-time.After(upWait):
		}
	}
	for {
		server, err := net.Dial("tcp", tg.addr)
		if err == nil {
			return server, nil
		}
		p.mu.Lock()
		closed := p.closed
		p.mu.Unlock()
		if held == nil || closed || time.Now().After(deadline) {
			return nil, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// proxyConn is one client connection and its connection to the server.
type proxyConn struct {
	p              *requestProxy
	tg             *proxyTarget
	client, server net.Conn

	mu          sync.Mutex
	sent        int       // commands forwarded
	got         int       // replies received
	swallowFrom int       // the first reply not to forward (0: none)
	actAt       int       // the reply on which the fault acts
	kind        faultKind // the fault acting on this connection
	fired       chan struct{}
	onKill      func(string)
	closeOnce   sync.Once
}

func (c *proxyConn) closeBoth() {
	c.closeOnce.Do(func() {
		c.client.Close()
		c.server.Close()
	})
}

func (p *requestProxy) serve(tg *proxyTarget, client net.Conn) {
	server, err := p.dial(tg)
	if err != nil {
		client.Close()
		return
	}
	if !p.track(server) {
		client.Close()
		return
	}
	c := &proxyConn{p: p, tg: tg, client: client, server: server}
	go c.replies()
	c.requests()
}

// requests forwards the client's requests, acting on the armed one.
func (c *proxyConn) requests() {
	defer func() {
		if c.kind == 0 {
			c.closeBoth()
		}
	}()
	r := bufio.NewReaderSize(c.client, 64<<10)
	for {
		raw, names, label, err := readRequest(r)
		if err != nil {
			return
		}
		// A compaction runs in the background, after the call that
		// grew or emptied the log: none of the call's requests.
		if countedCommand(names[0]) && label != "EVALSHA compact" {
			p := c.p
			p.mu.Lock()
			p.requests++
			p.seen = append(p.seen, label)
			a, act := p.armed[p.requests]
			var kind faultKind
			var fired chan struct{}
			var onKill func(string)
			if act {
				kind, fired, onKill = a.kind, a.fired, p.onKill
				delete(p.armed, p.requests)
			}
			p.mu.Unlock()
			if act {
				if kind == faultDrop {
					c.closeBoth()
					close(fired)
					return
				}
				c.mu.Lock()
				c.kind, c.fired, c.onKill = kind, fired, onKill
				c.swallowFrom = c.sent + 1
				c.actAt = c.sent + len(names)
				c.sent += len(names)
				c.mu.Unlock()
				if _, err := c.server.Write(raw); err != nil {
					c.closeBoth()
					close(fired)
					return
				}
				// Nothing more goes to the server: replies() acts on the
				// request's reply and closes both sides.
				return
			}
		}
		c.mu.Lock()
		c.sent += len(names)
		c.mu.Unlock()
		if _, err := c.server.Write(raw); err != nil {
			return
		}
	}
}

// replies forwards the server's replies, swallowing those of the armed
// request and acting once its last one arrived.
func (c *proxyConn) replies() {
	r := bufio.NewReaderSize(c.server, 64<<10)
	var buf bytes.Buffer
	for {
		buf.Reset()
		push, err := readReply(r, &buf)
		if err != nil {
			c.mu.Lock()
			fired := c.fired
			c.fired = nil
			c.mu.Unlock()
			c.closeBoth()
			if fired != nil {
				close(fired) // the server went away before it replied
			}
			return
		}
		if !push {
			c.mu.Lock()
			c.got++
			swallow := c.swallowFrom > 0 && c.got >= c.swallowFrom
			act := swallow && c.got == c.actAt
			kind, fired, onKill := c.kind, c.fired, c.onKill
			if act {
				c.fired = nil
			}
			c.mu.Unlock()
			if act {
				switch kind {
				case faultKill:
					onKill(c.tg.addr)
				case faultLoseReply:
					c.p.mu.Lock()
					onLost := c.p.onLost
					c.p.mu.Unlock()
					if onLost != nil {
						onLost()
					}
				}
				c.closeBoth()
				close(fired)
				return
			}
			if swallow {
				continue
			}
		}
		if _, err := c.client.Write(buf.Bytes()); err != nil {
			c.closeBoth()
			return
		}
	}
}

// readRequest reads one client request: a command (an array of bulk
// strings), or MULTI and every command up to its EXEC. It returns the
// request's bytes, the names of its commands, and a label: the first
// command's name, for EVALSHA with the script's name.
func readRequest(r *bufio.Reader) (raw []byte, names []string, label string, _ error) {
	var buf bytes.Buffer
	for {
		args, err := readCommand(r, &buf)
		if err != nil {
			return nil, nil, "", err
		}
		name := strings.ToUpper(args[0])
		names = append(names, name)
		if len(names) == 1 {
			label = name
			if name == "EVALSHA" && len(args) > 1 {
				if s := redis.ScriptName(args[1]); s != "" {
					label += " " + s
				}
			}
			if name != "MULTI" {
				return buf.Bytes(), names, label, nil
			}
		}
		if name == "EXEC" || name == "DISCARD" {
			return buf.Bytes(), names, label, nil
		}
	}
}

// readCommand reads one command into buf and returns its first two
// arguments.
func readCommand(r *bufio.Reader, buf *bytes.Buffer) ([]string, error) {
	line, err := readLine(r, buf)
	if err != nil {
		return nil, err
	}
	if line[0] != '*' {
		return nil, fmt.Errorf("request proxy: inline command %q", line)
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil || n < 1 {
		return nil, fmt.Errorf("request proxy: array header %q", line)
	}
	var args []string
	for i := range n {
		h, err := readLine(r, buf)
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(h[1:])
		if h[0] != '$' || err != nil || size < 0 {
			return nil, fmt.Errorf("request proxy: bulk header %q", h)
		}
		start := buf.Len()
		if _, err := io.CopyN(buf, r, int64(size)+2); err != nil {
			return nil, err
		}
		if i < 2 {
			args = append(args, string(buf.Bytes()[start:start+size]))
		}
	}
	return args, nil
}

// readLine reads a line into buf and returns it without its CRLF.
func readLine(r *bufio.Reader, buf *bytes.Buffer) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	buf.WriteString(line)
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("request proxy: empty line")
	}
	return line, nil
}

// readReply reads one RESP2 or RESP3 reply into buf; push says it was an
// out-of-band push, not the reply to a request.
func readReply(r *bufio.Reader, buf *bytes.Buffer) (push bool, _ error) {
	line, err := readLine(r, buf)
	if err != nil {
		return false, err
	}
	switch line[0] {
	case '+', '-', ':', '_', ',', '#', '(':
		return false, nil
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil {
		return false, fmt.Errorf("request proxy: reply header %q", line)
	}
	switch line[0] {
	case '$', '!', '=':
		if n >= 0 {
			_, err = io.CopyN(buf, r, int64(n)+2)
		}
		return false, err
	case '*', '~', '>':
	case '%':
		n *= 2
	case '|': // attributes, then the reply they describe
		for range 2 * n {
			if _, err := readReply(r, buf); err != nil {
				return false, err
			}
		}
		return readReply(r, buf)
	default:
		return false, fmt.Errorf("request proxy: reply type %q", line)
	}
	for range max(n, 0) {
		if _, err := readReply(r, buf); err != nil {
			return false, err
		}
	}
	return line[0] == '>', nil
}
