package replica

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/internal/hook"
	"github.com/tqgo/tqgo/internal/rules"
)

// one returns the single result of a call's one record.
func one(res []*rules.Result, err error) (*rules.Result, error) {
	if err != nil {
		return nil, err
	}
	if len(res) != 1 {
		return nil, fmt.Errorf("replica: %d results of one record", len(res))
	}
	return res[0], nil
}

// Prepare implements metadata.MetaStore. Its errors never match
// ErrOutcomeUnknown: a Prepare whose outcome is unknown reserved at most
// rows that stay invisible.
func (m *Meta) Prepare(ctx context.Context, partition string, keys, fields []string, sizes []int64) ([]metadata.Reservation, error) {
	if err := metadata.CheckSizes(keys, fields, sizes); err != nil {
		return nil, err
	}
	for {
		var base uint64
		r, err := one(m.execAfter(ctx, partition, nil, func(st *rules.Partition) ([]record, error) {
			n := st.NewKeys(keys)
			return []record{{id: newID(), indexes: uint64(n), data: rules.PrepareRecord(keys, fields, sizes, n)}}, nil
		}, func(p *part) { base = p.base }))
		var full *metadata.FullError
		if err == nil && errors.As(r.Err, &full) {
			full.Partition = partition
			full.Mark.Seq += base
		}
		switch {
		case err != nil:
			if errors.Is(err, backends.ErrOutcomeUnknown) {
				err = errNotApplied(err)
			}
			return nil, err
		case errors.Is(r.Err, rules.ErrIndexes):
			continue // a row was removed since the copy: prepare again
		case r.Err != nil:
			return nil, r.Err
		}
		return r.Reservations, nil
	}
}

// Commit implements metadata.MetaStore.
func (m *Meta) Commit(ctx context.Context, partition string, updates []metadata.RowUpdate) (metadata.CommitResult, error) {
	return m.commit(ctx, partition, nil, updates)
}

func (m *Meta) commit(ctx context.Context, partition string, cells []backends.Cell, updates []metadata.RowUpdate) (metadata.CommitResult, error) {
	if len(updates) == 0 && cells == nil {
		return metadata.CommitResult{}, m.check(ctx)
	}
	rec, err := rules.CommitRecord(updates)
	if err != nil {
		return metadata.CommitResult{}, err
	}
	r, err := one(m.exec(ctx, partition, cells, func(*rules.Partition) ([]record, error) {
		return []record{{id: newID(), data: rec}}, nil
	}))
	if err != nil {
		return metadata.CommitResult{}, err
	}
	if r.Err != nil {
		return metadata.CommitResult{}, fmt.Errorf("%w (partition %q)", r.Err, partition)
	}
	return r.Commit, nil
}

// Lookup implements metadata.MetaStore.
func (m *Meta) Lookup(ctx context.Context, partition string, keys []string) (out []*metadata.Row, err error) {
	err = m.view(ctx, partition, func(st *rules.Partition) { out = st.Lookup(keys) })
	return out, err
}

// List implements metadata.MetaStore.
func (m *Meta) List(ctx context.Context, partition string) (out []*metadata.Row, err error) {
	err = m.view(ctx, partition, func(st *rules.Partition) { out = slices.Clone(st.List()) })
	if out == nil && err == nil {
		out = []*metadata.Row{}
	}
	return out, err
}

// Partitions implements metadata.MetaStore: the partitions whose logs
// hold committed rows.
func (m *Meta) Partitions(ctx context.Context) ([]string, error) {
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	names, err := m.log.Partitions(ctx)
	if err != nil {
		return nil, err
	}
	out := names[:0]
	for _, name := range names {
		has := false
		if err := m.view(ctx, name, func(st *rules.Partition) { has = st.Committed() > 0 }); err != nil {
			return nil, err
		}
		if has {
			out = append(out, name)
		}
	}
	return out, nil
}

// Delete implements metadata.MetaStore.
func (m *Meta) Delete(ctx context.Context, partition string, keys []string) ([]*metadata.Row, error) {
	return m.remove(ctx, partition, rules.DeleteRecord(keys))
}

// DeletePartition implements metadata.MetaStore.
func (m *Meta) DeletePartition(ctx context.Context, partition string) ([]*metadata.Row, error) {
	return m.remove(ctx, partition, rules.DeletePartitionRecord())
}

