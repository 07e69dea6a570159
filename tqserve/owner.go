package tqserve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/tqgo/tqgo/backends"
)

// DefaultOwnership is how long a server's ownership of a partition lasts
// unless renewed: after a server dies without handing its partitions
// over, another takes them once this has passed.
const DefaultOwnership = 10 * time.Second

// ownership is which partitions this server serves. On an engine with
// backends.Owners, a partition is served by the server that owns it; a
// server that does not owns it at its first call when it is free, and
// otherwise sends the caller to its owner (movedError). On any other
// engine (one directory, one process's memory) the server serves every
// partition: no other server can open the engine.
type ownership struct {
	owners backends.Owners // nil: every partition is this server's
	self   string          // "ADDR ID"
	addr   string          // ADDR: former lives at it are known dead
	ttl    time.Duration
	log    *slog.Logger
	// inherit settles what a partition's former owner left, once per
	// ownership taken, before the partition's first call is served (nil:
	// nothing to settle).
	inherit func(ctx context.Context, partition string) error

	mu     sync.Mutex
	owned  map[string]owned // by partition
	takes  uint64           // ownerships taken: owned.take
	closed bool
	// abandoned: closed with nothing handed over (abandon).
	abandoned bool

	stop chan struct{}
	done chan struct{}
}

func newOwnership(owners backends.Owners, addr string, ttl time.Duration, log *slog.Logger, inherit func(ctx context.Context, partition string) error) *ownership {
	var id [8]byte
	_, _ = rand.Read(id[:])
	o := &ownership{owners: owners, addr: addr, self: addr + " " + hex.EncodeToString(id[:]), ttl: ttl, log: log, inherit: inherit,
		owned: map[string]owned{}, stop: make(chan struct{}), done: make(chan struct{})}
	if owners == nil {
		close(o.done)
		return o
	}
	go o.renew()
	return o
}

// owned is one partition's ownership: until when (local clock; renewed
// before), and when a call last reached it. One that no call reached for
// a whole ownership is not renewed: it lapses, so that a server does not
// hold every partition it ever served (a job that makes one per step).
// take tells one taking of the partition from another; inherited, that
// what its former owner left is settled (ownership.inherit).
type owned struct {
	until, used time.Time
	take        uint64
	inherited   bool
}

// movedError says another server owns a partition: the caller goes there.
type movedError struct {
	partition, owner string // owner: its address
	left             time.Duration
}

func (e *movedError) Error() string {
	return fmt.Sprintf("partition %q is served by the tq server at %s (for %v unless renewed): call it there", e.partition, e.owner, e.left.Round(time.Millisecond))
}

// errHandingOver: the server is handing its partitions over (stopping).
var errHandingOver = fmt.Errorf("%w: the tq server is stopping: call another", backends.ErrClosed)

// check returns nil when this server serves partition (owning it, taking
// it if free), else a *movedError naming its owner.
func (o *ownership) check(ctx context.Context, partition string) error {
	if o.owners == nil || partition == "" {
		return nil // "" is no partition: the call itself refuses it
	}
	now := time.Now()
	o.mu.Lock()
	closed := o.closed
	own, ok := o.owned[partition]
	if ok {
		own.used = now
		o.owned[partition] = own
	}
	o.mu.Unlock()
	if closed {
		return errHandingOver
	}
	if ok && own.until.After(now) {
		if own.inherited {
			return nil
		}
		return o.settle(ctx, partition)
	}
	if err := o.own(ctx, partition); err != nil {
		return err
	}
	return o.settle(ctx, partition)
}

// serving reports whether this server serves partition now (owns it,
// and is not handing over), taking nothing.
func (o *ownership) serving(partition string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return false
	}
	if o.owners == nil {
		return true
	}
	own, ok := o.owned[partition]
	return ok && own.until.After(time.Now())
}

