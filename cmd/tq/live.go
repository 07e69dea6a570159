package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/tqgo/tqgo/tq"
)

// The live commands: leases (who holds what, until when, as redis-cli's
// XPENDING lists a group's pending entries) and top (a partition's
// consumption refreshed in place, with rates); and rows -task (a task's
// state of each row).

// keyStateJSON is a row's state for one task.
type keyStateJSON struct {
	Task       string     `json:"task"`
	State      string     `json:"state"` // ready, waiting, leased, acked, dead, dropped
	Deliveries int        `json:"deliveries"`
	Holder     string     `json:"holder,omitempty"`
	Until      *time.Time `json:"until,omitempty"`   // leased: its lease's end; ready after a delayed nack: when claimable
	Granted    *time.Time `json:"granted,omitempty"` // leased: when its claim leased it
	Reason     string     `json:"reason,omitempty"`  // its last error (a nack's reason, or "lease ended")
	At         *time.Time `json:"at,omitempty"`      // when
}

func keyStateOf(task string, ks tq.KeyState) *keyStateJSON {
	j := &keyStateJSON{Task: task, State: string(ks.State), Deliveries: ks.Deliveries, Holder: ks.Holder, Reason: ks.Reason}
	if !ks.Until.IsZero() {
		u := ks.Until
		j.Until = &u
	}
	if !ks.At.IsZero() {
		a := ks.At
		j.At = &a
	}
	if !ks.Granted.IsZero() {
		g := ks.Granted
		j.Granted = &g
	}
	return j
}

// taskConsumption is task's state of each row of partition, by key: by
// its fields exactly when fields are given (a row lacking one is
// waiting), else as Client.Consumption tells it (every row in no other
// state ready). A task with no state in the partition is an error naming
// the tasks there are, unless fields are given (it need not have consumed
// yet).
func (s *session) taskConsumption(ctx context.Context, c *tq.Client, partition, task string, fields []string) (map[string]tq.KeyState, error) {
	var kcs []tq.KeyConsumption
	if len(fields) > 0 {
		t, err := c.Task(partition, task, fields)
		if err != nil {
			return nil, err
		}
		if kcs, err = t.Consumption(ctx); err != nil {
			return nil, err
		}
	} else {
		st, err := c.Status(ctx, partition)
		if err != nil {
			return nil, err
		}
		if err := checkTask(st, task); err != nil {
			return nil, err
		}
		if kcs, err = c.Consumption(ctx, partition); err != nil {
			return nil, err
		}
	}
	out := make(map[string]tq.KeyState, len(kcs))
	for _, kc := range kcs {
		if ks, ok := kc.Tasks[task]; ok {
			out[kc.Key] = ks
		}
	}
	return out, nil
}

// leaseRowsJSON is one running lease of a task, with its rows.
type leaseRowsJSON struct {
	ID         string    `json:"id"` // tq.LeaseStatus.ID
	Holder     string    `json:"holder"`
	Rows       int       `json:"rows"`
	Keys       []string  `json:"keys"`       // by index
	Deliveries int       `json:"deliveries"` // the most among its rows
	Until      time.Time `json:"until"`      // its first rows' end
	Granted    time.Time `json:"granted"`    // when its claim leased its rows (zero: unknown)
}

// shownKeys is how many of a lease's keys the leases table shows.
const shownKeys = 4

func defineLeases(fs *flag.FlagSet) action {
	return func(ctx context.Context, s *session, args []string) error {
		return runLeases(ctx, s, args[0], args[1])
	}
}