// DeleteFields implements metadata.MetaStore.
func (m *Meta) DeleteFields(ctx context.Context, partition string, keys, fields []string) ([]metadata.Ref, error) {
	r, err := one(m.exec(ctx, partition, nil, func(*rules.Partition) ([]record, error) {
		return []record{{id: newID(), data: rules.DeleteFieldsRecord(keys, fields)}}, nil
	}))
	if err != nil {
		return nil, err
	}
	return r.Cells, r.Err
}

func (m *Meta) remove(ctx context.Context, partition string, rec []byte) ([]*metadata.Row, error) {
	r, err := one(m.exec(ctx, partition, nil, func(*rules.Partition) ([]record, error) {
		return []record{{id: newID(), data: rec}}, nil
	}))
	if err != nil {
		return nil, err
	}
	return r.Rows, r.Err
}

// Garbage implements metadata.MetaStore.
func (m *Meta) Garbage(ctx context.Context, partition string, olderThan time.Duration) ([]metadata.Ref, error) {
	if olderThan < 0 {
		return nil, fmt.Errorf("%w: negative olderThan %v", backends.ErrInvalid, olderThan)
	}
	empty := false
	if err := m.view(ctx, partition, func(st *rules.Partition) { empty = st.Empty() }); err != nil || empty {
		return nil, err // nothing to abort: no record (which would make a log)
	}
	var out []metadata.Ref
	_, err := m.execAfter(ctx, partition, nil, func(*rules.Partition) ([]record, error) {
		return []record{{id: newID(), data: rules.AbortRecord(olderThan)}}, nil
	}, func(p *part) { out = slices.Clone(p.st.Garbage()) })
	return out, err
}

// Swept implements metadata.MetaStore.
func (m *Meta) Swept(ctx context.Context, partition string, refs []metadata.Ref) error {
	if len(refs) == 0 {
		return m.check(ctx)
	}
	_, err := m.exec(ctx, partition, nil, func(*rules.Partition) ([]record, error) {
		return []record{{id: newID(), data: rules.SweptRecord(refs)}}, nil
	})
	return err
}

// Abandon implements metadata.MetaStore. A ref the log does not know is
// reported with ErrReservationLost: its reservation may have been lost
// with entries a failover dropped, and its index handed out again.
func (m *Meta) Abandon(ctx context.Context, partition string, refs []metadata.Ref) error {
	if len(refs) == 0 {
		return m.check(ctx)
	}
	r, err := one(m.exec(ctx, partition, nil, func(*rules.Partition) ([]record, error) {
		return []record{{id: newID(), data: rules.AbandonRecord(refs)}}, nil
	}))
	if err != nil {
		return err
	}
	if r.Unknown > 0 && !m.sole {
		return fmt.Errorf("%w: partition %q: %d of %d abandoned cells", backends.ErrReservationLost, partition, r.Unknown, len(refs))
	}
	return r.Err
}

// Claim implements metadata.Queue. A Custom claim's pick runs on this
// process's copy of the state, caught up by the previous call, over a
// window of the oldest ready rows; the claim leases the picked units that
// are still ready where its record lands, and picks again, with a window
// four times larger, when it leased too few while more rows were ready.
// A Wait's claim (Hold) that leased nothing after a pick on a copy that
// was behind returns a mark a Wait on which returns at once, so that the
// Wait claims again on the copy caught up rather than pass over a row
// its pick did not see.
func (m *Meta) Claim(ctx context.Context, partition string, req metadata.ClaimRequest, pick metadata.Pick) (metadata.Claimed, error) {
	_, c, err := m.claim(ctx, partition, req, pick, nil)
	return c, err
}

// SettleClaim implements metadata.SettleClaimer: the settle's record goes
// before the claim's, in one append.
func (m *Meta) SettleClaim(ctx context.Context, partition string, s metadata.SettleRequest, req metadata.ClaimRequest, pick metadata.Pick) (metadata.SettleResult, metadata.Claimed, error) {
	if err := s.Check(); err != nil {
		return metadata.SettleResult{}, metadata.Claimed{}, err
	}
	return m.claim(ctx, partition, req, pick, &s)
}

