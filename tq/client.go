package tq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tqgo/tqgo/backends"
	_ "github.com/tqgo/tqgo/backends/file" // file://, the durable embedded engine, known as memory:// is
	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/codec"
	"github.com/tqgo/tqgo/internal/replica"
)

// Client is a handle on one queue: a data backend, a metadata store and a
// packer. It is safe for concurrent use; no lock that another call waits on
// is held across backend I/O (a call holds a shared lock only Close waits
// for), and metadata is locked per partition by the store.
type Client struct {
	data      backends.Store
	meta      metadata.MetaStore
	owns      bool // Close closes data and meta (they came from Open)
	ownMeta   bool // Close closes meta: the client made it
	packer    *codec.Packer
	opts      options
	closed    atomic.Bool
	closeOnce sync.Once
	// closing ends when Close begins, so that waiting calls (Task.Wait),
	// which Close would otherwise wait for, return.
	closing    context.Context
	endClosing context.CancelFunc
	// life is held shared by every call in flight and exclusively by Close,
	// so Close waits for them: a put is never cut off between its data and
	// its commit or rollback, which would leave orphaned bytes.
	life sync.RWMutex
	// bg counts what a call left running in the background (handing back
	// a lease its caller never received): Close waits for it.
	bg sync.WaitGroup
	// blocks are the blocks of indexes the client holds for puts of new
	// keys (see blocks.go).
	blocks blockSet
	// backs are the hand-backs in flight: a later call waits for them
	// (see enter).
	backs handBacks

	retry  *retrier
	events eventLog // see Client.event

	// What the engine can do beyond the required interfaces, found once.
	stager    backends.Stager // data encodes straight into the engine's memory
	conns     backends.ConnStater
	colocated metadata.Colocated // cells go with their commit, reads confirm rows
}

// Open opens the queue at url: "memory://" (or "") for the embedded engine,
// "file:///dir" for the embedded engine kept in a directory across
// crashes (see package backends/file), or any scheme an imported engine
// registered ("redis://…" after importing
// github.com/tqgo/tqgo/backends/redis). A malformed URL or engine option,
// or an engine that shares its data but gives no metadata store (see
// backends.Engine), gives an error matching ErrInvalid (and
// backends.ErrInvalid); no error shows the URL's password.
func Open(ctx context.Context, url string, opts ...Option) (*Client, error) {
	if url == "" {
		url = "memory://"
	}
	o := defaultOptions()
	if err := o.apply(opts); err != nil {
		return nil, err
	}
	eng, err := backends.Open(ctx, url)
	if err != nil {
		return nil, &openError{url: redactURL(url), err: err}
	}
	meta, err := metadata.Of(eng)
	if err != nil {
		_ = eng.Close()
		return nil, &openError{url: redactURL(url), err: err}
	}
	return newClient(eng, meta, o, true), nil
}

// New makes a client over an engine the caller built (a caller-owned Redis
// client, a wrapped engine in a test). eng.Meta, if set, must be a
// metadata.MetaStore; a nil eng.Meta with no Log is accepted only from a
// Local engine, which gets an in-process metadata store. Otherwise New
// fails with ErrInvalid. Close does not close the engine.
func New(eng backends.Engine, opts ...Option) (*Client, error) {
	meta, err := metadata.Of(eng)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	o := defaultOptions()
	if err := o.apply(opts); err != nil {
		return nil, err
	}
	return newClient(eng, meta, o, false), nil
}

// newClient makes the client over eng and its MetaStore meta (nil: the
// rules over eng.Log, or an in-process store); owns says Close closes the
// engine.
func newClient(eng backends.Engine, meta metadata.MetaStore, o options, owns bool) *Client {
	c := &Client{data: eng.Data, meta: meta, opts: o, packer: codec.NewPacker(o.pack), owns: owns}
	switch {
	case meta != nil:
	case eng.Log != nil:
		// The rules over the engine's log, in this client: closed with
		// it, and closing the log only if the client owns the engine.
		var ro []replica.Option
		if owns {
			ro = append(ro, replica.OwnsLog())
		}
		c.meta = replica.NewStore(eng.Log, eng.Data, ro...)
		c.ownMeta = true
	default:
		c.meta = memory.NewMetaStore() // a Local engine's: see backends.Engine
		c.ownMeta = true
	}
	c.closing, c.endClosing = context.WithCancel(context.Background())
	c.retry = &retrier{policy: o.retry, log: o.logger, closing: c.closing}
	c.data, c.meta = withRetry(c.data, withPartitions(c.meta), c.retry)
	c.stager, _ = eng.Data.(backends.Stager)
	c.conns, _ = eng.Data.(backends.ConnStater)
	c.colocated, _ = c.meta.(metadata.Colocated)
	return c
}

