package memory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/internal/hook"
	"github.com/tqgo/tqgo/internal/rules"
)

// MetaStore keeps metadata and consumption in process: each partition's
// state is tqgo's rules (the same code every engine applies) behind a
// lock of its own, so writers and consumers of different partitions never
// contend. It is safe for concurrent use. Rows it returns are shared and
// must be treated as read-only. A partition is forgotten once a removal
// (Delete, DeletePartition, Swept, Garbage) leaves it with no rows and no
// garbage; consumption calls keep it.
type MetaStore struct {
	next   atomic.Uint64 // next global index, shared by every partition
	bases  atomic.Uint64 // partitions made, for their marks' bases
	closed atomic.Bool
	clock  func() time.Time

	mu    sync.RWMutex // guards parts (the map, not the partitions in it)
	parts map[string]*partition

	done chan struct{} // closed by Close: waiters return
}

var (
	_ metadata.MetaStore  = (*MetaStore)(nil)
	_ metadata.Summarizer = (*MetaStore)(nil)
)

type partition struct {
	mu sync.Mutex // guards everything below
	st *rules.Partition
	// dropped is set when the partition is removed from MetaStore.parts
	// (it emptied): a caller that fetched it before must fetch it again.
	dropped bool
	// base is added to the rules' change count in marks, so that a mark
	// of a forgotten partition never matches its successor's.
	base         uint64
	seen         uint64        // the change count waiters were last woken at
	seenConsumed uint64        // and the consumption count
	wake         chan struct{} // closed at the next change; nil until a waiter asks
}

// MetaOption configures a MetaStore.
type MetaOption func(*MetaStore)

// WithClock makes the store read time from clock (default time.Now): the
// clock leases, delays and reservation ages are judged by. For tests that
// move time on.
func WithClock(clock func() time.Time) MetaOption {
	return func(m *MetaStore) { m.clock = clock }
}

// NewMetaStore returns an empty store.
func NewMetaStore(opts ...MetaOption) *MetaStore {
	m := &MetaStore{parts: map[string]*partition{}, done: make(chan struct{}), clock: time.Now}
	for _, o := range opts {
		o(m)
	}
	return m
}

func (m *MetaStore) now() int64 { return m.clock().UnixMicro() }

// lock returns the partition locked, creating it when create is set (nil
// otherwise), skipping one that was dropped between lookup and lock.
func (m *MetaStore) lock(name string, create bool) *partition {
	for {
		m.mu.RLock()
		p := m.parts[name]
		m.mu.RUnlock()
		if p == nil {
			if !create {
				return nil
			}
			m.mu.Lock()
			if p = m.parts[name]; p == nil {
				p = &partition{st: rules.New(), base: m.bases.Add(1) << 40}
				m.parts[name] = p
			}
			m.mu.Unlock()
		}
		p.mu.Lock()
		if !p.dropped {
			return p
		}
		p.mu.Unlock()
	}
}