// claim is Claim, after pre (if not nil) in the first append.
func (m *Meta) claim(ctx context.Context, partition string, req metadata.ClaimRequest, pick metadata.Pick, pre *metadata.SettleRequest) (settled metadata.SettleResult, _ metadata.Claimed, _ error) {
	if err := req.Check(); err != nil {
		return settled, metadata.Claimed{}, err
	}
	var settleErr error
	if pre != nil && req.Replaces != "" {
		// The replaced claim may be fulfilled already, answered with no
		// request: settle on its own first.
		res, err := m.Settle(ctx, partition, *pre)
		if err != nil {
			return res, metadata.Claimed{}, err
		}
		settled, pre = res, nil
	}
	a := rules.ClaimArgs{Task: req.Task, Lease: req.Lease, Rows: req.Rows, Min: req.Min,
		MaxDeliveries: req.MaxDeliveries, Batch: req.Batch, Select: req.Select, Floor: req.Floor, Custom: req.Custom,
		Hold: req.Hold, Replaces: req.Replaces}
	if req.Replaces != "" {
		// The standing claim it replaces may be fulfilled already: its
		// lease is the answer, with no request.
		if c, ok := m.take(partition, req.Replaces); ok {
			return settled, c, settleErr
		}
	}
	stale := 0                  // picks made again because the copy was behind
	undone := 0                 // claims whose result the copy lost, handed back and made again
	dropped := 0                // rows dropped by attempts that leased nothing, then made again
	var cleared []*metadata.Row // rows cleared by any attempt (Capacity.ClearAcked)
	for window := 4*req.Rows + 64; ; window *= 4 {
		full, moved := false, false
		var skew time.Duration
		var base, picked, restarts uint64
		var pickMark uint64 // the copy's mark where the pick looked
		own := 1            // this attempt's records
		var pp *part
		rs, err := m.execPart(ctx, partition, nil, true, func(p *part) ([]record, error) {
			pp = p
			st := p.st
			picked, restarts, pickMark = pp.pos.N, pp.restarts, pp.mark()
			a.Token = req.Token
			if a.Token == "" {
				a.Token = metadata.NewLease(req.Holder)
			}
			if a.Custom {
				rows, ds := st.Candidates(pp.serverNow(), req.Task, req.Select, req.Floor, window)
				picked, err := pick(rows, ds)
				if err != nil {
					return nil, err
				}
				if err := metadata.CheckPicked(picked, len(rows)); err != nil {
					return nil, err
				}
				a.Units, a.Drop = indexUnits(rows, picked)
				full = len(rows) == window
			}
			if a.Hold > 0 {
				// Known before the record is sent: any record applied
				// after it may fulfil it. (After the pick, which may
				// fail or panic.)
				pp.waits[a.Token] = true
			}
			q := record{id: newID(), data: rules.ClaimRecord(&a)}
			own = 1
			if pre != nil {
				own = 2
				return []record{{id: newID(), data: rules.SettleRecord(pre)}, q}, nil
			}
			return []record{q}, nil
		}, func(p *part) {
			skew, base = p.skew, p.base
			if pre != nil && pre.Op == metadata.Unwait {
				delete(p.waits, pre.Lease)
				delete(p.fulfilled, pre.Lease)
			}
			// Records came between the copy the pick saw and the claim:
			// the pick may have missed ready rows, or picked taken ones.
			moved = p.pos.N > picked+uint64(own) || p.restarts != restarts
			if moved && a.Custom {
				// Worth another pick only if some row is ready now.
				rows, _ := p.st.Candidates(p.serverNow(), req.Task, req.Select, req.Floor, 1)
				moved = len(rows) > 0
			}
			if req.Replaces != "" {
				// A fulfilment before this claim's record went back
				// undelivered where the record landed, which leased
				// afresh.
				delete(p.fulfilled, req.Replaces)
				delete(p.waits, req.Replaces)
			}
		})
		var r *rules.Result
		if err == nil {
			if len(rs) != own {
				err = fmt.Errorf("replica: %d results of %d records", len(rs), own)
			} else {
				r = rs[own-1]
				if pre != nil {
					settled, settleErr = rs[0].Settled, rs[0].Err
					settled.Until = local(settled.Until, skew)
					pre = nil // applied: later attempts claim alone
				}
			}
		}
		if (err != nil || r.Err != nil || r.Claimed.Waiting == "") && pp != nil {
			pp.mu.Lock()
			delete(pp.waits, a.Token)
			pp.mu.Unlock()
		}
		var past *pastWrite
		if errors.As(err, &past) && a.Batch != nil && a.Batch.Ranks > 1 {
			// A rank's claim cannot be handed back (the other ranks
			// share its batch): its share, if it took one, is found by
			// its token. A settle in its append applied with it, its
			// result lost: sent again (a settle resent by its lease
			// finds its own), for its result.
			if c, ok := m.share(ctx, partition, &a); ok {
				if pre != nil {
					settled, settleErr = m.Settle(ctx, partition, *pre)
				}
				return settled, c, settleErr
			}
		}
		if errors.As(err, &past) && undone < 3 && m.undo(ctx, partition, &a) {
			// What it did is handed back: claim afresh.
			undone++
			window /= 4
			continue
		}
		if err != nil {
			return settled, metadata.Claimed{}, err
		}
		if r.Err != nil {
			return settled, metadata.Claimed{}, r.Err
		}
		c := r.Claimed
		cleared = append(cleared, c.Cleared...)
		if c.Lease == "" && full && window < 1<<24 {
			dropped += c.Dropped
			continue
		}
		if c.Lease == "" && c.Waiting == "" && a.Custom && moved && stale < 3 && req.Replaces == "" {
			// Picked on a copy that was behind (a client's first claim,
			// say); the copy has caught up since: pick again. (Not for a
			// claim replacing a registered one, which may have been
			// fulfilled where this copy cannot see it.)
			stale++
			window /= 4
			dropped += c.Dropped
			continue
		}
		c.Dropped += dropped
		c.Cleared = cleared // every attempt's: their cells are the caller's to delete
		out := localClaimed(c, skew, base)
		if c.Lease == "" && a.Custom && moved {
			// Picked on a copy that was behind, and registered (or
			// replacing a registered claim): what came between may have
			// made rows ready that the pick did not see, and the claim's
			// own mark would let its Wait sleep past them. Its mark is
			// where the pick looked: the Wait returns at once and picks
			// again on the copy caught up.
			out.Mark.Seq = pickMark
		}
		return settled, out, settleErr
	}
}

