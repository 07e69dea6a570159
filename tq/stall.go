package tq

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tqgo/tqgo/backends/metadata"
)

// ErrStalled is matched by a *StallError: a Wait saw its partition make no
// progress for the task's Stall bound.
var ErrStalled = errors.New("tq: wait stalled")

// DefaultStallWarn is how long a Wait waits without any progress in its
// partition before it logs, at Warn, what it waits for and what the
// partition holds (after up to twice as long: it first looks at the
// partition once the bound has passed), and again each time as long
// passes (see Stall).
const DefaultStallWarn = 5 * time.Minute

// Stall bounds how long a Wait of the task waits while its partition
// makes no progress: no row committed or removed, no field written, no
// row acknowledged, dropped or gone dead, no lease taken, extended or
// ended (a consumer working on its rows extends them: that is progress).
// Once after passes so, the Wait looks at the members of peers (the
// presence groups of the processes that feed it, see Client.Announce):
// when each group has a member alive, the peers are slow, not dead, and
// the Wait logs that and waits on; otherwise (or when no peers are
// named) it returns a *StallError saying what it waited for and what the
// partition held. Without Stall, a Wait only logs, every
// DefaultStallWarn.
func Stall(after time.Duration, peers ...string) TaskOption {
	return func(t *Task) error {
		if after <= 0 {
			return fmt.Errorf("%w: stall bound %v is not positive", ErrInvalid, after)
		}
		for _, g := range peers {
			if err := checkPartition(g); err != nil {
				return err
			}
		}
		t.stall = &stallOpts{after: after, peers: slices.Clone(peers)}
		return nil
	}
}

type stallOpts struct {
	after time.Duration
	peers []string
}

// StallError is a Wait that gave up: its partition made no progress for
// Waited, and the peers it names are not all alive.
type StallError struct {
	Partition, Task string
	Waited          time.Duration
	// Want is the rows the Wait needed ready (its AtLeast).
	Want int
	// Status is the task's status when it gave up, and Missing how many
	// of its rows not yet consumed lack each field the task names.
	Status  TaskStatus
	Missing map[string]int
	// Peers are the members of the groups Stall named.
	Peers []Member
	// Gone names the groups with no member alive.
	Gone []string
}

func (e *StallError) Error() string { return "tq: wait stalled: " + e.describe() }

func (e *StallError) Is(target error) bool { return target == ErrStalled }

// describe says what the Wait waited for and what the partition held.
func (e *StallError) describe() string {
	var b strings.Builder
	st := e.Status
	fmt.Fprintf(&b, "%s/%s: no progress for %v; %d rows ready (wants %d)", e.Partition, e.Task, e.Waited.Round(100*time.Millisecond), st.Ready, e.Want)
	if st.Waiting > 0 {
		var fs []string
		for _, f := range slices.Sorted(maps.Keys(e.Missing)) {
			fs = append(fs, fmt.Sprintf("%s: %d", f, e.Missing[f]))
		}
		fmt.Fprintf(&b, ", %d waiting for fields (rows lacking %s)", st.Waiting, strings.Join(fs, ", "))
	}
	fmt.Fprintf(&b, ", %d leased", st.Leased)
	for i, l := range st.Leases {
		if i == 3 {
			fmt.Fprintf(&b, " ...")
			break
		}
		fmt.Fprintf(&b, " [%d to %q until %s]", l.Rows, l.Holder, l.Until.Format(time.TimeOnly))
	}
	fmt.Fprintf(&b, ", %d acked, %d dead", st.Acked, st.Dead)
	if len(e.Gone) > 0 {
		fmt.Fprintf(&b, "; no member alive in %s", strings.Join(e.Gone, ", "))
	}
	for _, m := range e.Peers {
		fmt.Fprintf(&b, "; %s %q %s (seen %v ago)", m.Group, m.Name, m.State(), time.Since(m.Seen).Round(time.Second))
	}
	return b.String()
}

// stallWatch follows one Wait's progress.
type stallWatch struct {
	t      *Task
	after  time.Duration
	since  time.Time // when progress was last seen
	print  uint64    // the partition's state then
	unseen bool      // since is set, print not yet
}

func (t *Task) newStallWatch() *stallWatch {
	after := DefaultStallWarn
	if t.stall != nil {
		after = t.stall.after
	}
	return &stallWatch{t: t, after: after}
}

// deadline is when the Wait must look again.
func (w *stallWatch) deadline() time.Time {
	if w.since.IsZero() {
		return time.Time{}
	}
	return w.since.Add(w.after)
}

// check is called each time the Wait claimed nothing. It returns a
// *StallError when the Wait must give up.
func (w *stallWatch) check(ctx context.Context, want int) error {
	now := time.Now()
	if !w.since.IsZero() && now.Before(w.since.Add(w.after)) {
		return nil
	}
	t := w.t
	if w.since.IsZero() && t.stall == nil {
		// Only a warning is due: the state is first looked at after the
		// bound, so a Wait that does not wait long costs nothing more.
		w.since, w.unseen = now, true
		return nil
	}
	sum, err := metadata.Summarize(ctx, t.c.meta, t.partition,
		metadata.SummaryRequest{Tasks: []string{t.name}, Fields: t.fields, Counts: true, Progress: true})
	if err != nil {
		w.since, w.unseen = now, true // look again after another bound
		return nil                    // the Wait's own next request says what is wrong
	}
	ts := sum.Tasks[t.name]
	if w.since.IsZero() || w.unseen || ts.Progress != w.print {
		w.since, w.print, w.unseen = now, ts.Progress, false
		return nil
	}
	st := taskStatus(ts)
	missing := ts.Missing
	if missing == nil {
		missing = map[string]int{}
	}
	waited := now.Sub(w.since)
	var peers []Member
	var gone []string
	if t.stall != nil {
		for _, g := range t.stall.peers {
			ms, err := t.c.members(ctx, g)
			if err != nil {
				w.since = now // look again after another bound
				return nil
			}
			alive := false
			for _, m := range ms {
				alive = alive || m.Alive
			}
			if !alive {
				gone = append(gone, g)
			}
			peers = append(peers, ms...)
		}
	}
	e := &StallError{Partition: t.partition, Task: t.name, Waited: waited, Want: want, Status: st, Missing: missing, Peers: peers, Gone: gone}
	if t.stall != nil && (len(gone) > 0 || len(t.stall.peers) == 0) {
		return e
	}
	t.c.opts.logger.Warn("tq: still waiting", "event", "stalled", "partition", t.partition, "task", t.name,
		"waited", waited.Round(time.Second), "status", e.describe())
	w.since = now // warn again after another bound
	return nil
}
