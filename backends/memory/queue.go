package memory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tqgo/tqgo/backends"
)

// The consumption state (backends.Queue) of the store's partitions. It is
// kept apart from the rows, under a lock of its own per partition, so that
// claims and acks never wait on a put's commit nor a put on them; a claim
// reads the committed rows first (List), then leases under the queue's
// lock, and a delete that ran in between (the queue counts them) makes it
// read again.
type queues struct {
	seq   atomic.Uint64 // change counter shared by every partition: a Seq is never seen twice
	mu    sync.RWMutex  // guards parts (the map)
	parts map[string]*queuePart
}

type queuePart struct {
	mu      sync.Mutex // guards everything below
	seq     uint64
	deletes uint64        // deletes seen, so a claim knows its List is still good
	changed chan struct{} // closed on the next change; nil until a waiter asks
	tasks   map[string]*queueTask
}

type queueTask struct {
	rows    map[uint64]*backends.Delivery
	batches []*openBatch
	// floor is an index below which every row of the partition is acked
	// or dropped by the task, so a claim need not look at them: claims
	// of a long-consumed partition cost what its unconsumed rows do.
	floor uint64
}

// openBatch is a data-parallel batch some ranks have not taken yet.
type openBatch struct {
	lease string
	rows  []*backends.Row
	units [][]int
	taken []bool
}