// Inherit cancels the standing claims of partition's log that no call of
// this process registered (rules.Partition.Unheld): for a server that
// takes the partition over from one that died, whose clients' Waits
// ended with it (they claim afresh), so that no row is leased to a claim
// nobody waits on. It appends nothing when there are none.
func (m *Meta) Inherit(ctx context.Context, partition string) error {
	if err := m.view(ctx, partition, func(*rules.Partition) {}); err != nil {
		return err
	}
	p := m.part(partition)
	_, err := m.exec(ctx, partition, nil, func(st *rules.Partition) ([]record, error) {
		var out []record
		for _, data := range st.Unheld(func(token string) bool { return p.waits[token] }) {
			out = append(out, record{id: newID(), data: data})
		}
		return out, nil
	})
	return err
}

// undo hands back what claim a did where its record landed, its result
// lost to its writer (the copy restarted from a snapshot past it, so the
// state holds its effect): the rows the state shows leased to its token,
// and its standing claim or what that was served, all ready again
// undelivered. Else they would be held by no one until the lease ended,
// and a Wait's standing claim would lease rows committed later to no one.
// It reports whether the claim is undone: never a rank's, whose batch the
// other ranks share.
func (m *Meta) undo(ctx context.Context, partition string, a *rules.ClaimArgs) bool {
	if a.Batch != nil && a.Batch.Ranks > 1 {
		return false
	}
	return m.undoLeased(ctx, partition, a.Task, a.Token) == nil
}

// undoLeased hands back what the claim of task with token did where its
// record landed, its result lost to this process (see undo): the rows the
// state shows leased to the token, and its standing claim or what that
// was served. Unlike a Settle Undo it leaves the token usable: the claim
// is made again under it.
func (m *Meta) undoLeased(ctx context.Context, partition, task, token string) error {
	var rows []uint64
	if err := m.view(ctx, partition, func(st *rules.Partition) { rows = st.LeasedTo(task, token) }); err != nil {
		return err
	}
	_, err := m.Settle(ctx, partition, metadata.SettleRequest{Task: task, Op: metadata.Unwait, Lease: token, Indexes: rows})
	return err
}

// share returns the share of a batch that rank claim a took where its
// record landed, its result lost to its writer (see undo): as the state
// shows it (rules.Partition.Share).
func (m *Meta) share(ctx context.Context, partition string, a *rules.ClaimArgs) (metadata.Claimed, bool) {
	var out metadata.Claimed
	ok := false
	err := m.viewPart(ctx, partition, func(p *part) {
		var c rules.Claimed
		if c, ok = p.st.Share(a.Task, a.Token); ok {
			out = localClaimed(c, p.skew, p.base)
		}
	})
	return out, ok && err == nil
}