func runLeases(ctx context.Context, s *session, partition, task string) error {
	c, err := s.openPartition(ctx, partition)
	if err != nil {
		return err
	}
	byKey, err := s.taskConsumption(ctx, c, partition, task, nil)
	if err != nil {
		return err
	}
	m, err := c.List(ctx, partition) // the keys by index
	if err != nil {
		return err
	}
	leases := map[string]*leaseRowsJSON{}
	for _, r := range m.Rows {
		ks, ok := byKey[r.Key]
		if !ok || ks.State != tq.StateLeased {
			continue
		}
		l := leases[ks.Lease]
		if l == nil {
			l = &leaseRowsJSON{ID: ks.Lease, Holder: ks.Holder, Until: ks.Until, Granted: ks.Granted}
			leases[ks.Lease] = l
		}
		l.Rows++
		l.Keys = append(l.Keys, r.Key)
		l.Deliveries = max(l.Deliveries, ks.Deliveries)
		if ks.Until.Before(l.Until) {
			l.Until = ks.Until
		}
		if ks.Granted.Before(l.Granted) {
			l.Granted = ks.Granted
		}
	}
	list := make([]leaseRowsJSON, 0, len(leases))
	for _, l := range leases {
		list = append(list, *l)
	}
	slices.SortFunc(list, func(a, b leaseRowsJSON) int {
		if c := a.Until.Compare(b.Until); c != 0 {
			return c
		}
		if c := strings.Compare(a.Holder, b.Holder); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	if s.json {
		return s.emitJSON(struct {
			Partition string          `json:"partition"`
			Task      string          `json:"task"`
			Leases    []leaseRowsJSON `json:"leases"`
		}{partition, task, list})
	}
	if len(list) == 0 {
		fmt.Fprintf(s.stdout, "task %s holds no lease in partition %s\n", task, strconvQuote(partition))
		return nil
	}
	now := time.Now()
	tw := s.table()
	fmt.Fprintln(tw, "HOLDER\tROWS\tKEYS\tDELIVERIES\tHELD\tUNTIL\tLEFT")
	for _, l := range list {
		held := "-" // a lease of a log written before grant times
		if !l.Granted.IsZero() {
			held = max(now.Sub(l.Granted), 0).Round(100 * time.Millisecond).String() // 0 for a server's clock ahead
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\t%v\n", holderText(l.Holder), l.Rows, keysText(l.Keys), l.Deliveries, held,
			l.Until.UTC().Format(time.RFC3339), l.Until.Sub(now).Round(100*time.Millisecond))
	}
	return tw.Flush()
}

// stateText is a row's state as rows -task shows it: a lease's holder
// and time left, a delayed ready row's wait.
func stateText(ks tq.KeyState) string {
	left := time.Until(ks.Until).Round(100 * time.Millisecond)
	switch {
	case ks.State == tq.StateLeased:
		return fmt.Sprintf("leased(%s,%v)", holderText(ks.Holder), left)
	case ks.State == tq.StateReady && left > 0:
		return fmt.Sprintf("ready(in %v)", left)
	}
	return string(ks.State)
}

// holderText is a holder as a table shows it: "-" for none.
func holderText(h string) string {
	if h == "" {
		return "-"
	}
	return h
}

// keysText is the first shownKeys of keys, quoted, and how many more.
func keysText(keys []string) string {
	n := min(len(keys), shownKeys)
	parts := make([]string, n)
	for i, k := range keys[:n] {
		parts[i] = strconvQuote(k)
	}
	out := strings.Join(parts, " ")
	if len(keys) > n {
		out += fmt.Sprintf(" +%d", len(keys)-n)
	}
	return out
}

// topTaskJSON is one task of a partition in a frame of top.
type topTaskJSON struct {
	Task    string `json:"task"`
	Ready   int    `json:"ready"` // every row in no other state (as status's READY*)
	Leased  int    `json:"leased"`
	Acked   int    `json:"acked"`
	Dead    int    `json:"dead"`
	Dropped int    `json:"dropped"`
	// ClaimsPerSec is deliveries per second since the previous frame
	// (from the rows' delivery counts; rows removed between frames are
	// not counted), AcksPerSec rows acked or dropped per second (from
	// TaskStatus.Consumed); absent in the first frame.
	ClaimsPerSec *float64 `json:"claims_per_sec,omitempty"`
	AcksPerSec   *float64 `json:"acks_per_sec,omitempty"`
	// OldestReady is when the oldest ready row became ready (absent: none,
	// or the engine does not tell): the task's lag.
	OldestReady *time.Time `json:"oldest_ready,omitempty"`
	// NextLeaseEnd is the earliest end of a running lease, OldestLease
	// when the oldest running lease was granted (absent: none, or a lease
	// whose grant time the engine does not know).
	NextLeaseEnd *time.Time     `json:"next_lease_end,omitempty"`
	OldestLease  *time.Time     `json:"oldest_lease,omitempty"`
	Consumers    []consumerJSON `json:"consumers,omitempty"`
}

// consumerJSON is a holder's leases of a task.
type consumerJSON struct {
	Holder string    `json:"holder"`
	Leases int       `json:"leases"`
	Rows   int       `json:"rows"`
	Until  time.Time `json:"until"` // the earliest end of its leases
}

type topPartitionJSON struct {
	Partition string        `json:"partition"`
	Rows      int           `json:"rows"`
	Tasks     []topTaskJSON `json:"tasks"`
}

type topFrameJSON struct {
	Time       time.Time          `json:"time"`
	Partitions []topPartitionJSON `json:"partitions"`
}

// topSample is what top remembers of a frame to take rates on.
type topSample struct {
	at         time.Time
	consumed   map[string]uint64            // partition/task → TaskStatus.Consumed
	deliveries map[string]map[string]uint64 // partition/task → key → deliveries
}

func defineTop(fs *flag.FlagSet) action {
	n := fs.Int("n", 0, "print this many frames, plainly, and exit (0: until interrupted)")
	once := fs.Bool("once", false, "print one frame and exit (-n 1)")
	interval := fs.Duration("interval", 2*time.Second, "time between frames")
	return func(ctx context.Context, s *session, args []string) error {
		if *n < 0 {
			return usagef("-n %d is negative", *n)
		}
		if *interval <= 0 {
			return usagef("-interval %v is not positive", *interval)
		}
		frames := *n
		if *once {
			frames = 1
		}
		return runTop(ctx, s, args, frames, *interval)
	}
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// runTop prints frames of partitions' consumption (every partition's when
// none is named) every interval: frames of them (0: until ctx ends, which
// ends top without an error), each in place on a terminal. s.timeout
// bounds each frame, not the whole run.
func runTop(ctx context.Context, s *session, partitions []string, frames int, interval time.Duration) error {
	live := frames == 0 && isTerminal(s.stdout) && !s.json
	var prev *topSample
	for i := 0; frames == 0 || i < frames; i++ {
		if i > 0 {
			t := time.NewTimer(interval)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
		}
		frame, sample, err := s.topFrame(ctx, partitions, prev, i == 0)
		if err != nil {
			if i > 0 && ctx.Err() != nil {
				return nil // interrupted: the frames so far are the output
			}
			return err
		}
		prev = sample
		if s.json {
			if err := s.emitJSON(frame); err != nil {
				return err
			}
			continue
		}
		if live {
			fmt.Fprint(s.stdout, "\x1b[H\x1b[2J") // home, clear
		} else if i > 0 {
			fmt.Fprintln(s.stdout)
		}
		if err := s.printTop(frame, interval); err != nil {
			return err
		}
	}
	return nil
}

// topFrame reads one frame, within s.timeout, and rates since prev (nil:
// none). The first frame checks that each named partition exists; with
// none named, a partition cleared between the listing and its read is
// left out.
func (s *session) topFrame(ctx context.Context, partitions []string, prev *topSample, first bool) (*topFrameJSON, *topSample, error) {
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	frame, sample, err := s.readFrame(ctx, partitions, prev, first)
	if err != nil && s.timeout > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("frame timed out after %v (-timeout): %w", s.timeout, err)
	}
	return frame, sample, err
}

func (s *session) readFrame(ctx context.Context, partitions []string, prev *topSample, first bool) (*topFrameJSON, *topSample, error) {
	c, err := s.open(ctx)
	if err != nil {
		return nil, nil, err
	}
	named := len(partitions) > 0
	if !named {
		if partitions, err = c.Partitions(ctx); err != nil {
			return nil, nil, err
		}
	}
	now := time.Now()
	frame := &topFrameJSON{Time: now}
	sample := &topSample{at: now, consumed: map[string]uint64{}, deliveries: map[string]map[string]uint64{}}
	for _, p := range partitions {
		st, err := c.Status(ctx, p)
		if err != nil {
			return nil, nil, err
		}
		if !named && !hasPartition(st) {
			continue // listed, then cleared before its Status: no longer there
		}
		if first && !hasPartition(st) {
			return nil, nil, noPartition(ctx, c, p)
		}
		kcs, err := c.Consumption(ctx, p)
		if err != nil {
			return nil, nil, err
		}
		for _, kc := range kcs {
			for task, ks := range kc.Tasks {
				id := p + "\x00" + task
				if sample.deliveries[id] == nil {
					sample.deliveries[id] = map[string]uint64{}
				}
				sample.deliveries[id][kc.Key] = uint64(ks.Deliveries)
			}
		}
		pj := topPartitionJSON{Partition: p, Rows: st.Rows}
		for _, name := range sortedKeys(st.Tasks) {
			ts := st.Tasks[name]
			id := p + "\x00" + name
			sample.consumed[id] = ts.Consumed
			tj := topTaskJSON{Task: name, Ready: ts.Ready, Leased: ts.Leased, Acked: ts.Acked, Dead: ts.Dead, Dropped: ts.Dropped}
			if !ts.OldestReady.IsZero() {
				o := ts.OldestReady
				tj.OldestReady = &o
			}
			if len(ts.Leases) > 0 {
				u := ts.Leases[0].Until // earliest end first
				tj.NextLeaseEnd = &u
			}
			for _, l := range ts.Leases {
				if !l.Granted.IsZero() && (tj.OldestLease == nil || l.Granted.Before(*tj.OldestLease)) {
					g := l.Granted
					tj.OldestLease = &g
				}
			}
			tj.Consumers = consumersOf(ts.Leases)
			if prev != nil {
				secs := now.Sub(prev.at).Seconds()
				if secs > 0 {
					acks := float64(ts.Consumed-min(ts.Consumed, prev.consumed[id])) / secs
					claims := float64(deliveredSince(prev.deliveries[id], sample.deliveries[id])) / secs
					tj.AcksPerSec, tj.ClaimsPerSec = &acks, &claims
				}
			}
			pj.Tasks = append(pj.Tasks, tj)
		}
		frame.Partitions = append(frame.Partitions, pj)
	}
	return frame, sample, nil
}

// deliveredSince is how many deliveries were made between the counts
// before and now, per key: a count that went down was reset (a retry, a
// reset) and delivered now times since.
func deliveredSince(before, now map[string]uint64) uint64 {
	var n uint64
	for k, d := range now {
		if b := before[k]; d >= b {
			n += d - b
		} else {
			n += d
		}
	}
	return n
}

// consumersOf groups leases by holder, earliest end first.
func consumersOf(leases []tq.LeaseStatus) []consumerJSON {
	var out []consumerJSON
	at := map[string]int{}
	for _, l := range leases { // earliest end first
		i, ok := at[l.Holder]
		if !ok {
			i = len(out)
			at[l.Holder] = i
			out = append(out, consumerJSON{Holder: l.Holder, Until: l.Until})
		}
		out[i].Leases++
		out[i].Rows += l.Rows
	}
	return out
}

// printTop writes a frame as tables: a row per partition and task, then
// the consumers holding leases.
func (s *session) printTop(f *topFrameJSON, interval time.Duration) error {
	fmt.Fprintf(s.stdout, "tq top  %s  every %v\n", f.Time.UTC().Format(time.RFC3339), interval)
	if len(f.Partitions) == 0 {
		fmt.Fprintln(s.stdout, "\nno partition has rows")
		return nil
	}
	fmt.Fprintln(s.stdout)
	tw := s.table()
	fmt.Fprintln(tw, "PARTITION\tROWS\tTASK\tREADY*\tLEASED\tACKED\tDEAD\tDROPPED\tCLAIMS/S\tACKS/S\tLAG\tOLDEST LEASE\tNEXT LEASE END")
	for _, p := range f.Partitions {
		if len(p.Tasks) == 0 {
			fmt.Fprintf(tw, "%s\t%d\t-\t\t\t\t\t\t\t\t\t\t\n", p.Partition, p.Rows) // every cell, so that the columns after it stay aligned
		}
		for _, t := range p.Tasks {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", p.Partition, p.Rows, t.Task,
				t.Ready, t.Leased, t.Acked, t.Dead, t.Dropped, rateText(t.ClaimsPerSec), rateText(t.AcksPerSec),
				sinceText(f.Time, t.OldestReady), sinceText(f.Time, t.OldestLease), untilText(f.Time, t.NextLeaseEnd))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(s.stdout, "\n* ready: every row in no other state (tq status -task T -fields f counts T exactly); claims/s: rows delivered per second; acks/s: rows acked or dropped per second")
	held := false
	for _, p := range f.Partitions {
		for _, t := range p.Tasks {
			held = held || len(t.Consumers) > 0
		}
	}
	if !held {
		return nil
	}
	fmt.Fprintln(s.stdout)
	tw = s.table()
	fmt.Fprintln(tw, "PARTITION\tTASK\tHOLDER\tLEASES\tROWS\tNEXT END")
	for _, p := range f.Partitions {
		for _, t := range p.Tasks {
			for _, c := range t.Consumers {
				u := c.Until
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", p.Partition, t.Task, holderText(c.Holder), c.Leases, c.Rows, untilText(f.Time, &u))
			}
		}
	}
	return tw.Flush()
}

func rateText(r *float64) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f", *r)
}

// sinceText is how long before now t was ("-" for none).
func sinceText(now time.Time, t *time.Time) string {
	if t == nil {
		return "-"
	}
	return max(now.Sub(*t), 0).Round(100 * time.Millisecond).String() // 0 for an engine's clock ahead
}

// untilText is how long after now t is ("-" for none).
func untilText(now time.Time, t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Sub(now).Round(100 * time.Millisecond).String()
}

// perFrame lists the commands whose -timeout bounds each step (top's
// frames) rather than the whole run, which lasts until interrupted.
var perFrame = map[string]bool{"top": true, "serve": true}