// part returns the partition's queue, creating it when create is set.
func (q *queues) part(name string, create bool) *queuePart {
	q.mu.RLock()
	p := q.parts[name]
	q.mu.RUnlock()
	if p != nil || !create {
		return p
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.parts == nil {
		q.parts = map[string]*queuePart{}
	}
	if p = q.parts[name]; p == nil {
		p = &queuePart{seq: q.seq.Add(1), tasks: map[string]*queueTask{}}
		q.parts[name] = p
	}
	return p
}

// bump records a change of the partition and wakes its waiters. The
// caller holds p.mu.
func (q *queues) bump(p *queuePart) {
	p.seq = q.seq.Add(1)
	if p.changed != nil {
		close(p.changed)
		p.changed = nil
	}
}

// committed is called after a commit of the partition whose lowest row
// index was low: indexes are drawn at Prepare, so rows commit out of
// order, and a task's floor must not stay above a row just committed.
func (q *queues) committed(partition string, low uint64) {
	if p := q.part(partition, false); p != nil {
		p.mu.Lock()
		for _, t := range p.tasks {
			t.floor = min(t.floor, low)
		}
		q.bump(p)
		p.mu.Unlock()
	}
}

// deleted removes rows a Delete removed from every task's consumption.
func (q *queues) deleted(partition string, rows []*backends.Row) {
	p := q.part(partition, false)
	if p == nil || len(rows) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range p.tasks {
		for _, r := range rows {
			delete(t.rows, r.Index)
		}
	}
	p.deletes++
	q.bump(p)
}

// deletedPartition forgets the partition's consumption: waiters wake, and
// a claim that read the rows before the delete reads again.
func (q *queues) deletedPartition(partition string) {
	p := q.part(partition, false)
	if p == nil {
		return
	}
	q.mu.Lock()
	if q.parts[partition] == p {
		delete(q.parts, partition) // the next call starts afresh; Seqs never repeat
	}
	q.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tasks = map[string]*queueTask{}
	p.deletes++
	q.bump(p)
}

func (p *queuePart) task(name string) *queueTask { return p.taskSized(name, 0) }

// taskSized is task, a new task with room for size rows.
func (p *queuePart) taskSized(name string, size int) *queueTask {
	t := p.tasks[name]
	if t == nil {
		t = &queueTask{rows: make(map[uint64]*backends.Delivery, size)}
		p.tasks[name] = t
	}
	return t
}

// seen is the delivery as a claim at now finds it: an expired lease is
// ready again, or dead once it had its deliveries; a Nack's delay that
// passed is over.
func seen(d backends.Delivery, now time.Time) backends.Delivery {
	switch {
	case d.State == backends.Leased && !now.Before(d.Until):
		d.Lease, d.Until = "", time.Time{}
		d.State = backends.Ready
		if d.Max > 0 && d.Deliveries >= d.Max {
			d.State = backends.Dead
		}
	case d.State == backends.Ready && !d.Until.IsZero() && !now.Before(d.Until):
		d.Until = time.Time{}
	}
	return d
}

// available reports whether a claim at now may lease the row.
func available(d *backends.Delivery, now time.Time) bool {
	if d == nil {
		return true
	}
	s := seen(*d, now)
	return s.State == backends.Ready && s.Until.IsZero()
}

func newLease() string {
	return strconv.FormatUint(rand.Uint64()|1<<63, 16)
}

// Claim implements backends.Queue.
func (m *MetaStore) Claim(ctx context.Context, partition string, req backends.ClaimRequest, pick backends.Pick) (backends.Claimed, error) {
	if err := req.Check(); err != nil {
		return backends.Claimed{}, err
	}
	if err := m.check(ctx); err != nil {
		return backends.Claimed{}, err
	}
	for {
		p := m.q.part(partition, true)
		p.mu.Lock()
		// The mark is taken before the rows are read: a commit between
		// the read and the lease then wakes a Wait given it.
		deletes, seq := p.deletes, p.seq
		if req.Batch != nil {
			if c, ok := m.q.takeShare(p, req, time.Now()); ok {
				p.mu.Unlock()
				return c, nil
			}
		}
		p.mu.Unlock()
		rows, err := m.sortedRows(ctx, partition)
		if err != nil {
			return backends.Claimed{}, err
		}
		p.mu.Lock()
		if p.deletes != deletes {
			p.mu.Unlock()
			continue // a delete since List: the rows may be gone
		}
		now := time.Now()
		t := p.taskSized(req.Task, len(rows))
		// Rows below the task's floor are consumed: skip them, and move
		// the floor past the consumed rows that lead the rest.
		from, _ := slices.BinarySearchFunc(rows, t.floor, func(r *backends.Row, i uint64) int { return compareIndex(r.Index, i) })
		rows = rows[from:]
		leading := true
		cands := make([]*backends.Row, 0, len(rows))
		dels := make([]backends.Delivery, 0, len(rows))
		for _, r := range rows {
			d := t.rows[r.Index]
			if leading {
				if d != nil && (d.State == backends.Acked || d.State == backends.Dropped) {
					t.floor = r.Index + 1
				} else {
					leading = false
				}
			}
			if available(d, now) {
				cands = append(cands, r)
				if d != nil {
					dels = append(dels, seen(*d, now))
				} else {
					dels = append(dels, backends.Delivery{Index: r.Index})
				}
			}
		}
		p.mu.Unlock()
		picked, err := pick(cands, dels)
		if err != nil {
			return backends.Claimed{}, err
		}
		if err := backends.CheckPicked(picked, len(cands)); err != nil {
			return backends.Claimed{}, err
		}
		if err := m.check(ctx); err != nil {
			return backends.Claimed{}, err
		}
		p.mu.Lock()
		if p.deletes != deletes {
			p.mu.Unlock()
			continue
		}
		if req.Batch != nil {
			// Another rank opened a batch while this one picked: take
			// its share rather than open a second, so every rank's
			// claims follow the batches in the order they were opened.
			if c, ok := m.q.takeShare(p, req, time.Now()); ok {
				p.mu.Unlock()
				return c, nil
			}
		}
		c := m.q.lease(p, req, cands, picked, time.Now())
		c.Mark.Seq = seq
		p.mu.Unlock()
		return c, nil
	}
}

// lease applies a pick: drops, then whole available units in order. The
// caller holds p.mu.
func (q *queues) lease(p *queuePart, req backends.ClaimRequest, cands []*backends.Row, picked backends.Picked, now time.Time) backends.Claimed {
	t := p.task(req.Task)
	var c backends.Claimed
	for _, i := range picked.Drop {
		r := cands[i]
		if d := t.rows[r.Index]; available(d, now) {
			nd := backends.Delivery{Index: r.Index, State: backends.Dropped}
			if d != nil {
				nd.Deliveries = d.Deliveries
			}
			t.rows[r.Index] = &nd
			c.Dropped++
		}
	}
	var take []int
	var bounds []int // where each unit taken ends in take
	for _, u := range picked.Units {
		if len(take)+len(u) > req.Rows {
			continue
		}
		if !slices.ContainsFunc(u, func(i int) bool { return !available(t.rows[cands[i].Index], now) }) {
			take = append(take, u...)
			bounds = append(bounds, len(take))
		}
		if len(take) == req.Rows {
			break
		}
	}
	if len(take) < req.Min {
		c.Units = nil
		c.Mark = q.mark(p, t, now)
		return c
	}
	c.Lease = newLease()
	c.Until = now.Add(req.Lease)
	c.Rows = make([]*backends.Row, len(take))
	c.Deliveries = make([]backends.Delivery, len(take))
	flat := fillRange(0, len(take))
	c.Units = make([][]int, len(bounds))
	for k, end := range bounds {
		start := 0
		if k > 0 {
			start = bounds[k-1]
		}
		c.Units[k] = flat[start:end:end]
	}
	states := make([]backends.Delivery, len(take)) // the task's records, one allocation
	for j, i := range take {
		r := cands[i]
		d := &states[j]
		*d = backends.Delivery{Index: r.Index, State: backends.Leased, Lease: c.Lease, Until: c.Until, Max: req.MaxDeliveries}
		if old := t.rows[r.Index]; old != nil {
			d.Deliveries = old.Deliveries
		}
		d.Deliveries++
		t.rows[r.Index] = d
		c.Rows[j], c.Deliveries[j] = r, *d
	}
	if b := req.Batch; b != nil && b.Ranks > 1 {
		ob := &openBatch{lease: c.Lease, rows: c.Rows, units: c.Units, taken: make([]bool, b.Ranks)}
		ob.taken[b.Rank] = true
		t.batches = append(t.batches, ob)
		q.bump(p) // the other ranks have a share to take
	}
	return c
}

// takeShare gives rank req.Batch.Rank its share of the task's oldest open
// batch it has not taken, forgetting batches none of whose rows its lease
// still holds. The caller holds p.mu.
func (q *queues) takeShare(p *queuePart, req backends.ClaimRequest, now time.Time) (backends.Claimed, bool) {
	t := p.task(req.Task)
	held := func(b *openBatch, r *backends.Row) *backends.Delivery {
		if d := t.rows[r.Index]; d != nil && d.State == backends.Leased && d.Lease == b.lease {
			return d
		}
		return nil
	}
	// A batch none of whose leases is running (acked, returned, expired,
	// reset) is closed.
	t.batches = slices.DeleteFunc(t.batches, func(b *openBatch) bool {
		return !slices.ContainsFunc(b.rows, func(r *backends.Row) bool {
			d := held(b, r)
			return d != nil && now.Before(d.Until)
		})
	})
	for bi, b := range t.batches {
		if b.taken[req.Batch.Rank] {
			continue
		}
		b.taken[req.Batch.Rank] = true
		if !slices.Contains(b.taken, false) {
			t.batches = slices.Delete(t.batches, bi, bi+1)
		}
		c := backends.Claimed{Lease: b.lease, Until: now.Add(req.Lease), Rows: b.rows, Units: b.units,
			Deliveries: make([]backends.Delivery, len(b.rows))}
		for i, r := range b.rows {
			if d := held(b, r); d != nil {
				d.Until = c.Until
				c.Deliveries[i] = *d
			} else if d := t.rows[r.Index]; d != nil {
				c.Deliveries[i] = seen(*d, now)
			} else {
				c.Deliveries[i] = backends.Delivery{Index: r.Index}
			}
		}
		c.Mark.Seq = p.seq
		return c, true
	}
	return backends.Claimed{}, false
}

// mark is the partition's Mark for the task: its change count and the
// end of the earliest lease or delay. The caller holds p.mu.
func (q *queues) mark(p *queuePart, t *queueTask, now time.Time) backends.Mark {
	mk := backends.Mark{Seq: p.seq}
	for _, d := range t.rows {
		// An expired lease or a passed delay wakes nobody: the claim
		// that made this mark saw it already.
		if u := seen(*d, now).Until; u.After(now) && (mk.Wake.IsZero() || u.Before(mk.Wake)) {
			mk.Wake = u
		}
	}
	return mk
}

func fillRange(from, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = from + i
	}
	return out
}

