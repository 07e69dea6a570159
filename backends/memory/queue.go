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

// committed is called after a commit of the partition.
func (q *queues) committed(partition string) {
	if p := q.part(partition, false); p != nil {
		p.mu.Lock()
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
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tasks = map[string]*queueTask{}
	p.deletes++
	q.bump(p)
}

func (p *queuePart) task(name string) *queueTask {
	t := p.tasks[name]
	if t == nil {
		t = &queueTask{rows: map[uint64]*backends.Delivery{}}
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
	p := m.q.part(partition, true)
	for {
		p.mu.Lock()
		deletes := p.deletes
		// The Mark of a claim that leases nothing is where its List
		// stands: a commit landing between the List and the lease has
		// rows the List did not see, and must wake the claim's Wait.
		seq := p.seq
		if req.Batch != nil {
			if c, ok := m.q.takeShare(p, req, time.Now()); ok {
				p.mu.Unlock()
				return c, nil
			}
		}
		p.mu.Unlock()
		rows, err := m.List(ctx, partition)
		if err != nil {
			return backends.Claimed{}, err
		}
		p.mu.Lock()
		if p.deletes != deletes {
			p.mu.Unlock()
			continue // a delete since List: the rows may be gone
		}
		now := time.Now()
		t := p.task(req.Task)
		var cands []*backends.Row
		var dels []backends.Delivery
		for _, r := range rows {
			d := t.rows[r.Index]
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
			// Another rank may have opened a batch since the check above;
			// its share comes first, and the Mark of a claim that leased
			// nothing must not pass the batch's opening, or the rank's
			// Wait would sleep through it.
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
	for _, u := range picked.Units {
		if len(take)+len(u) > req.Rows {
			continue
		}
		if !slices.ContainsFunc(u, func(i int) bool { return !available(t.rows[cands[i].Index], now) }) {
			c.Units = append(c.Units, fillRange(len(take), len(u)))
			take = append(take, u...)
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
	for j, i := range take {
		r := cands[i]
		d := backends.Delivery{Index: r.Index, State: backends.Leased, Lease: c.Lease, Until: c.Until, Max: req.MaxDeliveries}
		if old := t.rows[r.Index]; old != nil {
			d.Deliveries = old.Deliveries
		}
		d.Deliveries++
		t.rows[r.Index] = &d
		c.Rows[j], c.Deliveries[j] = r, d
	}
	if b := req.Batch; b != nil && b.Ranks > 1 {
		ob := &openBatch{lease: c.Lease, rows: c.Rows, units: c.Units, taken: make([]bool, b.Ranks)}
		ob.taken[b.Rank] = true
		t.batches = append(t.batches, ob)
		q.bump(p) // the other ranks have a share to take
	}
	c.Mark = q.mark(p, t, now)
	return c
}

// takeShare gives rank req.Batch.Rank its share of the task's oldest open
// batch it has not taken, forgetting batches none of whose rows its lease
// still holds. The caller holds p.mu.
func (q *queues) takeShare(p *queuePart, req backends.ClaimRequest, now time.Time) (backends.Claimed, bool) {
	t := p.task(req.Task)
	held := func(b *openBatch, r *backends.Row) *backends.Delivery {
		d := t.rows[r.Index]
		if d != nil && d.State == backends.Leased && d.Lease == b.lease && now.Before(d.Until) {
			return d
		}
		return nil
	}
	t.batches = slices.DeleteFunc(t.batches, func(b *openBatch) bool {
		return !slices.ContainsFunc(b.rows, func(r *backends.Row) bool { return held(b, r) != nil })
	})
	for bi, b := range t.batches {
		if b.taken[req.Batch.Rank] {
			continue
		}
		b.taken[req.Batch.Rank] = true
		if !slices.Contains(b.taken, false) {
			t.batches = slices.Delete(t.batches, bi, bi+1)
		}
		c := backends.Claimed{Lease: b.lease, Until: now.Add(req.Lease)}
		pos := make([]int, len(b.rows)) // batch position -> position in c.Rows, or -1
		for i, r := range b.rows {
			pos[i] = -1
			if d := held(b, r); d != nil {
				d.Until = c.Until
				pos[i] = len(c.Rows)
				c.Rows = append(c.Rows, r)
				c.Deliveries = append(c.Deliveries, *d)
			}
		}
		for _, u := range b.units {
			var nu []int
			for _, i := range u {
				if pos[i] >= 0 {
					nu = append(nu, pos[i])
				}
			}
			if len(nu) > 0 {
				c.Units = append(c.Units, nu)
			}
		}
		c.Mark = q.mark(p, t, now)
		return c, true
	}
	return backends.Claimed{}, false
}

// mark is the partition's Mark for the task: its change count and the
// end of the earliest lease or delay. The caller holds p.mu.
func (q *queues) mark(p *queuePart, t *queueTask, now time.Time) backends.Mark {
	mk := backends.Mark{Seq: p.seq}
	for _, d := range t.rows {
		if (d.State == backends.Leased || d.State == backends.Ready) && !d.Until.IsZero() {
			if mk.Wake.IsZero() || d.Until.Before(mk.Wake) {
				mk.Wake = d.Until
			}
		}
	}
	if !mk.Wake.IsZero() && !mk.Wake.After(now) {
		mk.Wake = now
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
	var committed map[uint64]bool
	if req.Op == backends.Drop {
		// A row that was never delivered has no state: drop needs to
		// know it exists.
		rows, err := m.List(ctx, partition)
		if err != nil {
			return res, err
		}
		committed = make(map[uint64]bool, len(rows))
		for _, r := range rows {
			committed[r.Index] = true
		}
	}
	p := m.q.part(partition, true)
	p.mu.Lock()
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
		case backends.Nack, backends.Extend:
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
			d.Lease, d.Until, d.State = "", time.Time{}, backends.Ready
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