// localClaimed is c, a claim's result by the server's clock, in this
// process's time, its mark in this copy's count. c's deliveries are
// converted in place: a claim's result goes to one caller (the claim's,
// or the Wait that takes its registered claim's lease), and the rules
// keep no reference to them.
func localClaimed(c rules.Claimed, skew time.Duration, base uint64) metadata.Claimed {
	c.Mark = metadata.Mark{Seq: base + c.Mark.Seq, Wake: local(c.Mark.Wake, skew), Token: c.Waiting}
	if skew == 0 {
		// (A Sole Meta's: the claim's deliveries are its own already.)
		return c
	}
	c.Until = local(c.Until, skew)
	for i := range c.Deliveries {
		c.Deliveries[i].Until = local(c.Deliveries[i].Until, skew)
		c.Deliveries[i].At = local(c.Deliveries[i].At, skew)
		c.Deliveries[i].Granted = local(c.Deliveries[i].Granted, skew)
	}
	return c
}

// local turns a time of the server into one of this process.
func local(t time.Time, skew time.Duration) time.Time {
	if t.IsZero() {
		return t
	}
	return t.Add(skew)
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
func (m *Meta) Settle(ctx context.Context, partition string, req metadata.SettleRequest) (metadata.SettleResult, error) {
	if err := req.Check(); err != nil {
		return metadata.SettleResult{}, err
	}
	var skew time.Duration
	r, err := one(m.execPart(ctx, partition, nil, true, func(*part) ([]record, error) {
		return []record{{id: newID(), data: rules.SettleRecord(&req)}}, nil
	}, func(p *part) {
		skew = p.skew
		if req.Op == metadata.Unwait || req.Op == metadata.Undo {
			delete(p.waits, req.Lease)
			delete(p.fulfilled, req.Lease)
		}
	}))
	if err != nil {
		return metadata.SettleResult{}, err
	}
	if r.Err != nil {
		return metadata.SettleResult{}, r.Err
	}
	res := r.Settled
	res.Until = local(res.Until, skew)
	return res, nil
}

// Consumption implements metadata.Queue. Leases are reported as of now by
// the server's clock (this process's, less the skew last seen).
func (m *Meta) Consumption(ctx context.Context, partition string, tasks ...string) (map[string][]metadata.Delivery, error) {
	v, err := m.View(ctx, partition, tasks...)
	return v.Tasks, err
}

// View implements metadata.Queue, as Consumption and List.
func (m *Meta) View(ctx context.Context, partition string, tasks ...string) (metadata.View, error) {
	for _, name := range tasks {
		if name == "" {
			return metadata.View{}, fmt.Errorf("%w: consumption: empty task name", backends.ErrInvalid)
		}
	}
	if err := m.check(ctx); err != nil {
		return metadata.View{}, err
	}
	p := m.lockPart(partition)
	defer p.mu.Unlock()
	if err := m.catchUp(ctx, p); err != nil {
		return metadata.View{}, err
	}
	v := p.view(tasks, true, true, true)
	v.Rows = slices.Clone(v.Rows)
	if v.Rows == nil {
		v.Rows = []*metadata.Row{}
	}
	return v, nil
}

// Summarize implements metadata.Summarizer. A summary of counts, by the
// fields its tasks wait for or not, with no Progress (rules.CountsOnly:
// a status) is the state's own (rules.Partition.Summary), from counts it
// keeps: it costs the partition's tasks, leases and sets of fields, not
// its rows. Any other is counted from a view of what it reads, so that
// one of counters alone passes over no row (and is counted under the
// partition's lock; a pass over the rows is made after it, on a copy of
// the list).
func (m *Meta) Summarize(ctx context.Context, partition string, req metadata.SummaryRequest) (metadata.Summary, error) {
	if err := req.Check(); err != nil {
		return metadata.Summary{}, err
	}
	if err := m.check(ctx); err != nil {
		return metadata.Summary{}, err
	}
	p := m.lockPart(partition)
	if err := m.catchUp(ctx, p); err != nil {
		p.mu.Unlock()
		return metadata.Summary{}, err
	}
	now := p.serverNow()
	if rules.CountsOnly(&req) {
		defer p.mu.Unlock()
		return p.countsSummary(now, req), nil
	}
	return metadata.SummaryIndexed(req, func(tag string, tasks []string) float64 { return p.st.Oldest(now, tag, tasks) }, p.st.Committed(),
		func(rows, since, deliveries bool) metadata.View { return p.view(req.Tasks, rows, since, deliveries) }, p.mu.Unlock), nil
}

// countsSummary is the Summary of req, which rules.CountsOnly accepts, as
// of now (by the server's clock), as view's Summary would be: the state's,
// with the partition's mark and times of this process. Called with p.mu
// held.
func (p *part) countsSummary(now int64, req metadata.SummaryRequest) metadata.Summary {
	s := p.st.Summary(now, req)
	s.Mark = metadata.Mark{Seq: p.mark(), Consumed: p.st.Consumed()}
	localSummary(&s, p.skew)
	return s
}

// localSummary turns the times of a rules.Partition.Summary, the
// server's, into times of this process, as view does a View's.
func localSummary(s *metadata.Summary, skew time.Duration) {
	s.OldestRow = local(s.OldestRow, skew)
	for name, ts := range s.Tasks {
		ts.OldestReady = local(ts.OldestReady, skew)
		if ts.LastDead != nil {
			ts.LastDead.At = local(ts.LastDead.At, skew)
		}
		for i := range ts.Leases {
			ts.Leases[i].Until = local(ts.Leases[i].Until, skew)
			ts.Leases[i].Granted = local(ts.Leases[i].Granted, skew)
		}
		for i := range ts.Groups {
			ts.Groups[i].Since = local(ts.Groups[i].Since, skew)
		}
		s.Tasks[name] = ts
	}
}

// view is the partition's view of tasks as of the state applied so far,
// in this process's time: its Since only with since, its Tasks only with
// deliveries. Its Rows are the state's own: read them under p.mu, or
// clone them. Called with p.mu held.
func (p *part) view(tasks []string, rows, since, deliveries bool) metadata.View {
	now := p.serverNow()
	v := metadata.View{Mark: metadata.Mark{Seq: p.mark(), Consumed: p.st.Consumed()}}
	if rows {
		v.Rows = p.st.List()
	}
	if deliveries {
		v.Tasks = p.st.Consumption(now, tasks...)
		for _, ds := range v.Tasks {
			for i := range ds {
				ds[i].Until = local(ds[i].Until, p.skew)
				ds[i].At = local(ds[i].At, p.skew)
				ds[i].Granted = local(ds[i].Granted, p.skew)
			}
		}
	}
	v.Inserted, v.Consumed = p.st.Counts(tasks...)
	if since {
		v.Since = p.st.Since(v.Rows)
		for i := range v.Since {
			v.Since[i] = local(v.Since[i], p.skew)
		}
	}
	v.Capacity, v.Used = p.st.Capacity()
	v.Groups = p.st.GroupWaits(now, tasks...)
	for _, ws := range v.Groups {
		for i := range ws {
			ws[i].Since = local(ws[i].Since, p.skew)
		}
	}
	return v
}

// SetCapacity implements metadata.MetaStore.
func (m *Meta) SetCapacity(ctx context.Context, partition string, c metadata.Capacity) ([]*metadata.Row, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	r, err := one(m.exec(ctx, partition, nil, func(*rules.Partition) ([]record, error) {
		return []record{{id: newID(), data: rules.CapacityRecord(c)}}, nil
	}))
	if err != nil {
		return nil, err
	}
	return r.Rows, r.Err
}

// Reset implements metadata.Queue.
func (m *Meta) Reset(ctx context.Context, partition, task string, indexes []uint64) error {
	if task == "" {
		return fmt.Errorf("%w: reset: empty task name", backends.ErrInvalid)
	}
	if indexes != nil && len(indexes) == 0 {
		return m.check(ctx)
	}
	r, err := one(m.execPart(ctx, partition, nil, true, func(*part) ([]record, error) {
		return []record{{id: newID(), data: rules.ResetRecord(task, indexes)}}, nil
	}, nil))
	if err != nil {
		return err
	}
	return r.Err
}

// Wait implements metadata.Queue. One watcher per partition blocks on
// the log for every Wait of this process, and applies what it reads; it
// ends a second after the last Wait.
func (m *Meta) Wait(ctx context.Context, partition string, mark metadata.Mark) error {
	if err := m.check(ctx); err != nil {
		return err
	}
	p := m.lockPart(partition)
	p.waiters++
	if !m.sole {
		// (A Sole Meta's writes wake its Waits: there are no others.)
		m.watch(p)
	}
	defer func() {
		p.mu.Lock()
		p.waiters--
		p.mu.Unlock()
	}()
	var timer <-chan time.Time
	if !mark.Wake.IsZero() {
		d := mark.Wake.Sub(m.clock())
		if d <= 0 {
			p.mu.Unlock()
			return nil
		}
		t := time.NewTimer(d)
		defer t.Stop()
		timer = t.C
	}
	for {
		_, served := p.fulfilled[mark.Token]
		if p.mark() != mark.Seq || mark.Token != "" && served || mark.Consume && p.st.Consumed() != mark.Consumed {
			p.mu.Unlock()
			return nil
		}
		if p.wake == nil {
			p.wake = make(chan struct{})
		}
		ch := p.wake
		hook.Waiting(partition)
		p.mu.Unlock()
		select {
		case <-ch:
		case <-timer:
			return nil
		case <-m.done:
			return backends.ErrClosed
		case <-ctx.Done():
			return ctx.Err()
		}
		p.mu.Lock()
	}
}

// WaitTake implements metadata.WaitTaker.
func (m *Meta) WaitTake(ctx context.Context, partition string, mark metadata.Mark) (metadata.Claimed, bool, error) {
	if err := m.Wait(ctx, partition, mark); err != nil || mark.Token == "" {
		return metadata.Claimed{}, false, err
	}
	c, ok := m.take(partition, mark.Token)
	return c, ok, nil
}

// take returns the lease the registered claim token was fulfilled with,
// if it was, and forgets the claim.
func (m *Meta) take(partition, token string) (metadata.Claimed, bool) {
	p := m.lockPart(partition)
	defer p.mu.Unlock()
	c, ok := p.fulfilled[token]
	if !ok {
		return metadata.Claimed{}, false
	}
	delete(p.fulfilled, token)
	delete(p.waits, token)
	return localClaimed(c, p.skew, p.base), true
}

// watchRound is how long a watcher's read blocks on the log, and how long
// it outlives the last Wait.
const watchRound = time.Second

// watch starts p's watcher unless it runs. The caller holds p.mu.
func (m *Meta) watch(p *part) {
	if p.watching || m.closed.Load() {
		return
	}
	p.watching = true
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		idle := time.Time{}
		backoff := 10 * time.Millisecond
		p.mu.Lock()
		defer p.mu.Unlock()
		for !m.closed.Load() {
			if p.waiters > 0 {
				idle = time.Time{}
			} else if idle.IsZero() {
				idle = time.Now()
			} else if time.Since(idle) > watchRound {
				break
			}
			from := p.pos
			woke := p.woke
			p.woke = false
			p.mu.Unlock()
			if woke {
				// Let the Waits just woken run before this goroutine
				// sends its next read.
				runtime.Gosched()
			}
			t, err := m.log.Read(m.life, p.name, from, watchRound)
			p.mu.Lock()
			if err == nil {
				_, err = m.applyTail(p, from, &t)
			}
			if err != nil {
				// The server is away: try again, more slowly, until it is
				// back or the Waits end.
				p.mu.Unlock()
				select {
				case <-m.done:
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, time.Second)
				p.mu.Lock()
				continue
			}
			backoff = 10 * time.Millisecond
		}
		p.watching = false
	}()
}

