package redis

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
)

// The engine's own connections: a small pool of plain RESP2 connections to
// a standalone server, for what go-redis does slowly (values into and out
// of caller memory), with the request builder and reply readers they need.
// rawPool returns the Store's pool of plain connections, or nil when
// reads and writes must go through go-redis. Its Meta uses the same pool.
func (s *Store) rawPool() *rawConns {
	s.rawOnce.Do(func() {
		c, ok := s.client.(*goredis.Client)
		if !ok || s.opts.noDirect {
			return
		}
		opt := c.Options()
		if opt.Dialer == nil || opt.OnConnect != nil || opt.StreamingCredentialsProvider != nil {
			return
		}
		// As many connections as the client's pool may hold: many
		// concurrent calls each take one.
		size := max(opt.PoolSize, 2*s.opts.ioDepth)
		s.raw = &rawConns{opt: opt, maxIdle: size, slots: make(chan struct{}, size)}
	})
	return s.raw
}

// rawConns is a small pool of plain RESP2 connections to a standalone
// server, dialled and authenticated as the go-redis client's own.
type rawConns struct {
	opt     *goredis.Options
	maxIdle int
	slots   chan struct{} // one per connection in use: at most the client's pool size

	mu     sync.Mutex // guards idle and closed
	idle   []*rawConn
	closed bool
}

type rawConn struct {
	net.Conn
	br       *bufio.Reader
	cmd      []byte // the request being written, reused
	gotReply bool   // a reply line of the current request was read
}

// staleServer: the error says this server no longer serves writes or
// reads as the master (READONLY after a failover, LOADING, MASTERDOWN).
func staleServer(e serverError) bool {
	s := string(e)
	return strings.HasPrefix(s, "READONLY") || strings.HasPrefix(s, "LOADING") || strings.HasPrefix(s, "MASTERDOWN")
}

// dropIdle closes the idle connections.
func (p *rawConns) dropIdle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.idle {
		c.Close()
	}
	p.idle = nil
}

// close closes the idle connections; connections in use close when they
// come back.
func (p *rawConns) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, c := range p.idle {
		c.Close()
	}
	p.idle = nil
}

// get returns an idle connection (reused true) or, when there is none or
// fresh is set, a new one.
func (p *rawConns) get(ctx context.Context, fresh bool) (_ *rawConn, reused bool, _ error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, false, backends.ErrClosed
	}
	if n := len(p.idle); n > 0 && !fresh {
		c := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return c, true, nil
	}
	p.mu.Unlock()
	c, err := p.dial(ctx)
	return c, false, err
}

// do runs one request on a connection of the pool. A connection that sat
// idle may have been closed by the server (a restart, an idle timeout):
// if the request fails on one with a network error, it runs once more on
// a new connection. Every request the pool sends may run twice: MGET, MSET
// of the same values, and a put's MULTI/EXEC, whose second append finds
// the log moved on by the first and catches up.
func (p *rawConns) do(ctx context.Context, f func(c *rawConn) error) error {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-p.slots }()
	for attempt := 0; ; attempt++ {
		c, reused, err := p.get(ctx, attempt > 0)
		if err != nil {
			return err
		}
		// A cancelled ctx must interrupt a blocked read: the deadline is
		// moved to the past, after the request's own is set.
		c.deadline(ctx, p.opt)
		c.gotReply = false
		stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
		err = f(c)
		if stop() && err == nil {
			p.put(c)
			return nil
		}
		c.Close() // its deadline was moved, or its reply stream is unknown
		var se serverError
		if errors.As(err, &se) && staleServer(se) {
			// A failover demoted the server, or it restarts: the idle
			// connections lead there too.
			p.dropIdle()
		}
		// A request that failed before any reply came may not have reached
		// the server: once more, on a new connection, if this one sat idle.
		if reused && attempt == 0 && !c.gotReply && ctx.Err() == nil && isUnavailable(err) {
			continue
		}
		return err
	}
}

