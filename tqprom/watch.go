package tqprom

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/tq"
)

// scrapeConcurrency is the Status calls a scrape has in flight at once.
const scrapeConcurrency = 8

// partitionWatch is one watched partition: the client that reads its
// status and the tasks whose rows are reported.
type partitionWatch struct {
	client    *tq.Client
	partition string
	tasks     []string // sorted, distinct
}

type taskKey struct{ partition, task string }

// Watch has every scrape report partition's committed rows
// (tq_partition_rows) and, for each of tasks, its rows by state
// (tq_task_rows) and those delivered again (tq_task_redelivered_rows),
// from one client.Status(ctx, partition) call per scrape, bounded by the
// scrape timeout (see WithScrapeTimeout). Status does not know a task's
// fields, so it counts rows that wait for a field as ready (and none as
// waiting); a task with no state in the partition yet has every row
// ready. Tasks not named are not reported, however many the partition
// has.
//
// Watching a partition again replaces its client and tasks. The watch
// counts 1+len(tasks) label sets against the limit (see WithWatchLimit);
// past it Watch fails with ErrWatchLimit and changes nothing. A nil
// client, an empty partition or an empty task name fails with ErrInvalid.
// Unwatch a partition that is done with (a finished step's), and before
// closing its client: a closed client's Status fails every scrape.
func (c *Collector) Watch(client *tq.Client, partition string, tasks ...string) error {
	if client == nil || partition == "" {
		return fmt.Errorf("%w: Watch needs a client and a partition", ErrInvalid)
	}
	if slices.Contains(tasks, "") {
		return fmt.Errorf("%w: Watch of partition %q: empty task name", ErrInvalid, partition)
	}
	w := &partitionWatch{client: client, partition: partition, tasks: slices.Compact(slices.Sorted(slices.Values(tasks)))}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.watched + 1 + len(w.tasks)
	if old, ok := c.partitions[partition]; ok {
		n -= 1 + len(old.tasks)
	}
	if n > c.opts.watchLimit {
		return fmt.Errorf("%w: watching partition %q and %d tasks would make %d label sets, over %d", ErrWatchLimit, partition, len(w.tasks), n, c.opts.watchLimit)
	}
	if old, ok := c.partitions[partition]; ok {
		for _, task := range old.tasks {
			if !slices.Contains(w.tasks, task) {
				delete(c.leaseSeen, taskKey{partition, task})
			}
		}
	}
	c.partitions[partition], c.watched = w, n
	return nil
}

// Unwatch stops reporting partition's status: its tq_partition_rows,
// tq_task_* (but the WatchTask counters) and tq_scrape_errors_total series
// go. Tasks given to
// WatchTask stay watched. Unwatching a partition not watched does nothing.
func (c *Collector) Unwatch(partition string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.partitions[partition]; ok {
		delete(c.partitions, partition)
		c.watched -= 1 + len(old.tasks)
		c.scrapeErrs.DeleteLabelValues(partition)
		for _, task := range old.tasks {
			delete(c.leaseSeen, taskKey{partition, task})
		}
	}
}