// settle runs inherit for partition, once per ownership taken: each call
// until one succeeds (concurrent first calls may each run it). An error
// fails the call, which the client makes again.
func (o *ownership) settle(ctx context.Context, partition string) error {
	o.mu.Lock()
	own, ok := o.owned[partition]
	o.mu.Unlock()
	if !ok || own.inherited {
		return nil // lost meanwhile: the log decides what the call does
	}
	if err := o.inherit(ctx, partition); err != nil {
		return fmt.Errorf("taking partition %q over: %w", partition, err)
	}
	o.mu.Lock()
	if cur, ok := o.owned[partition]; ok && cur.take == own.take {
		cur.inherited = true
		o.owned[partition] = cur
	}
	o.mu.Unlock()
	return nil
}

// own asks the engine for partition's ownership.
func (o *ownership) own(ctx context.Context, partition string) error {
	start := time.Now()
	owner, left, err := o.owners.Own(ctx, partition, o.self, o.addr+" ", o.ttl)
	if err != nil {
		return err
	}
	if owner == o.self {
		o.mu.Lock()
		if o.closed {
			// Taken as the server hands its partitions over, after it
			// listed them: hand this one over too, else it stays
			// unserved until the ownership ends.
			handing := !o.abandoned
			o.mu.Unlock()
			if handing {
				dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.ttl/3)
				defer cancel()
				if err := o.owners.Disown(dctx, partition, o.self); err != nil {
					o.log.Warn("tq server: handing partition over failed: it passes to another server when its ownership ends", "partition", partition, "err", err)
				}
			}
			return errHandingOver
		}
		own, had := o.owned[partition]
		if !had {
			o.log.Debug("tq server: serving partition", "partition", partition, "server", o.self)
			own.used = start
			o.takes++
			own.take, own.inherited = o.takes, o.inherit == nil
		}
		// The ownership began no later than the request did.
		own.until = start.Add(left)
		o.owned[partition] = own
		o.mu.Unlock()
		return nil
	}
	o.mu.Lock()
	if _, had := o.owned[partition]; had {
		delete(o.owned, partition)
		o.log.Warn("tq server: partition taken by another server", "partition", partition, "owner", owner)
	}
	o.mu.Unlock()
	addr, _, _ := strings.Cut(owner, " ")
	return &movedError{partition: partition, owner: addr, left: left}
}

// renew renews every owned partition a third of the way through its
// ownership, so that a renewal that fails once is made again in time;
// one that no call reached for a whole ownership is let lapse (not
// disowned: a call that takes it again meanwhile keeps it).
func (o *ownership) renew() {
	defer close(o.done)
	t := time.NewTicker(o.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-o.stop:
			return
		case <-t.C:
		}
		idle := time.Now().Add(-o.ttl)
		o.mu.Lock()
		parts := make([]string, 0, len(o.owned))
		for p, own := range o.owned {
			if own.used.Before(idle) {
				delete(o.owned, p)
				o.log.Debug("tq server: letting an idle partition go", "partition", p, "server", o.self)
				continue
			}
			parts = append(parts, p)
		}
		o.mu.Unlock()
		for _, p := range parts {
			ctx, cancel := context.WithTimeout(context.Background(), o.ttl/3)
			err := o.own(ctx, p)
			cancel()
			var moved *movedError
			if err != nil && !errors.As(err, &moved) && !errors.Is(err, errHandingOver) {
				o.log.Warn("tq server: renewing ownership failed; retrying", "partition", p, "err", err)
			}
		}
	}
}

// handOver stops serving and gives up every owned partition at once, so
// that other servers take them at their next call.
func (o *ownership) handOver(ctx context.Context) {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return
	}
	o.closed = true
	parts := make([]string, 0, len(o.owned))
	for p := range o.owned {
		parts = append(parts, p)
	}
	o.owned = map[string]owned{}
	o.mu.Unlock()
	if o.owners == nil {
		return
	}
	close(o.stop)
	<-o.done
	for _, p := range parts {
		if err := o.owners.Disown(ctx, p, o.self); err != nil {
			o.log.Warn("tq server: handing partition over failed: it passes to another server when its ownership ends", "partition", p, "err", err)
		}
	}
}

// abandon stops renewing without handing over: what a killed server
// leaves (tests).
func (o *ownership) abandon() {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return
	}
	o.closed, o.abandoned = true, true
	o.mu.Unlock()
	if o.owners != nil {
		close(o.stop)
		<-o.done
	}
}