// put returns c to the pool; a connection whose last request failed must
// be closed instead (its reply stream is in an unknown state).
func (p *rawConns) put(c *rawConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.idle) >= p.maxIdle || cap(c.cmd) > maxRequestBuffer {
		c.Close()
		return
	}
	p.idle = append(p.idle, c)
}

func (p *rawConns) dial(ctx context.Context) (*rawConn, error) {
	opt := p.opt
	nc, err := opt.Dialer(ctx, opt.Network, opt.Addr)
	if err != nil {
		return nil, err
	}
	c := &rawConn{Conn: nc, br: bufio.NewReaderSize(nc, 64<<10)}
	user, pass := opt.Username, opt.Password
	switch {
	case opt.CredentialsProviderContext != nil:
		if user, pass, err = opt.CredentialsProviderContext(ctx); err != nil {
			nc.Close()
			return nil, err
		}
	case opt.CredentialsProvider != nil:
		user, pass = opt.CredentialsProvider()
	}
	var setup [][]string
	switch {
	case pass != "" && user != "":
		setup = append(setup, []string{"AUTH", user, pass})
	case pass != "":
		setup = append(setup, []string{"AUTH", pass})
	}
	if opt.DB != 0 {
		setup = append(setup, []string{"SELECT", strconv.Itoa(opt.DB)})
	}
	if len(setup) > 0 {
		c.deadline(ctx, p.opt)
		// Pipelined: write all, then read each status reply.
		req := request(c.cmd[:0])
		for _, args := range setup {
			req = req.cmd(args...)
		}
		if err := c.send(req); err != nil {
			nc.Close()
			return nil, err
		}
		for range setup {
			line, err := c.line()
			if err == nil && (len(line) == 0 || line[0] != '+') {
				err = fmt.Errorf("%w: unexpected reply %q", ErrCorrupt, line)
			}
			if err != nil {
				nc.Close()
				return nil, err
			}
		}
	}
	return c, nil
}

// deadline sets the connection's deadline from ctx, or from the client's
// read timeout when ctx has none.
func (c *rawConn) deadline(ctx context.Context, opt *goredis.Options) {
	var dl time.Time
	if d, ok := ctx.Deadline(); ok && opt.ContextTimeoutEnabled {
		dl = d
	} else if opt.ReadTimeout > 0 {
		dl = time.Now().Add(opt.ReadTimeout + max(opt.WriteTimeout, 0))
	}
	c.SetDeadline(dl)
}

// renewDeadline sets the connection's deadline afresh, for the next round
// of a call. A ctx cancelled before this had moved the deadline to the
// past (rawConns.do): it is checked after the reset, so that cancellation
// still wins.
func (c *rawConn) renewDeadline(ctx context.Context, opt *goredis.Options) error {
	c.deadline(ctx, opt)
	return ctx.Err()
}

// serverError is an error reply; it satisfies go-redis's Error interface,
// so ErrAuth and the rest classify it as they do go-redis's.
type serverError string

func (e serverError) Error() string { return string(e) }
func (serverError) RedisError()     {}

// line reads one reply line without its CRLF. An error reply becomes a
// serverError. The line aliases the reader's buffer.
func (c *rawConn) line() ([]byte, error) {
	l, err := c.br.ReadSlice('\n')
	if len(l) > 0 {
		c.gotReply = true
	}
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("%w: reply line over %d bytes", ErrCorrupt, c.br.Size())
		}
		return nil, err
	}
	if len(l) < 3 || l[len(l)-2] != '\r' {
		return nil, fmt.Errorf("%w: reply line %q", ErrCorrupt, l)
	}
	l = l[:len(l)-2]
	if l[0] == '-' {
		return nil, serverError(l[1:])
	}
	return l, nil
}