// Settle implements backends.Queue.
func (m *MetaStore) Settle(ctx context.Context, partition string, req backends.SettleRequest) (backends.SettleResult, error) {
	var res backends.SettleResult
	if err := req.Check(); err != nil {
		return res, err
	}
	if err := m.check(ctx); err != nil {
		return res, err
	}
	var (
		committed map[uint64]bool
		p         *queuePart
	)
	for {
		p = m.q.part(partition, true)
		if req.Op != backends.Drop {
			p.mu.Lock()
			break
		}
		// A row that was never delivered has no state: drop needs to
		// know it exists, and that no delete removed it since.
		p.mu.Lock()
		deletes := p.deletes
		p.mu.Unlock()
		rows, err := m.sortedRows(ctx, partition)
		if err != nil {
			return res, err
		}
		committed = make(map[uint64]bool, len(rows))
		for _, r := range rows {
			committed[r.Index] = true
		}
		p.mu.Lock()
		if p.deletes == deletes {
			break
		}
		p.mu.Unlock()
	}
	defer p.mu.Unlock()
	now := time.Now()
	t := p.task(req.Task)
	changed := false
	if req.Op == backends.Extend {
		res.Until = now.Add(req.Delay)
	}
	for _, i := range req.Indexes {
		d := t.rows[i]
		ok := false
		switch req.Op {
		case backends.Ack:
			// An ack resent (its reply lost) finds its own: applied.
			ok = d != nil && (d.State == backends.Leased || d.State == backends.Acked) && d.Lease == req.Lease
		case backends.Nack:
			// A nack resent finds its own (ready or dead, not delivered
			// again since): applied.
			ok = d != nil && d.Lease == req.Lease && d.State != backends.Acked && d.State != backends.Dropped
			if ok && d.State != backends.Leased {
				continue
			}
		case backends.Extend:
			ok = d != nil && d.State == backends.Leased && d.Lease == req.Lease
		case backends.Retry:
			ok = d != nil && seen(*d, now).State == backends.Dead
		case backends.Drop:
			ok = committed[i] && (d == nil || seen(*d, now).State == backends.Ready || seen(*d, now).State == backends.Dead)
		}
		if !ok {
			res.Lost = append(res.Lost, i)
			continue
		}
		switch req.Op {
		case backends.Ack:
			d.State, d.Until = backends.Acked, time.Time{}
		case backends.Nack:
			d.Until, d.State = time.Time{}, backends.Ready // d.Lease stays: see above
			if d.Max > 0 && d.Deliveries >= d.Max {
				d.State = backends.Dead
			} else if req.Delay > 0 {
				d.Until = now.Add(req.Delay)
			}
			changed = true
		case backends.Extend:
			d.Until = res.Until
		case backends.Retry:
			delete(t.rows, i)
			changed = true
		case backends.Drop:
			nd := backends.Delivery{Index: i, State: backends.Dropped}
			if d != nil {
				nd.Deliveries = d.Deliveries
			}
			t.rows[i] = &nd
		}
	}
	if changed {
		m.q.bump(p)
	}
	return res, nil
}