// WatchPresence has every scrape report the members of each of groups
// (presence groups: the roles processes announce themselves in, see
// tq.Client.Announce) by state (tq_presence_members) and how long ago
// the least recently seen one that has not left was seen
// (tq_presence_last_seen_age_seconds), from one client.Members call per
// client per scrape, within the scrape timeout; a failed read counts in
// tq_scrape_errors_total{partition="tq.presence"}. Member names are not
// labels: tq status lists them.
//
// Watching a group again replaces its client. Each group counts one
// label set against the limit; past it WatchPresence fails with
// ErrWatchLimit and changes nothing. A nil client or an empty group name
// fails with ErrInvalid.
func (c *Collector) WatchPresence(client *tq.Client, groups ...string) error {
	if client == nil {
		return fmt.Errorf("%w: WatchPresence needs a client", ErrInvalid)
	}
	for _, g := range groups {
		if g == "" {
			return fmt.Errorf("%w: WatchPresence: empty group name", ErrInvalid)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.watched
	for _, g := range slices.Compact(slices.Sorted(slices.Values(groups))) {
		if _, ok := c.presence[g]; !ok {
			n++
		}
	}
	if n > c.opts.watchLimit {
		return fmt.Errorf("%w: watching %d presence groups would make %d label sets, over %d", ErrWatchLimit, len(groups), n, c.opts.watchLimit)
	}
	for _, g := range groups {
		c.presence[g] = client
	}
	c.watched = n
	return nil
}

// UnwatchPresence stops reporting groups; their series go. A group not
// watched is ignored.
func (c *Collector) UnwatchPresence(groups ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, g := range groups {
		if _, ok := c.presence[g]; ok {
			delete(c.presence, g)
			c.watched--
		}
	}
	if len(c.presence) == 0 {
		c.scrapeErrs.DeleteLabelValues(tq.PresencePartition)
	}
}

// WatchTask has every scrape report what t's claims skipped and dropped
// (t.Stats(): tq_claim_skipped_rows_total, tq_claim_dropped_rows_total),
// labelled with t's partition and name; it makes no call to the engine.
// Several handles of one (partition, task) are summed, and count one label
// set against the limit; watching a handle again does nothing. The counts
// are this process's: other processes' claims report their own. Past the
// limit WatchTask fails with ErrWatchLimit, a nil t with ErrInvalid.
func (c *Collector) WatchTask(t *tq.Task) error {
	if t == nil {
		return fmt.Errorf("%w: WatchTask of a nil task", ErrInvalid)
	}
	k := taskKey{t.Partition(), t.Name()}
	c.mu.Lock()
	defer c.mu.Unlock()
	handles, ok := c.tasks[k]
	if slices.Contains(handles, t) {
		return nil
	}
	if !ok {
		if c.watched+1 > c.opts.watchLimit {
			return fmt.Errorf("%w: watching task %q of partition %q would make %d label sets, over %d", ErrWatchLimit, k.task, k.partition, c.watched+1, c.opts.watchLimit)
		}
		c.watched++
	}
	c.tasks[k] = append(handles, t)
	return nil
}

// UnwatchTask stops counting t's stats. Once no handle of its (partition,
// task) is watched, the series go; while others are, the counters drop by
// t's counts (which Prometheus takes for a counter reset). Unwatching a
// handle not watched does nothing.
func (c *Collector) UnwatchTask(t *tq.Task) {
	if t == nil {
		return
	}
	k := taskKey{t.Partition(), t.Name()}
	c.mu.Lock()
	defer c.mu.Unlock()
	handles := c.tasks[k]
	i := slices.Index(handles, t)
	if i < 0 {
		return
	}
	handles = slices.Delete(handles, i, i+1)
	if len(handles) == 0 {
		delete(c.tasks, k)
		c.watched--
		return
	}
	c.tasks[k] = handles
}

// taskStates are the values of tq_task_rows's state label.
var taskStates = []string{"ready", "waiting", "leased", "acked", "dead", "dropped"}

func stateCounts(ts tq.TaskStatus) []int {
	return []int{ts.Ready, ts.Waiting, ts.Leased, ts.Acked, ts.Dead, ts.Dropped}
}

// collectWatched reports the watched tasks' stats, then reads the watched
// partitions' status, scrapeConcurrency at a time, all within the scrape
// timeout, and reports what came back in time.
func (c *Collector) collectWatched(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	watches := make([]*partitionWatch, 0, len(c.partitions))
	for _, w := range c.partitions {
		watches = append(watches, w)
	}
	groupsOf := map[*tq.Client][]string{} // the watched presence groups, by the client that reads them
	for g, client := range c.presence {
		groupsOf[client] = append(groupsOf[client], g)
	}
	stats := make(map[taskKey]tq.TaskStats, len(c.tasks))
	for k, handles := range c.tasks {
		var sum tq.TaskStats
		for _, t := range handles {
			s := t.Stats()
			sum.Skipped += s.Skipped
			sum.Dropped += s.Dropped
		}
		stats[k] = sum
	}
	c.mu.Unlock()

	// The engines' connections, of every client watched (each once).
	var conns backends.ConnStats
	seen, has := map[*tq.Client]bool{}, false
	for _, w := range watches {
		if seen[w.client] {
			continue
		}
		seen[w.client] = true
		if st, ok := w.client.ConnStats(); ok {
			has = true
			conns.Open += st.Open
			conns.Idle += st.Idle
			conns.Timeouts += st.Timeouts
		}
	}
	if has {
		ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(conns.Open-conns.Idle), "busy")
		ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(conns.Idle), "idle")
		ch <- prometheus.MustNewConstMetric(c.connTimeouts, prometheus.CounterValue, float64(conns.Timeouts))
	}
	for k, s := range stats {
		ch <- prometheus.MustNewConstMetric(c.claimSkipped, prometheus.CounterValue, float64(s.Skipped), k.partition, k.task)
		ch <- prometheus.MustNewConstMetric(c.claimDropped, prometheus.CounterValue, float64(s.Dropped), k.partition, k.task)
	}
	if len(watches) == 0 && len(groupsOf) == 0 {
		return
	}

	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), scrapeKey{}, true), c.opts.scrapeTimeout)
	defer cancel()
	statuses := make([]*tq.Status, len(watches))
	errs := make([]error, len(watches))
	readers := make([]*tq.Client, 0, len(groupsOf))
	for client := range groupsOf {
		readers = append(readers, client)
	}
	members := make([][]tq.Member, len(readers))
	memberErrs := make([]error, len(readers))
	sem := make(chan struct{}, scrapeConcurrency)
	var wg sync.WaitGroup
	run := func(f func() error, errp *error) {
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				*errp = ctx.Err()
				return
			}
			defer func() { <-sem }()
			*errp = f()
		})
	}
	for i, w := range watches {
		run(func() (err error) {
			statuses[i], err = w.client.Status(ctx, w.partition)
			return err
		}, &errs[i])
	}
	for i, client := range readers {
		run(func() (err error) {
			members[i], err = client.Members(ctx, "")
			return err
		}, &memberErrs[i])
	}
	wg.Wait()
	now := time.Now()

	for i, client := range readers {
		c.collectPresence(ch, now, client, groupsOf[client], members[i], memberErrs[i])
	}

	for i, w := range watches {
		if errs[i] != nil {
			c.countScrapeError(w)
			continue
		}
		st := statuses[i]
		ch <- prometheus.MustNewConstMetric(c.partitionRows, prometheus.GaugeValue, float64(st.Rows), w.partition)
		for _, task := range w.tasks {
			ts, ok := st.Tasks[task]
			if !ok {
				ts = tq.TaskStatus{Ready: st.Rows, OldestReady: st.OldestRow} // no state yet: every row as Status counts it
			}
			for j, n := range stateCounts(ts) {
				ch <- prometheus.MustNewConstMetric(c.taskRows, prometheus.GaugeValue, float64(n), w.partition, task, taskStates[j])
			}
			ch <- prometheus.MustNewConstMetric(c.redelivered, prometheus.GaugeValue, float64(ts.Redelivered), w.partition, task)
			ch <- prometheus.MustNewConstMetric(c.deadLease, prometheus.GaugeValue, float64(ts.DeadLeaseEnded), w.partition, task)
			ch <- prometheus.MustNewConstMetric(c.leases, prometheus.GaugeValue, float64(len(ts.Leases)), w.partition, task)
			if len(ts.Leases) > 0 {
				left := max(ts.Leases[0].Until.Sub(now).Seconds(), 0)
				ch <- prometheus.MustNewConstMetric(c.leaseLeft, prometheus.GaugeValue, left, w.partition, task)
			}
			ch <- prometheus.MustNewConstMetric(c.consumed, prometheus.CounterValue, float64(ts.Consumed), w.partition, task)
			switch {
			case ts.Ready == 0:
				ch <- prometheus.MustNewConstMetric(c.readyAge, prometheus.GaugeValue, 0, w.partition, task)
			case !ts.OldestReady.IsZero():
				ch <- prometheus.MustNewConstMetric(c.readyAge, prometheus.GaugeValue, max(now.Sub(ts.OldestReady).Seconds(), 0), w.partition, task)
			}
			ch <- prometheus.MustNewConstMetric(c.leaseAge, prometheus.GaugeValue, c.oldestLease(w, task, ts.Leases, now), w.partition, task)
		}
	}
}

