package resp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
)

// Config says what a Pool connects to and how.
type Config struct {
	// Options are the go-redis client's: its Dialer, Network and Addr
	// dial; Username and Password, or its CredentialsProviderContext or
	// CredentialsProvider, give the AUTH sent on each new connection; a
	// DB other than 0 is SELECTed; ReadTimeout plus WriteTimeout bound
	// each round when ctx has no deadline or ContextTimeoutEnabled is
	// off. Dialer must be set (go-redis's NewClient sets it). OnConnect
	// and StreamingCredentialsProvider are not supported: the caller
	// uses go-redis for such clients.
	Options *goredis.Options
	// Size is the most connections open at once, in use and idle
	// together; at least 1.
	Size int
	// Hooks see every dial and request of the pool, as go-redis's hooks
	// see the client's (see Pool.Do). The first is outermost, as with
	// goredis.Client.AddHook.
	Hooks []goredis.Hook
}

// Pool is a bounded pool of plain RESP2 connections. It is safe for
// concurrent use; Close closes it.
type Pool struct {
	opt   *goredis.Options
	size  int
	hooks []goredis.Hook
	dial  goredis.DialHook
	slots chan struct{} // one per call holding a connection

	mu     sync.Mutex // guards the fields below
	idle   []*Conn
	open   int // connections open, idle or in use
	closed bool
}

// NewPool returns a pool that dials as cfg says, lazily.
func NewPool(cfg Config) (*Pool, error) {
	if cfg.Options == nil || cfg.Options.Dialer == nil || cfg.Size < 1 {
		return nil, fmt.Errorf("%w: resp pool of %d connections without a dialer", backends.ErrInvalid, cfg.Size)
	}
	opt := cfg.Options
	dial := goredis.DialHook(opt.Dialer)
	for i := len(cfg.Hooks) - 1; i >= 0; i-- {
		if w := cfg.Hooks[i].DialHook(dial); w != nil {
			dial = w
		}
	}
	return &Pool{opt: opt, size: cfg.Size, hooks: cfg.Hooks, dial: dial, slots: make(chan struct{}, cfg.Size)}, nil
}

// Size returns the most connections the pool opens.
func (p *Pool) Size() int { return p.size }

// Do runs f on a connection of the pool, waiting for one while Size calls
// hold theirs (or until ctx is done). The connection's deadline is set
// from ctx (see Conn.RenewDeadline), and a ctx cancelled while f runs
// moves it to the past, so a blocked read or write returns. A connection
// on which f failed is closed: its reply stream is in an unknown state.
//
// Retry rule: a connection that sat idle may have been closed by the
// server (a restart, an idle timeout). If f fails on one with a network
// error before any reply byte came, and ctx is not done, f runs once more
// on a new connection. So f must send only requests that may run twice.
// When that second run fails too, however (a refused dial, an error
// reply), Do returns an error wrapping the first failure: the first send
// may have run, which the second's failure does not tell.
//
// Stale servers: a ServerError that is Stale (READONLY, LOADING,
// MASTERDOWN) closes the idle connections too, which lead to the same
// server.
//
// Hooks: with Config.Hooks, describe returns the commands the request
// holds, and they run through the hooks' ProcessHook chain (one command)
// or ProcessPipelineHook chain (several, as go-redis runs a pipeline or a
// MULTI/EXEC transaction); the innermost step runs f and sets f's error
// on every command. Hooks see the commands' names, arguments and errors,
// never their replies: a command's value stays unset. What Do returns is
// what the chain returns. Without hooks, describe is not called.
func (p *Pool) Do(ctx context.Context, describe func() []goredis.Cmder, f func(c *Conn) error) error {
	if len(p.hooks) == 0 || describe == nil {
		return p.do(ctx, f)
	}
	cmds := describe()
	run := func(ctx context.Context, cmds []goredis.Cmder) error {
		err := p.do(ctx, f)
		if err != nil {
			for _, c := range cmds {
				c.SetErr(err)
			}
		}
		return err
	}
	if len(cmds) == 1 {
		next := goredis.ProcessHook(func(ctx context.Context, cmd goredis.Cmder) error {
			return run(ctx, []goredis.Cmder{cmd})
		})
		for i := len(p.hooks) - 1; i >= 0; i-- {
			if w := p.hooks[i].ProcessHook(next); w != nil {
				next = w
			}
		}
		return next(ctx, cmds[0])
	}
	next := goredis.ProcessPipelineHook(run)
	for i := len(p.hooks) - 1; i >= 0; i-- {
		if w := p.hooks[i].ProcessPipelineHook(next); w != nil {
			next = w
		}
	}
	return next(ctx, cmds)
}

