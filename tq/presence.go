package tq

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Presence: processes of a job say they are alive, so that one waiting on
// another can tell a slow peer from a dead one. A process announces itself
// in a group (its role: "rollout", "reward", ...) under its client's name
// (WithName) and renews that every interval; Members lists a group's
// members with when each was last seen. Presence lives in the queue
// itself, in the partition PresencePartition, a row per member, so every
// engine has it and tq status shows it.
//
// Liveness is judged by the reader's clock against the time each member
// wrote: machines' clocks must agree to well within the interval (NTP
// keeps them within milliseconds). A member not seen for three intervals
// is gone; one that closed its Presence has left.

// PresencePartition is the partition presence rows are kept in.
const PresencePartition = "tq.presence"

// DefaultPresenceEvery is how often Announce renews a member's presence
// unless told.
const DefaultPresenceEvery = 2 * time.Second

// Member is one process's presence in a group.
type Member struct {
	Group string
	Name  string    // the client's name (see WithName)
	Seen  time.Time // when it last renewed its presence, by its clock
	Every time.Duration
	// Alive: seen within three intervals, and not left.
	Alive bool
	// Left: it closed its presence (a clean exit).
	Left bool
}

// State is "alive", "left" (it closed its presence) or "gone" (not seen
// for three intervals).
func (m Member) State() string {
	switch {
	case m.Left:
		return "left"
	case !m.Alive:
		return "gone"
	}
	return "alive"
}

// Presence is a running announcement; Close ends it. It is safe for
// concurrent use.
type Presence struct {
	c     *Client
	key   string
	group string
	every time.Duration
	stop  context.CancelFunc
	done  chan struct{}

	mu  sync.Mutex // guards err
	err error      // the last renewal's failure, nil once one succeeds
}

// Announce says the client is alive as a member of group, now and every
// interval (0: DefaultPresenceEvery) until the Presence is closed or the
// client is. A group is named as a partition is; the member's key is
// "<group>/<client name>". Announcing the same group twice from clients of
// one name makes one member.
func (c *Client) Announce(ctx context.Context, group string, every time.Duration) (*Presence, error) {
	if every == 0 {
		every = DefaultPresenceEvery
	}
	if every < 10*time.Millisecond {
		return nil, fmt.Errorf("%w: presence every %v (at least 10ms)", ErrInvalid, every)
	}
	if err := checkPartition(group); err != nil {
		return nil, err
	}
	p := &Presence{c: c, key: group + "/" + c.opts.name, group: group, every: every, done: make(chan struct{})}
	if err := p.renew(ctx, false); err != nil {
		return nil, err
	}
	var rctx context.Context
	rctx, p.stop = context.WithCancel(context.WithoutCancel(ctx))
	stopOnClose := context.AfterFunc(c.closing, p.stop)
	go func() {
		defer close(p.done)
		defer stopOnClose()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-tick.C:
			}
			err := p.renew(rctx, false)
			p.mu.Lock()
			failed := p.err == nil && err != nil && rctx.Err() == nil
			p.err = err
			p.mu.Unlock()
			if failed {
				c.opts.logger.Warn("tq: presence: renewing failed; other processes may take this one for gone",
					"group", group, "name", c.opts.name, "err", err)
			}
		}
	}()
	return p, nil
}

func (p *Presence) renew(ctx context.Context, left bool) error {
	tag := Tag{"group": p.group, "name": p.c.opts.name, "seen": time.Now().UnixMilli(), "every": p.every.Milliseconds(), "left": left}
	return p.c.BatchPut(ctx, PresencePartition, []string{p.key}, nil, []Tag{tag})
}

// Err is the last renewal's failure, or nil.
func (p *Presence) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Close stops renewing and records that the member left (a clean exit,
// which Members tells from a dead member). It returns the error of that
// record; the member is gone either way once three intervals pass.
func (p *Presence) Close() error {
	p.stop()
	<-p.done
	if p.c.closed.Load() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return p.renew(ctx, true)
}

// Members returns the members of group (every group when "") that
// announced themselves, by group then name. A group not named as a
// partition is (see Announce) fails with ErrInvalid.
func (c *Client) Members(ctx context.Context, group string) (_ []Member, err error) {
	ctx, tr := c.trace(ctx, "Members", PresencePartition, 0)
	defer func() { tr.done(err) }()
	if group != "" {
		if err := checkPartition(group); err != nil {
			return nil, fmt.Errorf("presence group: %w", err)
		}
	}
	release, err := c.enter(ctx, "Members", PresencePartition)
	if err != nil {
		return nil, err
	}
	defer release()
	return c.members(ctx, group)
}

// members is Members for a caller that has entered the client.
func (c *Client) members(ctx context.Context, group string) ([]Member, error) {
	rows, err := c.meta.List(ctx, PresencePartition)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var out []Member
	for _, r := range rows {
		g, _ := r.Tag["group"].(string)
		if group != "" && g != group {
			continue
		}
		name, _ := r.Tag["name"].(string)
		seen, _ := tagNumber(r.Tag["seen"])
		every, _ := tagNumber(r.Tag["every"])
		left, _ := r.Tag["left"].(bool)
		mb := Member{Group: g, Name: name, Seen: time.UnixMilli(int64(seen)), Every: time.Duration(every) * time.Millisecond, Left: left}
		mb.Alive = !left && now.Sub(mb.Seen) < 3*mb.Every
		out = append(out, mb)
	}
	slices.SortFunc(out, func(a, b Member) int {
		if c := strings.Compare(a.Group, b.Group); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, nil
}