// oldestLease returns the age of the oldest of leases, the running leases
// of task in w's partition: since its claim granted it or, for a lease
// whose grant time the engine does not know (a log written before grant
// times), since the first scrape that saw it (now for one not seen
// before). It keeps, for the next scrape, when each such lease was first
// seen, and forgets the others (leases that ended), unless w is no longer
// watched.
func (c *Collector) oldestLease(w *partitionWatch, task string, leases []tq.LeaseStatus, now time.Time) float64 {
	k := taskKey{w.partition, task}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.leaseSeen[k]
	seen := make(map[string]time.Time, len(leases))
	oldest := now
	for _, l := range leases {
		if !l.Granted.IsZero() {
			// The engine keeps when it was granted.
			oldest = minTime(oldest, l.Granted)
			continue
		}
		t, ok := old[l.ID]
		if !ok || t.After(now) {
			t = now
		}
		seen[l.ID] = t
		oldest = minTime(oldest, t)
	}
	if c.partitions[w.partition] == w {
		if len(seen) == 0 {
			delete(c.leaseSeen, k)
		} else {
			c.leaseSeen[k] = seen
		}
	}
	return max(now.Sub(oldest).Seconds(), 0)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// presenceStates are the values of tq_presence_members's state label.
var presenceStates = []string{"alive", "gone", "left"}

// collectPresence reports groups, read by client as members (or err).
func (c *Collector) collectPresence(ch chan<- prometheus.Metric, now time.Time, client *tq.Client, groups []string, members []tq.Member, err error) {
	if err != nil {
		c.mu.Lock()
		if slices.ContainsFunc(groups, func(g string) bool { return c.presence[g] == client }) {
			c.scrapeErrs.WithLabelValues(tq.PresencePartition).Inc()
		}
		c.mu.Unlock()
		return
	}
	for _, g := range groups {
		count := map[string]int{}
		var age float64
		for _, m := range members {
			if m.Group != g {
				continue
			}
			count[m.State()]++
			if !m.Left {
				age = max(age, now.Sub(m.Seen).Seconds())
			}
		}
		for _, state := range presenceStates {
			ch <- prometheus.MustNewConstMetric(c.members, prometheus.GaugeValue, float64(count[state]), g, state)
		}
		ch <- prometheus.MustNewConstMetric(c.seenAge, prometheus.GaugeValue, age, g)
	}
}

// countScrapeError counts a failed status read of w, unless w was
// unwatched or replaced meanwhile (its series is gone and must stay gone).
func (c *Collector) countScrapeError(w *partitionWatch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.partitions[w.partition] == w {
		c.scrapeErrs.WithLabelValues(w.partition).Inc()
	}
}