func (p *Pool) do(ctx context.Context, f func(c *Conn) error) error {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-p.slots }()
	resend, err := p.try(ctx, f, false)
	if resend {
		if _, err2 := p.try(ctx, f, true); err2 != nil {
			// The first send may have run: its failure, not the resend's
			// (a refused dial, an error reply), tells the caller.
			return fmt.Errorf("%w (resent, and the resend failed: %v)", err, err2)
		}
		return nil
	}
	return err
}

// try runs f on a connection, a new one when fresh is set; resend reports
// a failure on a reused connection that Do's retry rule resends.
func (p *Pool) try(ctx context.Context, f func(c *Conn) error, fresh bool) (resend bool, _ error) {
	c, reused, err := p.get(ctx, fresh)
	if err != nil {
		return false, err
	}
	c.deadline(ctx)
	c.gotReply = false
	stop := context.AfterFunc(ctx, func() { c.nc.SetDeadline(time.Unix(1, 0)) })
	err = f(c)
	if stop() && err == nil {
		p.put(c)
		return false, nil
	}
	p.discard(c) // its deadline was moved, or its reply stream is unknown
	var se ServerError
	if errors.As(err, &se) && se.Stale() {
		p.DropIdle()
	}
	return reused && !c.gotReply && ctx.Err() == nil && retryable(err), err
}

// retryable: err is a network failure that may have come before the
// request reached the server (not a timeout, which may have come after).
func retryable(err error) bool { return !IsTimeout(err) && IsConnLost(err) }

// IsTimeout reports a network timeout.
func IsTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// IsConnLost reports a connection that failed or closed: a network
// error, or the stream ended or reset.
func IsConnLost(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// get returns an idle connection (reused true) or, when there is none or
// fresh is set, a new one. The caller holds a slot.
func (p *Pool) get(ctx context.Context, fresh bool) (_ *Conn, reused bool, _ error) {
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
	if p.open >= p.size && len(p.idle) > 0 {
		// Room for the new connection: only idle ones can hold it.
		old := p.idle[0]
		p.idle = p.idle[1:]
		p.open--
		old.nc.Close()
	}
	p.open++ // counted while it dials
	p.mu.Unlock()
	c, err := p.newConn(ctx)
	if err != nil {
		p.mu.Lock()
		p.open--
		p.mu.Unlock()
	}
	return c, false, err
}

// put returns c to the idle list, or closes it.
func (p *Pool) put(c *Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || cap(c.cmd) > MaxRequestBuffer {
		p.open--
		c.nc.Close()
		return
	}
	p.idle = append(p.idle, c)
}

// discard closes c, a connection in use.
func (p *Pool) discard(c *Conn) {
	p.mu.Lock()
	p.open--
	p.mu.Unlock()
	c.nc.Close()
}

// DropIdle closes the idle connections.
func (p *Pool) DropIdle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.idle {
		c.nc.Close()
	}
	p.open -= len(p.idle)
	p.idle = nil
}

// Close closes the idle connections; those in use close when their call
// ends. Later calls of Do return backends.ErrClosed.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.DropIdle()
}

func (p *Pool) newConn(ctx context.Context) (*Conn, error) {
	opt := p.opt
	nc, err := p.dial(ctx, opt.Network, opt.Addr)
	if err != nil {
		return nil, err
	}
	c := &Conn{nc: nc, br: bufio.NewReaderSize(nc, readBuffer), opt: opt}
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
		c.deadline(ctx)
		// Pipelined: write all, then read each status reply.
		req := c.Request()
		for _, args := range setup {
			req = req.Cmd(args...)
		}
		if err := c.Send(req); err != nil {
			nc.Close()
			return nil, err
		}
		for range setup {
			line, err := c.Line()
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

// Counts returns the connections open and, of them, idle.
func (p *Pool) Counts() (open, idle int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open, len(p.idle)
}