// header reads a line that starts with kind and holds a number.
func (c *rawConn) header(kind byte) (int, error) {
	l, err := c.line()
	if err != nil {
		return 0, err
	}
	if l[0] != kind {
		return 0, fmt.Errorf("%w: reply %q, want %q", ErrCorrupt, l, kind)
	}
	n, err := strconv.Atoi(string(l[1:]))
	if err != nil || n < -1 {
		return 0, fmt.Errorf("%w: reply %q", ErrCorrupt, l)
	}
	return n, nil
}

// maxRequestBuffer bounds the request buffer an idle connection keeps: a
// write round copies values under bigBody into it, up to about the write
// round size (1 MiB by default) and its headers; one much larger is let go
// rather than pinned.
const maxRequestBuffer = 8 << 20

// request builds a pipelined RESP2 request.
type request []byte

func (r request) array(n int) request {
	r = append(r, '*')
	r = strconv.AppendInt(r, int64(n), 10)
	return append(r, '\r', '\n')
}

// bulkHeader starts a bulk string of n bytes; the caller appends them and
// CRLF.
func (r request) bulkHeader(n int) request {
	r = append(r, '$')
	r = strconv.AppendInt(r, int64(n), 10)
	return append(r, '\r', '\n')
}

// key appends the bulk string pre+k: the Store's data key of k, built in
// the request rather than as a string of its own.
func (r request) key(pre, k string) request {
	r = append(r.bulkHeader(len(pre)+len(k)), pre...)
	r = append(r, k...)
	return append(r, '\r', '\n')
}

func (r request) str(s string) request {
	r = append(r.bulkHeader(len(s)), s...)
	return append(r, '\r', '\n')
}

func (r request) cmd(args ...string) request {
	r = r.array(len(args))
	for _, a := range args {
		r = r.str(a)
	}
	return r
}

// send writes req on c, reusing c's request buffer afterwards.
func (c *rawConn) send(req request) error {
	c.cmd = req[:0]
	_, err := c.Write(req)
	return err
}

// maxBulk bounds the length of a bulk reply this package reads into
// memory of its own: Redis's proto-max-bulk-len is 512 MB by default, and
// a length past 2 GiB is a corrupt stream, not a reason to allocate it.
const maxBulk = math.MaxInt32

// maxReplyDepth bounds the nesting value reads: the scripts reply at most
// two levels deep.
const maxReplyDepth = 4

// value reads one reply of any type: a string (simple or bulk), an
// int64, nil, a []any of values, or a serverError, as go-redis hands them
// (a serverError inside an array is an element, as in an EXEC reply).
func (c *rawConn) value(depth int) (any, error) {
	l, err := c.line()
	if err != nil {
		return nil, err
	}
	switch l[0] {
	case '+':
		return string(l[1:]), nil
	case ':':
		n, err := strconv.ParseInt(string(l[1:]), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: reply %q", ErrCorrupt, l)
		}
		return n, nil
	case '$':
		n, err := strconv.Atoi(string(l[1:]))
		if err != nil || n < -1 {
			return nil, fmt.Errorf("%w: reply %q", ErrCorrupt, l)
		}
		if n < 0 {
			return nil, nil
		}
		if n > maxBulk {
			return nil, fmt.Errorf("%w: bulk reply of %d bytes", ErrCorrupt, n)
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(c.br, b); err != nil {
			return nil, err
		}
		if b[n] != '\r' || b[n+1] != '\n' {
			return nil, fmt.Errorf("%w: bulk reply not ended by CRLF", ErrCorrupt)
		}
		return unsafe.String(unsafe.SliceData(b), n), nil
	case '*':
		n, err := strconv.Atoi(string(l[1:]))
		if err != nil || n < -1 || depth >= maxReplyDepth {
			return nil, fmt.Errorf("%w: reply %q", ErrCorrupt, l)
		}
		if n < 0 {
			return nil, nil
		}
		out := make([]any, 0, min(n, 1024))
		for range n {
			v, err := c.value(depth + 1)
			var se serverError
			if errors.As(err, &se) {
				v, err = se, nil
			}
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: reply %q", ErrCorrupt, l)
}