// unlock wakes waiters if the partition changed, forgets it if it emptied
// (lock order: m.mu before p.mu), and unlocks it.
func (m *MetaStore) unlock(name string, p *partition) {
	p.changed()
	if !p.st.EmptyAt(m.now()) {
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if m.parts[name] == p && p.st.EmptyAt(m.now()) {
		p.dropped = true
		delete(m.parts, name)
		if p.wake != nil {
			close(p.wake)
			p.wake = nil
		}
	}
}

// unlockKeep wakes waiters if the partition changed and unlocks it,
// keeping it even if empty: what consumption calls leave (a claim or a
// Wait on a partition with no rows) must not make the next call find
// another partition, or a Wait's mark would never match.
func (p *partition) unlockKeep() {
	p.changed()
	p.mu.Unlock()
}

// changed wakes the waiters after a change of the count. The caller holds
// p.mu.
func (p *partition) changed() {
	if s, c := p.st.Seq(), p.st.Consumed(); s != p.seen || c != p.seenConsumed {
		p.seen, p.seenConsumed = s, c
		if p.wake != nil {
			close(p.wake)
			p.wake = nil
		}
	}
}

func (m *MetaStore) check(ctx context.Context) error {
	if m.closed.Load() {
		return backends.ErrClosed
	}
	return ctx.Err()
}

// Prepare implements metadata.MetaStore.
func (m *MetaStore) Prepare(ctx context.Context, partition string, keys, fields []string, sizes []int64) ([]metadata.Reservation, error) {
	if err := metadata.CheckSizes(keys, fields, sizes); err != nil {
		return nil, err
	}
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	p := m.lock(partition, true)
	defer m.unlock(partition, p)
	n := p.st.NewKeys(keys)
	base := m.next.Add(uint64(n)) - uint64(n)
	res, err := p.st.Prepare(m.now(), keys, fields, sizes, base, n)
	var full *metadata.FullError
	if errors.As(err, &full) {
		// The indexes taken for it are spent, as a shared engine's are:
		// each is handed out once, ever.
		full.Partition = partition
		full.Mark.Seq += p.base
	}
	return res, err
}

// SetCapacity implements metadata.MetaStore.
func (m *MetaStore) SetCapacity(ctx context.Context, partition string, c metadata.Capacity) ([]*metadata.Row, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	p := m.lock(partition, true)
	defer m.unlock(partition, p)
	return p.st.SetCapacity(m.now(), c), nil
}

// Commit implements metadata.MetaStore.
func (m *MetaStore) Commit(ctx context.Context, partition string, updates []metadata.RowUpdate) (metadata.CommitResult, error) {
	if err := m.check(ctx); err != nil {
		return metadata.CommitResult{}, err
	}
	if len(updates) == 0 {
		return metadata.CommitResult{}, nil
	}
	p := m.lock(partition, false)
	if p == nil {
		return metadata.CommitResult{}, fmt.Errorf("%w: partition %q was cleared", backends.ErrConflict, partition)
	}
	defer m.unlock(partition, p)
	res, err := p.st.Commit(m.now(), updates)
	if err != nil {
		return res, fmt.Errorf("%w (partition %q)", err, partition)
	}
	return res, nil
}

// Lookup implements metadata.MetaStore.
func (m *MetaStore) Lookup(ctx context.Context, partition string, keys []string) ([]*metadata.Row, error) {
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	p := m.lock(partition, false)
	if p == nil {
		return make([]*metadata.Row, len(keys)), nil
	}
	defer p.mu.Unlock()
	return p.st.Lookup(keys), nil
}

// List implements metadata.MetaStore.
func (m *MetaStore) List(ctx context.Context, partition string) ([]*metadata.Row, error) {
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	p := m.lock(partition, false)
	if p == nil {
		return []*metadata.Row{}, nil
	}
	defer p.mu.Unlock()
	return slices.Clone(p.st.List()), nil
}

// Partitions implements metadata.MetaStore.
func (m *MetaStore) Partitions(ctx context.Context) ([]string, error) {
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	m.mu.RLock()
	names := make([]string, 0, len(m.parts))
	parts := make([]*partition, 0, len(m.parts))
	for n, p := range m.parts {
		names, parts = append(names, n), append(parts, p)
	}
	m.mu.RUnlock()
	out := names[:0]
	for i, p := range parts {
		p.mu.Lock()
		if p.st.Committed() > 0 {
			out = append(out, names[i])
		}
		p.mu.Unlock()
	}
	slices.Sort(out)
	return out, nil
}

// Delete implements metadata.MetaStore.
func (m *MetaStore) Delete(ctx context.Context, partition string, keys []string) ([]*metadata.Row, error) {
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	p := m.lock(partition, false)
	if p == nil {
		return nil, nil
	}
	defer m.unlock(partition, p)
	return p.st.Delete(m.now(), keys), nil
}

// DeleteFields implements metadata.MetaStore.
func (m *MetaStore) DeleteFields(ctx context.Context, partition string, keys, fields []string) ([]metadata.Ref, error) {
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	p := m.lock(partition, false)
	if p == nil {
		return nil, nil
	}
	defer m.unlock(partition, p)
	return p.st.DeleteFields(m.now(), keys, fields), nil
}

// DeletePartition implements metadata.MetaStore.
func (m *MetaStore) DeletePartition(ctx context.Context, partition string) ([]*metadata.Row, error) {
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	p := m.lock(partition, false)
	if p == nil {
		return nil, nil
	}
	defer m.unlock(partition, p)
	return p.st.DeletePartition(m.now()), nil
}

// Garbage implements metadata.MetaStore.
func (m *MetaStore) Garbage(ctx context.Context, partition string, olderThan time.Duration) ([]metadata.Ref, error) {
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	if olderThan < 0 {
		return nil, fmt.Errorf("%w: negative olderThan %v", backends.ErrInvalid, olderThan)
	}
	p := m.lock(partition, false)
	if p == nil {
		return nil, nil
	}
	defer m.unlock(partition, p)
	now := m.now()
	p.st.Abort(now, now-olderThan.Microseconds())
	return slices.Clone(p.st.Garbage()), nil
}

// Swept implements metadata.MetaStore.
func (m *MetaStore) Swept(ctx context.Context, partition string, refs []metadata.Ref) error {
	if err := m.check(ctx); err != nil {
		return err
	}
	if len(refs) == 0 {
		return nil
	}
	p := m.lock(partition, false)
	if p == nil {
		return nil
	}
	defer m.unlock(partition, p)
	p.st.Swept(m.now(), refs)
	return nil
}

// Abandon implements metadata.MetaStore. It never reports a reservation
// lost: a cell it does not know was aborted and swept already (this store
// loses no metadata, and never hands its key out again), so the caller
// may delete it.
func (m *MetaStore) Abandon(ctx context.Context, partition string, refs []metadata.Ref) error {
	if err := m.check(ctx); err != nil {
		return err
	}
	if len(refs) == 0 {
		return nil
	}
	if p := m.lock(partition, false); p != nil {
		p.st.Abandon(m.now(), refs)
		m.unlock(partition, p)
	}
	return nil
}

// Close implements metadata.MetaStore.
func (m *MetaStore) Close() error {
	if !m.closed.Swap(true) {
		close(m.done)
	}
	return nil
}

// Claim implements metadata.Queue. A Custom claim's pick runs under the
// partition's lock, over a window of the oldest ready rows that grows
// fourfold while the pick leases too few and more rows are ready.
func (m *MetaStore) Claim(ctx context.Context, partition string, req metadata.ClaimRequest, pick metadata.Pick) (metadata.Claimed, error) {
	if err := req.Check(); err != nil {
		return metadata.Claimed{}, err
	}
	if err := m.check(ctx); err != nil {
		return metadata.Claimed{}, err
	}
	p := m.lock(partition, true)
	defer p.unlockKeep()
	// No Hold: a Wait here wakes on the change in process and claims with
	// no request, so claims never stand.
	a := rules.ClaimArgs{Task: req.Task, Token: req.Token, Lease: req.Lease, Rows: req.Rows, Min: req.Min,
		MaxDeliveries: req.MaxDeliveries, Batch: req.Batch, Select: req.Select, Floor: req.Floor, Custom: req.Custom}
	if a.Token == "" {
		a.Token = metadata.NewLease(req.Holder)
	}
	var c metadata.Claimed
	var cleared []*metadata.Row
	for window := 4*req.Rows + 64; ; window *= 4 {
		now := m.now()
		var rows []*metadata.Row
		if a.Custom {
			var ds []metadata.Delivery
			rows, ds = p.st.Candidates(now, req.Task, req.Select, req.Floor, window)
			picked, err := pick(rows, ds)
			if err != nil {
				return metadata.Claimed{}, err
			}
			if err := metadata.CheckPicked(picked, len(rows)); err != nil {
				return metadata.Claimed{}, err
			}
			a.Units, a.Drop = indexUnits(rows, picked)
		}
		c = p.st.Claim(now, &a)
		c.Mark.Seq += p.base
		cleared = append(cleared, c.Cleared...)
		c.Cleared = cleared // every attempt's: their cells are the caller's to delete
		if c.Lease != "" || !a.Custom || len(rows) < window {
			return c, nil
		}
	}
}

// indexUnits turns a pick's positions into row indexes.
func indexUnits(rows []*metadata.Row, picked metadata.Picked) (units [][]uint64, drop []uint64) {
	units = make([][]uint64, len(picked.Units))
	for k, u := range picked.Units {
		units[k] = make([]uint64, len(u))
		for j, i := range u {
			units[k][j] = rows[i].Index
		}
	}
	for _, i := range picked.Drop {
		drop = append(drop, rows[i].Index)
	}
	return units, drop
}

// Settle implements metadata.Queue.
func (m *MetaStore) Settle(ctx context.Context, partition string, req metadata.SettleRequest) (metadata.SettleResult, error) {
	if err := req.Check(); err != nil {
		return metadata.SettleResult{}, err
	}
	if err := m.check(ctx); err != nil {
		return metadata.SettleResult{}, err
	}
	p := m.lock(partition, req.Op == metadata.Undo) // an undo holds for a claim yet to come
	if p == nil {
		return metadata.SettleResult{Lost: slices.Clone(req.Indexes)}, nil
	}
	defer p.unlockKeep()
	return p.st.Settle(m.now(), &req), nil
}

// Consumption implements metadata.Queue.
func (m *MetaStore) Consumption(ctx context.Context, partition string, tasks ...string) (map[string][]metadata.Delivery, error) {
	v, err := m.View(ctx, partition, tasks...)
	return v.Tasks, err
}

// View implements metadata.Queue.
func (m *MetaStore) View(ctx context.Context, partition string, tasks ...string) (metadata.View, error) {
	if err := m.check(ctx); err != nil {
		return metadata.View{}, err
	}
	for _, name := range tasks {
		if name == "" {
			return metadata.View{}, invalidf("consumption: empty task name")
		}
	}
	p := m.lock(partition, false)
	if p == nil {
		return emptyView(tasks), nil
	}
	defer p.mu.Unlock()
	v := p.view(m.now(), tasks, true, true, true)
	v.Rows = slices.Clone(v.Rows)
	return v, nil
}

// Summarize implements metadata.Summarizer: the summary is counted from
// a view of what it reads, so that one of counters alone passes over no
// row (and is counted under the partition's lock; a pass over the rows is
// made after it, on a copy of the list).
func (m *MetaStore) Summarize(ctx context.Context, partition string, req metadata.SummaryRequest) (metadata.Summary, error) {
	if err := m.check(ctx); err != nil {
		return metadata.Summary{}, err
	}
	if err := req.Check(); err != nil {
		return metadata.Summary{}, err
	}
	p := m.lock(partition, false)
	if p == nil {
		v := emptyView(req.Tasks)
		return v.Summary(req), nil
	}
	now := m.now()
	return metadata.SummaryIndexed(req, func(tag string, tasks []string) float64 { return p.st.Oldest(now, tag, tasks) }, p.st.Committed(),
		func(rows, since, deliveries bool) metadata.View {
			return p.view(now, req.Tasks, rows, since, deliveries)
		}, p.mu.Unlock), nil
}

// emptyView is the view of tasks of a partition the store does not hold.
func emptyView(tasks []string) metadata.View {
	out := map[string][]metadata.Delivery{}
	for _, name := range tasks {
		out[name] = []metadata.Delivery{}
	}
	return metadata.View{Rows: []*metadata.Row{}, Tasks: out}
}

// view is the partition's view of tasks, its Since only with since and
// its Tasks only with deliveries. Its Rows are the partition's own: read
// them under p.mu, or clone them. Called with p.mu held.
func (p *partition) view(now int64, tasks []string, rows, since, deliveries bool) metadata.View {
	v := metadata.View{Mark: metadata.Mark{Seq: p.base + p.st.Seq(), Consumed: p.st.Consumed()}}
	if rows {
		v.Rows = p.st.List()
	}
	if deliveries {
		v.Tasks = p.st.Consumption(now, tasks...)
	}
	v.Inserted, v.Consumed = p.st.Counts(tasks...)
	if since {
		v.Since = p.st.Since(v.Rows)
	}
	v.Capacity, v.Used = p.st.Capacity()
	v.Groups = p.st.GroupWaits(now, tasks...)
	return v
}

// Reset implements metadata.Queue.
func (m *MetaStore) Reset(ctx context.Context, partition, task string, indexes []uint64) error {
	if task == "" {
		return invalidf("reset: empty task name")
	}
	if err := m.check(ctx); err != nil {
		return err
	}
	p := m.lock(partition, false)
	if p == nil {
		return nil
	}
	defer p.unlockKeep()
	p.st.Reset(m.now(), task, indexes)
	return nil
}

// Wait implements metadata.Queue: it wakes on the partition's next change
// that may make rows ready, or at mark.Wake.
func (m *MetaStore) Wait(ctx context.Context, partition string, mark metadata.Mark) error {
	if err := m.check(ctx); err != nil {
		return err
	}
	p := m.lock(partition, true)
	if p.base+p.st.Seq() != mark.Seq || mark.Consume && p.st.Consumed() != mark.Consumed {
		p.unlockKeep()
		return nil
	}
	if p.wake == nil {
		p.wake = make(chan struct{})
	}
	ch := p.wake
	p.unlockKeep()
	var wake <-chan time.Time
	if !mark.Wake.IsZero() {
		d := mark.Wake.Sub(m.clock())
		if d <= 0 {
			return nil
		}
		timer := time.NewTimer(d)
		defer timer.Stop()
		wake = timer.C
	}
	hook.Waiting(partition)
	select {
	case <-ch:
		hook.Served(partition)
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