// colocated is a Meta over a backends.LogCells: a metadata.Colocated.
type colocated struct{ *Meta }

var _ metadata.Colocated = colocated{}

// NewStore returns the metadata over log as New does, a metadata.Colocated
// when log is a backends.LogCells.
func NewStore(log backends.Log, data backends.Store, opts ...Option) metadata.MetaStore {
	m := New(log, data, opts...)
	if m.cells != nil {
		return colocated{m}
	}
	return m
}

// WriteCommit implements metadata.Colocated: the cells and the commit's
// record in one request.
func (c colocated) WriteCommit(ctx context.Context, partition string, cells []backends.Cell, updates []metadata.RowUpdate) (metadata.CommitResult, error) {
	if cells == nil {
		cells = []backends.Cell{}
	}
	res, err := c.commit(ctx, partition, cells, updates)
	for i := range cells {
		cells[i].Tag = ""
	}
	return res, err
}

// ReadRows implements metadata.Colocated: plan runs with this process's
// copy of the rows, and the cells are read with the log after it; if the
// log moved any of the rows, plan runs again with them as they are.
func (c colocated) ReadRows(ctx context.Context, partition string, keys []string, plan func(rows []*metadata.Row) ([]backends.ReadCell, error)) ([]*metadata.Row, error) {
	m := c.Meta
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	p := m.lockPart(partition)
	defer p.mu.Unlock()
	rows := p.st.Lookup(keys)
	current := false // whether rows are as the log has them, just read
	for {
		cells, err := plan(rows)
		if err != nil {
			if current {
				return nil, err
			}
			// The copy may be behind (a key another process committed):
			// plan again on the log as it is.
			if err := m.catchUp(ctx, p); err != nil {
				return nil, err
			}
			rows, current = p.st.Lookup(keys), true
			continue
		}
		from := p.pos
		p.mu.Unlock()
		t, err := m.cells.ReadCells(ctx, partition, from, cells)
		p.mu.Lock()
		if err != nil {
			return nil, err
		}
		ok, err := m.applyTail(p, from, &t)
		if err != nil {
			return nil, err
		}
		if !ok {
			if err := m.catchUp(ctx, p); err != nil {
				return nil, err
			}
		}
		now := p.st.Lookup(keys)
		if ok && slices.Equal(now, rows) {
			return rows, nil
		}
		rows, current = now, true
	}
}