// Consumption implements backends.Queue.
func (m *MetaStore) Consumption(ctx context.Context, partition string, tasks ...string) (map[string][]backends.Delivery, error) {
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	out := map[string][]backends.Delivery{}
	for _, name := range tasks {
		if name == "" {
			return nil, invalidf("consumption: empty task name")
		}
		out[name] = []backends.Delivery{}
	}
	p := m.q.part(partition, false)
	if p == nil {
		return out, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	for name, t := range p.tasks {
		if _, want := out[name]; !want && len(tasks) > 0 {
			continue
		}
		if len(t.rows) == 0 {
			continue
		}
		ds := make([]backends.Delivery, 0, len(t.rows))
		for _, d := range t.rows {
			ds = append(ds, seen(*d, now))
		}
		slices.SortFunc(ds, func(a, b backends.Delivery) int { return compareIndex(a.Index, b.Index) })
		out[name] = ds
	}
	return out, nil
}

// Reset implements backends.Queue.
func (m *MetaStore) Reset(ctx context.Context, partition, task string, indexes []uint64) error {
	if task == "" {
		return invalidf("reset: empty task name")
	}
	if err := m.check(ctx); err != nil {
		return err
	}
	if indexes != nil && len(indexes) == 0 {
		return nil // no rows named: nothing to forget
	}
	p := m.q.part(partition, false)
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.tasks[task]
	if t == nil {
		return nil
	}
	if indexes == nil {
		delete(p.tasks, task)
	} else {
		for _, i := range indexes {
			delete(t.rows, i)
			t.floor = min(t.floor, i)
		}
		t.batches = nil
	}
	m.q.bump(p)
	return nil
}

// Wait implements backends.Queue: it wakes on the partition's next change.
func (m *MetaStore) Wait(ctx context.Context, partition string, mark backends.Mark) error {
	if err := m.check(ctx); err != nil {
		return err
	}
	p := m.q.part(partition, true)
	p.mu.Lock()
	if p.seq != mark.Seq {
		p.mu.Unlock()
		return nil
	}
	if p.changed == nil {
		p.changed = make(chan struct{})
	}
	ch := p.changed
	p.mu.Unlock()
	var wake <-chan time.Time
	if !mark.Wake.IsZero() {
		d := time.Until(mark.Wake)
		if d <= 0 {
			return nil
		}
		timer := time.NewTimer(d)
		defer timer.Stop()
		wake = timer.C
	}
	select {
	case <-ch:
		return nil
	case <-wake:
		return nil
	case <-m.done:
		return backends.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: memory: "+format, append([]any{backends.ErrInvalid}, args...)...)
}