// Close waits for calls in flight to finish, releases the packing pool and,
// for a client from Open, closes the engine. Later calls return ErrClosed.
// A Close during or after another returns nil once the first has finished,
// so that whichever returns, the resources are released.
func (c *Client) Close() error {
	var err error
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		c.endClosing() // waiting calls return
		c.life.Lock()  // wait for calls in flight; new ones see closed and leave
		defer c.life.Unlock()
		c.releaseBlocks()
		c.bg.Wait() // hand-backs and block releases, bounded: the rows go back at once
		err = c.packer.Close()
		switch {
		case c.owns:
			err = errors.Join(err, c.meta.Close(), c.data.Close())
		case c.ownMeta:
			err = errors.Join(err, c.meta.Close())
		}
	})
	return err
}

// ConnStats reports the engine's connections to its servers (see
// backends.ConnStats), and false for an engine that keeps none (memory).
func (c *Client) ConnStats() (backends.ConnStats, bool) {
	if c.conns == nil {
		return backends.ConnStats{}, false
	}
	return c.conns.ConnStats(), true
}

// PackStats reports which packing path objects took (see codec.Stats).
func (c *Client) PackStats() codec.Stats { return c.packer.Stats() }

// enter admits a public call: it holds c.life shared until the returned
// release is called. Public methods call it once and never call each other
// while holding it (a shared lock taken twice can deadlock behind Close).
// A closed client's error names op and partition (see closedError).
func (c *Client) enter(ctx context.Context, op, partition string) (release func(), err error) {
	c.life.RLock()
	if err := c.check(ctx); err != nil {
		c.life.RUnlock()
		if err == ErrClosed {
			err = &closedError{op: op, partition: partition}
		}
		return nil, err
	}
	if err := c.backs.await(ctx); err != nil {
		c.life.RUnlock()
		return nil, err
	}
	return c.life.RUnlock, nil
}

// handBacks counts the hand-backs in flight (a lease or registered claim
// a Wait's caller never received, going back in the background): the
// client's later calls wait for them, so that what a call does lands
// after the hand-backs of the calls that returned before it (a rank's
// next claim after the cancel of its registered one, say), as it would
// had they been made in the caller's time.
type handBacks struct {
	mu   sync.Mutex
	n    int
	done chan struct{} // closed when n drops to 0
}

func (h *handBacks) begin() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		h.done = make(chan struct{})
	}
	h.n++
}

func (h *handBacks) end() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n--; h.n == 0 {
		close(h.done)
	}
}

// await waits until no hand-back is in flight, or until ctx ends.
func (h *handBacks) await(ctx context.Context) error {
	h.mu.Lock()
	if h.n == 0 {
		h.mu.Unlock()
		return nil
	}
	done := h.done
	h.mu.Unlock()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// closedError is a call made on a closed client: it names the call and
// its partition, and matches ErrClosed.
type closedError struct{ op, partition string }

func (e *closedError) Error() string {
	if e.partition == "" {
		return fmt.Sprintf("tq: %s: client closed (Close was called on it; calls need an open client)", e.op)
	}
	return fmt.Sprintf("tq: %s on partition %q: client closed (Close was called on it; calls need an open client)", e.op, e.partition)
}

func (e *closedError) Is(target error) bool { return target == ErrClosed }

func (c *Client) check(ctx context.Context) error {
	if c.closed.Load() {
		return ErrClosed
	}
	return ctx.Err()
}

// redactURL drops a password from url for error messages. A URL that does
// not parse loses everything between "://" (or its start, with no scheme)
// and its last "@", where a password could be (the parser's idea of where
// it ends is not to be had).
func redactURL(raw string) string {
	if !strings.Contains(raw, "://") {
		// No scheme ("user:pass@host:6379"): whatever comes before the
		// last "@" may be a password.
		if at := strings.LastIndexByte(raw, '@'); at >= 0 {
			return "xxxxx" + raw[at:]
		}
		return raw
	}
	u, err := parseURL(raw)
	if err == nil {
		return u.Redacted()
	}
	start := strings.Index(raw, "://")
	at := strings.LastIndexByte(raw, '@')
	if start < 0 || at < start+3 {
		return raw
	}
	return raw[:start+3] + "xxxxx" + raw[at:]
}

// openError is Open's failure: it names the URL (without its password) and
// matches ErrInvalid as well when the URL or an engine option is malformed.
type openError struct {
	url string
	err error
}

func (e *openError) Error() string { return fmt.Sprintf("tq: open %q: %v", e.url, e.err) }
func (e *openError) Unwrap() error { return e.err }
func (e *openError) Is(target error) bool {
	return target == ErrInvalid && errors.Is(e.err, backends.ErrInvalid)
}