// Block implements metadata.Blocker. Its errors never match
// ErrOutcomeUnknown: a Block whose outcome is unknown reserved at most
// indexes nobody uses, which Garbage aborts in time.
func (m *Meta) Block(ctx context.Context, partition string, fields []string, n int) (metadata.IndexBlock, error) {
	if err := metadata.CheckBlock(fields, n); err != nil {
		return metadata.IndexBlock{}, err
	}
	r, err := one(m.exec(ctx, partition, nil, func(*rules.Partition) ([]record, error) {
		return []record{{id: newID(), indexes: uint64(n), data: rules.BlockRecord(fields, n)}}, nil
	}))
	if err != nil {
		if errors.Is(err, backends.ErrOutcomeUnknown) {
			err = errNotApplied(err)
		}
		return metadata.IndexBlock{}, err
	}
	if r.Err != nil {
		return metadata.IndexBlock{}, fmt.Errorf("%w (partition %q)", r.Err, partition)
	}
	return metadata.IndexBlock{Base: r.Base, Token: r.Token}, nil
}

// PutNew implements metadata.Blocker.
func (m *Meta) PutNew(ctx context.Context, partition string, token, base uint64, keys, fields []string, sizes []int64, updates []metadata.RowUpdate) (metadata.CommitResult, error) {
	if err := metadata.CheckSizes(keys, fields, sizes); err != nil {
		return metadata.CommitResult{}, err
	}
	if len(updates) != len(keys) {
		return metadata.CommitResult{}, fmt.Errorf("%w: %d updates for %d keys", backends.ErrInvalid, len(updates), len(keys))
	}
	for i := range updates {
		if updates[i].Key != keys[i] {
			return metadata.CommitResult{}, fmt.Errorf("%w: update %d is of key %q, not %q", backends.ErrInvalid, i, updates[i].Key, keys[i])
		}
	}
	if len(keys) == 0 {
		return metadata.CommitResult{}, m.check(ctx)
	}
	rec, err := rules.PutNewRecord(base, token, fields, sizes, updates)
	if err != nil {
		return metadata.CommitResult{}, err
	}
	var mark uint64 // the partition's mark base, for a FullError's Mark
	r, err := one(m.execAfter(ctx, partition, nil, func(*rules.Partition) ([]record, error) {
		return []record{{id: newID(), data: rec}}, nil
	}, func(p *part) { mark = p.base }))
	if err != nil {
		return metadata.CommitResult{}, err
	}
	var full *metadata.FullError
	if errors.As(r.Err, &full) {
		full.Partition = partition
		full.Mark.Seq += mark
		return metadata.CommitResult{}, full
	}
	if r.Err != nil {
		return metadata.CommitResult{}, fmt.Errorf("%w (partition %q)", r.Err, partition)
	}
	return r.Commit, nil
}

// ReleaseBlock implements metadata.Blocker.
func (m *Meta) ReleaseBlock(ctx context.Context, partition string, b metadata.IndexBlock, written []uint64) error {
	_, err := m.exec(ctx, partition, nil, func(*rules.Partition) ([]record, error) {
		return []record{{id: newID(), data: rules.ReleaseRecord(b.Base, b.Token, written)}}, nil
	})
	return err
}
