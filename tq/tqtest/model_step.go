package tqtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/tqgo/tqgo/tq"
)

// step runs op on the engine and on the model and compares. A step the
// model cannot judge in the state it finds (a lease it never made, in a
// shrunk history) is skipped: noted, and nothing is called.
func (r *runner) step(op *mop) *divergence {
	switch op.kind {
	case "put", "put1", "tags", "badput":
		return r.stepPut(op)
	case "clear":
		return r.stepClear(op)
	case "clearp":
		return r.stepClearPartition(op)
	case "clearf":
		return r.stepClearFields(op)
	case "get":
		return r.stepGet(op)
	case "list":
		return r.stepList(op)
	case "lookup":
		return r.stepLookup(op)
	case "claim", "wait":
		return r.stepClaim(op)
	case "ack", "nack", "extend":
		return r.stepSettle(op)
	case "advance":
		if r.env.Advance == nil || r.m.deadlines()[r.m.now+op.d] {
			op.note = "skipped" // no clock, or a deadline the step would land on
			return nil
		}
		r.env.Advance(op.d)
		r.m.now += op.d
		return nil
	case "reset":
		return r.stepReset(op)
	case "dead":
		return r.stepDead(op)
	case "retry", "drop":
		return r.stepMark(op)
	case "status":
		return r.stepStatus(op)
	case "tstatus":
		return r.stepTaskStatus(op)
	case "stragglers":
		return r.stepStragglers(op)
	case "pace":
		return r.stepPace(op)
	case "insert", "sample":
		return r.stepRatio(op)
	case "version":
		r.versions[op.slot] = op.version
		r.handle(op.slot, "stale", 0).SetVersion(op.version)
		return nil
	case "capacity":
		ctx, cancel := r.ctx()
		defer cancel()
		err := r.clients[op.slot].SetCapacity(ctx, modelPartition, tq.Capacity{Rows: int64(op.n), ClearAcked: op.fields})
		if d := wantErr("SetCapacity", err, "nil"); d != nil {
			return d
		}
		r.m.setCapacity(op.n, op.fields)
		return nil
	case "reopen":
		_ = r.clients[op.slot].Close()
		for id, l := range r.leases {
			if l.slot == op.slot {
				delete(r.leases, id)
			}
		}
		r.handles[op.slot] = map[string]*tq.Task{}
		r.versions[op.slot], r.dropped[op.slot] = 0, 0
		r.clients[op.slot] = r.env.Open(r.t)
		return nil
	}
	panic("tqtest: model step " + op.kind)
}

func diverge(what string, want, got any) *divergence {
	return &divergence{what: what, want: fmt.Sprint(want), got: fmt.Sprint(got)}
}

// errClass names the class of err: the sentinels a caller matches.
func errClassName(err error) string {
	switch {
	case err == nil:
		return "nil"
	case errors.Is(err, tq.ErrInvalid):
		return "ErrInvalid"
	case errors.Is(err, tq.ErrNotFound):
		return "ErrNotFound"
	case errors.Is(err, tq.ErrNotReady):
		return "ErrNotReady"
	case errors.Is(err, tq.ErrLeaseLost):
		return "ErrLeaseLost"
	case errors.Is(err, context.DeadlineExceeded):
		return "context.DeadlineExceeded"
	case errors.Is(err, tq.ErrClosed):
		return "ErrClosed"
	case errors.Is(err, tq.ErrFull):
		return "ErrFull"
	}
	return "other error"
}

// wantErr compares err's class with one of the allowed classes.
func wantErr(what string, err error, allowed ...string) *divergence {
	if slices.Contains(allowed, errClassName(err)) {
		return nil
	}
	return diverge(what+": error", strings.Join(allowed, " or "), fmt.Sprintf("%s (%v)", errClassName(err), err))
}

// observe checks the index the engine reports for the row of key: the
// same for a row all its life, never another row's, and in the order the
// rows were first put.
func (r *runner) observe(what, key string, index uint64) *divergence {
	row := r.m.rows[key]
	if row == nil {
		return diverge(what+": a row the partition does not have", "no row", key)
	}
	if old, ok := r.index[row.id]; ok {
		if old != index {
			return diverge(what+": a row's index changed", old, index)
		}
		return nil
	}
	if other, ok := r.owner[index]; ok {
		return diverge(what+": an index given twice", fmt.Sprintf("a new index for %s", key), fmt.Sprintf("%d, earlier row #%d's", index, other))
	}
	for id, idx := range r.index {
		if (id < row.id) != (idx < index) {
			return diverge(what+": index order is not put order", fmt.Sprintf("row %s (put after row #%d, index %d) after it", key, id, idx), index)
		}
	}
	r.index[row.id], r.owner[index] = index, row.id
	return nil
}

// ---- puts, clears and reads ----

func (r *runner) stepPut(op *mop) *divergence {
	p := op.put
	ctx, cancel := r.ctx()
	defer cancel()
	ctx = tq.WhenFull(ctx, tq.Fail) // a full partition refuses: no step blocks
	c := r.clients[op.slot]
	var err error
	switch op.kind {
	case "put1":
		fields := map[string]any{}
		for _, col := range p.cols {
			fields[col.field] = col.cells[0].in
		}
		var tag tq.Tag
		if tags := p.tqTags(); tags != nil {
			tag = tags[0]
		}
		err = c.Put(ctx, modelPartition, p.keys[0], fields, tag)
	case "tags":
		err = c.BatchPut(ctx, modelPartition, p.keys, nil, p.tqTags())
	default:
		err = c.BatchPut(ctx, modelPartition, p.keys, p.batch(), p.tqTags())
	}
	if p.bad != "" {
		return wantErr(op.kind+" (invalid)", err, "ErrInvalid")
	}
	if r.m.full(p.keys) {
		op.note = "full"
		return wantErr(op.kind+" past the capacity", err, "ErrFull")
	}
	if d := wantErr(op.kind, err, "nil"); d != nil {
		return d
	}
	fields := map[string][]any{}
	for _, col := range p.cols {
		for _, cell := range col.cells {
			fields[col.field] = append(fields[col.field], cell.want)
		}
	}
	// A Put with a nil tag leaves the row's tag alone, as a nil row of
	// BatchPut's tags does.
	made := r.m.put(p.keys, fields, p.tags, p.tags != nil)
	if r.env.Blocks && len(made) > 0 {
		return r.madeBy(ctx, c, made)
	}
	return nil
}

// madeBy takes the indexes of rows a put of c made from the engine (with
// ModelEnv.Blocks): each row's id becomes its index+1, so the model's
// index order is the engine's; the indexes of c's puts must follow the
// order c put them in, and none may be another row's.
func (r *runner) madeBy(ctx context.Context, c *tq.Client, made []*mrow) *divergence {
	keys := make([]string, len(made))
	for i, row := range made {
		keys[i] = row.key
	}
	bm, err := c.Lookup(ctx, modelPartition, keys)
	if d := wantErr("Lookup after a put", err, "nil"); d != nil {
		return d
	}
	for i, row := range made {
		index := bm.Rows[i].Index
		if bm.Rows[i].Key != row.key {
			return diverge("Lookup after a put: key", row.key, bm.Rows[i].Key)
		}
		if other, ok := r.owner[index]; ok {
			return diverge("put: an index given twice", fmt.Sprintf("a new index for %s", row.key), fmt.Sprintf("%d, earlier row #%d's", index, other))
		}
		row.id = int(index) + 1
		for id, by := range r.putBy {
			if by == c && r.index[id] > index {
				return diverge("put: index order is not this client's put order",
					fmt.Sprintf("row %s (put after row #%d, index %d) after it", row.key, id, r.index[id]), index)
			}
		}
		r.index[row.id], r.owner[index] = index, row.id
		r.putBy[row.id] = c
	}
	return nil
}

func (r *runner) stepClear(op *mop) *divergence {
	ctx, cancel := r.ctx()
	defer cancel()
	err := r.clients[op.slot].Clear(ctx, modelPartition, op.keys)
	if d := wantErr("Clear", err, "nil"); d != nil {
		return d
	}
	r.m.clear(op.keys) // unknown keys are ignored
	return nil
}

func (r *runner) stepClearPartition(op *mop) *divergence {
	ctx, cancel := r.ctx()
	defer cancel()
	err := r.clients[op.slot].ClearPartition(ctx, modelPartition)
	if d := wantErr("ClearPartition", err, "nil"); d != nil {
		return d
	}
	r.m.clearPartition()
	return nil
}

func (r *runner) stepClearFields(op *mop) *divergence {
	ctx, cancel := r.ctx()
	defer cancel()
	err := r.clients[op.slot].ClearFields(ctx, modelPartition, op.keys, op.fields...)
	if d := wantErr("ClearFields", err, "nil"); d != nil {
		return d
	}
	r.m.clearFields(op.keys, op.fields)
	return nil
}

// readWant is what a read of fields (every field of the rows when none)
// of keys must give: the error classes allowed, and the fields read.
// Open choice: a read that both names an unknown key and misses a field
// may fail with either error; a read of no named fields whose rows have
// no field at all is not judged (nothing says what it returns).
func (r *runner) readWant(keys, fields []string) (allowed []string, read []string, judge bool) {
	unknown, missing := false, false
	read = fields
	if len(fields) == 0 {
		set := map[string]bool{}
		for _, k := range keys {
			if row := r.m.rows[k]; row != nil {
				for f := range row.fields {
					set[f] = true
				}
			}
		}
		for f := range set {
			read = append(read, f)
		}
		slices.Sort(read)
	}
	for _, k := range keys {
		row := r.m.rows[k]
		if row == nil {
			unknown = true
			continue
		}
		if !hasFields(row, read) {
			missing = true
		}
	}
	switch {
	case unknown && missing:
		return []string{"ErrNotFound", "ErrNotReady"}, nil, true
	case unknown:
		return []string{"ErrNotFound"}, nil, true
	case missing:
		return []string{"ErrNotReady"}, nil, true
	case len(read) == 0:
		return nil, nil, false
	}
	return []string{"nil"}, read, true
}

// sameBatch compares a batch read of keys with the model's rows.
func (r *runner) sameBatch(what string, b tq.Batch, keys, fields []string) *divergence {
	got := b.Fields()
	if !slices.Equal(got, fields) {
		return diverge(what+": fields read", fields, got)
	}
	for _, f := range fields {
		col := b[f]
		if col.Len() != len(keys) {
			return diverge(what+": rows read", len(keys), col.Len())
		}
		for i, k := range keys {
			want := r.m.rows[k].fields[f]
			if g := col.Row(i); !same(want, g) {
				return diverge(what+": a cell's value", fmt.Sprintf("%s.%s = %s", k, f, show(want)), show(g))
			}
		}
	}
	return nil
}

func (r *runner) stepGet(op *mop) *divergence {
	ctx, cancel := r.ctx()
	defer cancel()
	b, err := r.clients[op.slot].BatchGet(ctx, modelPartition, op.keys, op.fields...)
	allowed, read, judge := r.readWant(op.keys, op.fields)
	if !judge {
		op.note = "not judged"
		return nil
	}
	if d := wantErr("BatchGet", err, allowed...); d != nil || err != nil {
		return d
	}
	return r.sameBatch("BatchGet", b, op.keys, read)
}

// sameRows compares rows of List or Lookup with the model's rows of keys:
// keys in order, tags (exact types, -0 kept), each field's dtype and
// shape, and indexes.
func (r *runner) sameRows(what string, got []tq.RowInfo, keys []string) *divergence {
	gotKeys := make([]string, len(got))
	for i, ri := range got {
		gotKeys[i] = ri.Key
	}
	if !slices.Equal(gotKeys, keys) {
		return diverge(what+": keys", keys, gotKeys)
	}
	for _, ri := range got {
		row := r.m.rows[ri.Key]
		if d := r.observe(what, ri.Key, ri.Index); d != nil {
			return d
		}
		if !sameMap(row.tag, map[string]any(ri.Tag)) {
			return diverge(what+": a tag", fmt.Sprintf("%s: %s", ri.Key, show(row.tag)), show(map[string]any(ri.Tag)))
		}
		if len(ri.Fields) != len(row.fields) {
			return diverge(what+": a row's fields", fmt.Sprintf("%s: %d fields", ri.Key, len(row.fields)), len(ri.Fields))
		}
		for f, v := range row.fields {
			fi, ok := ri.Fields[f]
			var wantDT string
			var wantShape []int
			if tw, isT := v.(tensorWant); isT {
				wantDT = tw.dtype
				for _, s := range tw.shape {
					wantShape = append(wantShape, int(s))
				}
			}
			if !ok || fi.DType != wantDT || !slices.Equal(fi.Shape, wantShape) || (wantShape == nil) != (fi.Shape == nil) {
				return diverge(what+": a field's info", fmt.Sprintf("%s.%s: dtype %q shape %v", ri.Key, f, wantDT, wantShape), fmt.Sprintf("present %v, dtype %q shape %v", ok, fi.DType, fi.Shape))
			}
		}
	}
	return nil
}

func (r *runner) stepList(op *mop) *divergence {
	ctx, cancel := r.ctx()
	defer cancel()
	m, err := r.clients[op.slot].List(ctx, modelPartition)
	if d := wantErr("List", err, "nil"); d != nil {
		return d
	}
	var keys []string
	for _, row := range r.m.sorted() {
		keys = append(keys, row.key)
	}
	return r.sameRows("List", m.Rows, keys)
}

func (r *runner) stepLookup(op *mop) *divergence {
	ctx, cancel := r.ctx()
	defer cancel()
	m, err := r.clients[op.slot].Lookup(ctx, modelPartition, op.keys)
	unknown := slices.ContainsFunc(op.keys, func(k string) bool { return r.m.rows[k] == nil })
	if unknown {
		return wantErr("Lookup", err, "ErrNotFound")
	}
	if d := wantErr("Lookup", err, "nil"); d != nil {
		return d
	}
	if d := r.sameRows("Lookup", m.Rows, op.keys); d != nil {
		return d
	}
	if !op.data {
		return nil
	}
	// The other client reads the rows the Lookup named.
	b, err := r.clients[1-op.slot].BatchGetByMeta(ctx, m, op.fields...)
	allowed, read, judge := r.readWant(op.keys, op.fields)
	if !judge {
		op.note = "not judged"
		return nil
	}
	if d := wantErr("BatchGetByMeta", err, allowed...); d != nil || err != nil {
		return d
	}
	return r.sameBatch("BatchGetByMeta", b, op.keys, read)
}

// ---- consumption ----

func keysOf(rows []*mrow) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.key
	}
	return out
}

func idsOf(rows []*mrow) []int {
	out := make([]int, len(rows))
	for i, r := range rows {
		out[i] = r.id
	}
	return out
}

func sortedKeys(keys []string) []string {
	out := slices.Clone(keys)
	slices.Sort(out)
	return out
}

// stepClaim runs a Claim or a Wait. What the model predicts:
//
//   - Sequential (plain, two, maxdel, stale): the oldest ready rows with
//     the task's fields, in index order, n at most, none when fewer than
//     AtLeast (Claim's default 1, Wait's n); a dropping staleness task
//     drops every stale ready row it passes over, even when it leases
//     nothing.
//   - Groups: whole groups of two rows of one uid, in the order of each
//     group's first row; a lease's groups must come in that order, the
//     rows of one group in any order (open choice).
//   - Ranks: a rank with an open batch it has not taken gets its share
//     of it (possibly empty); else its claim selects a new batch
//     (Sequential) and returns its own share. Which rows make up the
//     first share is open (any split of sizes within one of each other:
//     Karmarkar-Karp over unit weights); the other rank's is the rest of
//     the batch, less rows the batch's lease no longer holds. A share's
//     rows may come in any order (open choice).
//   - A Wait leases what a Claim would when enough rows are ready, at
//     once; when not, it ends with its context (the model then gives it
//     a short one: no lease or delay ends meanwhile).
func (r *runner) stepClaim(op *mop) *divergence {
	td := r.tasks[op.task]
	wait := op.kind == "wait"
	h := r.handle(op.slot, op.task, op.rank)
	what := fmt.Sprintf("%s.%s", op.task, map[bool]string{false: "Claim", true: "Wait"}[wait])
	if os.Getenv("TQ_MODEL_LIST_FIRST") == "1" {
		ctx, cancel := r.ctx()
		_, _ = r.clients[op.slot].List(ctx, modelPartition)
		cancel()
	}
	var opts []tq.ClaimOption
	if op.min > 0 {
		opts = append(opts, tq.AtLeast(op.min))
	}
	if op.data {
		opts = append(opts, tq.WithData())
	}
	call := func(ctx context.Context) (*tq.Lease, error) {
		if wait {
			return h.Wait(ctx, op.n, opts...)
		}
		return h.Claim(ctx, op.n, opts...)
	}
	min := op.min
	if min == 0 {
		min = 1 // Claim's and Wait's default alike
	}
	if td.groups && op.n < groupSize {
		ctx, cancel := r.ctx()
		defer cancel()
		_, err := call(ctx)
		return wantErr(what+" of fewer rows than a group", err, "ErrInvalid")
	}

	// What the model predicts.
	var (
		plain    []*mrow   // Sequential: the rows, in order
		units    [][]*mrow // Groups
		partial  []bool    // Groups with a partial deadline: which units are remainders
		drop     []*mrow
		share    *mbatch // Ranks: the open batch whose share the claim takes
		newBatch []*mrow // Ranks: the batch the claim selects
	)
	switch {
	case td.ranks:
		if share = r.m.openBatch(op.rank); share == nil {
			newBatch, _ = r.m.pickSequential(td, 0, op.n, min)
		}
	case td.groups && td.partial:
		units, partial = r.m.pickDeadline(td, op.n, min)
	case td.groups:
		units = r.m.pickGroups(td, op.n, min)
	default:
		plain, drop = r.m.pickSequential(td, r.versions[op.slot], op.n, min)
	}
	leases := len(plain) > 0 || len(units) > 0 || share != nil || len(newBatch) > 0
	if share != nil && op.data {
		for _, id := range share.share[op.rank] {
			if row := r.m.rowByID(id); row != nil && !hasFields(row, td.fields) {
				// A share whose row lost a field of the task since the
				// batch was selected: its read fails and gives the share
				// back, which the model does not follow. Not judged.
				op.note = "skipped"
				return nil
			}
		}
	}

	ctx, cancel := r.ctx()
	defer cancel()
	var waited time.Duration
	if wait && leases {
		// It must return at once: two seconds are generous, and short
		// enough that a Wait that blocks does not make the run slow.
		cancel()
		ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
	}
	if wait && !leases {
		// No deadline may fall within the wait: the model would not know
		// whether the engine saw it pass.
		if waited = r.waitFor(); waited == 0 {
			op.note = "skipped"
			return nil
		}
		cancel()
		ctx, cancel = context.WithTimeout(context.Background(), waited)
		defer cancel()
	}
	l, err := call(ctx)
	if td.groups && r.m.learned[op.task] != gLearned {
		r.m.learned[op.task] = gLearned // the engine knows the task's groups now
	}

	// Drops happen whether or not the claim leases.
	if len(drop) > 0 {
		r.m.dropRows(td, drop)
		r.dropped[op.slot] += int64(len(drop))
	}
	if td.stale {
		if got := h.Stats().Dropped; got != r.dropped[op.slot] {
			return diverge(what+": Stats().Dropped", r.dropped[op.slot], got)
		}
	}
	if wait && !leases {
		op.note = fmt.Sprintf("nothing to lease: ends with its context after %v", waited)
		if r.clock {
			r.m.now += waited
		}
		if d := wantErr(what+" with too few rows ready", err, "context.DeadlineExceeded"); d != nil {
			if err == nil && l != nil {
				d.got += fmt.Sprintf(", leased %q", l.Keys())
			}
			return d
		}
		return nil
	}
	if d := wantErr(what, err, "nil"); d != nil {
		return d
	}
	got := l.Keys()
	deliveries := map[string]int{}
	for i, k := range got {
		if i < len(l.Deliveries) {
			deliveries[k] = l.Deliveries[i]
		}
	}
	if len(l.Deliveries) != len(got) {
		return diverge(what+": Deliveries per row", len(got), len(l.Deliveries))
	}

	var rows []*mrow // the leased rows, as the lease gives them
	token := op.num
	if r.m.holders == nil {
		r.m.holders = map[int]string{}
	}
	r.m.holders[token] = holderName(op.slot)
	switch {
	case !leases:
		if len(got) > 0 {
			return diverge(what+": leased rows when too few are ready", "an empty lease", fmt.Sprintf("%q", got))
		}
		op.note = "empty"
		return nil
	case len(plain) > 0:
		if !slices.Equal(got, keysOf(plain)) {
			return diverge(what+": leased keys (oldest ready first)", fmt.Sprintf("%q", keysOf(plain)), fmt.Sprintf("%q", got))
		}
		rows = plain
		r.m.leaseRows(td, plain, token)
	case len(units) > 0:
		var want []string
		for _, u := range units {
			want = append(want, keysOf(u)...)
		}
		ok := len(got) == len(want)
		at := 0
		for _, u := range units {
			if !ok {
				break
			}
			ok = slices.Equal(sortedKeys(got[at:at+len(u)]), sortedKeys(keysOf(u)))
			at += len(u)
		}
		if !ok {
			return diverge(what+": leased groups", fmt.Sprintf("%q", want), fmt.Sprintf("%q", got))
		}
		var flags []bool // per row, nil when no unit is partial
		if slices.Contains(partial, true) {
			for k, u := range units {
				for range u {
					flags = append(flags, partial[k])
				}
			}
		}
		if !slices.Equal(l.Partial, flags) || (l.Partial == nil) != (flags == nil) {
			return diverge(what+": Partial", fmt.Sprint(flags), fmt.Sprint(l.Partial))
		}
		for _, k := range got {
			rows = append(rows, r.m.rows[k])
		}
		for _, u := range units {
			r.m.leaseRows(td, u, token)
		}
	case len(newBatch) > 0:
		k := len(newBatch)
		inBatch := map[string]*mrow{}
		for _, row := range newBatch {
			inBatch[row.key] = row
		}
		seen := map[string]bool{}
		for _, g := range got {
			if inBatch[g] == nil || seen[g] {
				return diverge(what+": a share of a new batch", fmt.Sprintf("distinct rows of the batch %q", keysOf(newBatch)), fmt.Sprintf("%q", got))
			}
			seen[g] = true
			rows = append(rows, inBatch[g])
		}
		if n := len(got); n != k/2 && n != (k+1)/2 {
			return diverge(what+": the size of a share of a new batch", fmt.Sprintf("%d or %d rows of the batch %q", k/2, (k+1)/2, keysOf(newBatch)), fmt.Sprintf("%q", got))
		}
		r.m.leaseRows(td, newBatch, token)
		b := &mbatch{token: token, rows: idsOf(newBatch), tags: map[int]map[string]any{}, until: r.m.now + r.m.lease}
		for _, row := range newBatch {
			b.tags[row.id] = maps.Clone(row.tag)
		}
		b.share[op.rank] = idsOf(rows)
		for _, row := range newBatch {
			if !seen[row.key] {
				b.share[1-op.rank] = append(b.share[1-op.rank], row.id)
			}
		}
		b.taken[op.rank] = true
		r.m.batches = append(r.m.batches, b)
		op.note = fmt.Sprintf("opens a batch of %q", keysOf(newBatch))
	case share != nil:
		token = share.token
		ids := r.m.takeShare(share, op.rank)
		var want []string
		for _, id := range ids {
			row := r.m.rowByID(id)
			want = append(want, row.key)
			rows = append(rows, row)
		}
		if !slices.Equal(sortedKeys(got), sortedKeys(want)) {
			return diverge(what+": a rank's share of an open batch", fmt.Sprintf("%q (batch of lease#%d)", want, share.token), fmt.Sprintf("%q", got))
		}
		rows = rows[:0]
		for _, k := range got {
			rows = append(rows, r.m.rows[k])
		}
		op.note = fmt.Sprintf("takes its share of the batch of lease#%d", share.token)
	}
	// Deliveries, indexes, tags and data of the leased rows.
	for i, row := range rows {
		rec := r.m.rec(td.name, row.id)
		if deliveries[row.key] != rec.deliveries {
			return diverge(what+": Deliveries", fmt.Sprintf("%s: %d", row.key, rec.deliveries), deliveries[row.key])
		}
		ri := l.Meta.Rows[i]
		if d := r.observe(what, ri.Key, ri.Index); d != nil {
			return d
		}
		if !sameMap(row.tag, map[string]any(ri.Tag)) && (share == nil || !sameMap(share.tags[row.id], map[string]any(ri.Tag))) {
			return diverge(what+": a leased row's tag", fmt.Sprintf("%s: %s", row.key, show(row.tag)), show(map[string]any(ri.Tag)))
		}
	}
	if op.data && len(rows) > 0 {
		if d := r.sameBatch(what+" WithData", l.Data, got, td.fields); d != nil {
			return d
		}
	}
	if len(rows) > 0 {
		ml := &mlease{id: op.num, slot: op.slot, task: op.task, rank: op.rank, token: token, l: l}
		for _, row := range rows {
			ml.rows = append(ml.rows, leaseRow{key: row.key, id: row.id})
		}
		r.leases[op.num] = ml
		r.leaseIDs = append(r.leaseIDs, op.num)
		if op.note == "" {
			op.note = fmt.Sprintf("leases %q", got)
		} else {
			op.note += fmt.Sprintf(", leases %q", got)
		}
		if l.Partial != nil {
			op.note += fmt.Sprintf(" partial %v", l.Partial)
		}
	} else if op.note == "" {
		op.note = "empty"
	}
	return nil
}

// lostKeys compares a settle's error with the rows the model says are
// lost (and those it may call lost or not).
func lostKeys(what, opName string, err error, lost, amb []string) *divergence {
	if err == nil {
		if len(lost) > 0 {
			return diverge(what+": rows not held", fmt.Sprintf("LeaseLostError %q", sortedKeys(lost)), "nil")
		}
		return nil
	}
	var le *tq.LeaseLostError
	if !errors.As(err, &le) || !errors.Is(err, tq.ErrLeaseLost) {
		want := "nil"
		if len(lost) > 0 {
			want = fmt.Sprintf("LeaseLostError %q", sortedKeys(lost))
		}
		return diverge(what+": error", want, fmt.Sprintf("%s (%v)", errClassName(err), err))
	}
	got := sortedKeys(le.Keys)
	for _, k := range lost {
		if !slices.Contains(got, k) {
			return diverge(what+": rows not held", fmt.Sprintf("LeaseLostError %q", sortedKeys(lost)), fmt.Sprintf("%q", got))
		}
	}
	for _, k := range got {
		if !slices.Contains(lost, k) && !slices.Contains(amb, k) {
			return diverge(what+": rows not held", fmt.Sprintf("LeaseLostError %q", sortedKeys(lost)), fmt.Sprintf("%q", got))
		}
	}
	if le.Op != opName {
		return diverge(what+": LeaseLostError.Op", opName, le.Op)
	}
	return nil
}

// stepSettle runs an Ack, Nack or Extend of a lease (every row, or some
// keys; a key not in the lease fails with ErrInvalid, settling nothing).
func (r *runner) stepSettle(op *mop) *divergence {
	ml := r.leases[op.lease]
	if ml == nil {
		op.note = "skipped"
		return nil
	}
	what := fmt.Sprintf("%s lease.%s", ml.task, op.kind)
	var keys []string
	var ids []int
	foreign := false
	if op.all {
		for _, lr := range ml.rows {
			keys = append(keys, lr.key)
			ids = append(ids, lr.id)
		}
	} else {
		for _, k := range op.keys {
			i := slices.IndexFunc(ml.rows, func(lr leaseRow) bool { return lr.key == k })
			if i < 0 {
				foreign = true
				continue
			}
			keys = append(keys, k)
			ids = append(ids, ml.rows[i].id)
		}
	}
	if !foreign {
		switch op.kind {
		case "extend":
			// A lease of a batch that closed with none of its leases
			// running would run again: whether the batch is then open
			// depends on when the engine noticed it closed, which the
			// contract leaves open.
			if ml.task == "rk" && r.m.idle[ml.token] {
				op.note = "skipped"
				return nil
			}
		case "nack":
			// A nack sent again of a row this lease returned changes
			// nothing, or applies again: left open, so histories send
			// one only where both are the same.
			for _, id := range ids {
				rec := r.m.rec(ml.task, id)
				if rec != nil && rec.state == mReady && rec.token == ml.token && (op.d > 0 || rec.until > r.m.now) {
					op.note = "skipped"
					return nil
				}
			}
		}
	}
	ctx, cancel := r.ctx()
	defer cancel()
	var callKeys []string
	if !op.all {
		callKeys = op.keys
	}
	var err error
	switch op.kind {
	case "ack":
		err = ml.l.Ack(ctx, callKeys...)
	case "nack":
		err = ml.l.Nack(ctx, op.d, callKeys...)
	case "extend":
		err = ml.l.Extend(ctx, op.d, callKeys...)
	}
	if foreign {
		return wantErr(what+" of a key not in the lease", err, "ErrInvalid")
	}
	lost, amb := r.m.settle(ml.task, op.kind, ml.token, ids, op.d)
	lostK := make([]string, len(lost))
	for i, p := range lost {
		lostK[i] = keys[p]
	}
	ambK := make([]string, len(amb))
	for i, p := range amb {
		ambK[i] = keys[p]
	}
	if len(lostK) > 0 {
		op.note = fmt.Sprintf("lost %q", lostK)
	}
	return lostKeys(what, op.kind, err, lostK, ambK)
}

func (r *runner) stepReset(op *mop) *divergence {
	ctx, cancel := r.ctx()
	defer cancel()
	err := r.clients[op.slot].ResetConsumption(ctx, modelPartition, op.task, op.keys...)
	if op.all {
		if d := wantErr("ResetConsumption", err, "nil"); d != nil {
			return d
		}
		r.m.reset(op.task, nil)
		return nil
	}
	var ids []int
	for _, k := range op.keys {
		row := r.m.rows[k]
		if row == nil {
			return wantErr("ResetConsumption of an unknown key", err, "ErrNotFound")
		}
		ids = append(ids, row.id)
	}
	if d := wantErr("ResetConsumption", err, "nil"); d != nil {
		return d
	}
	r.m.reset(op.task, ids)
	return nil
}

func (r *runner) stepDead(op *mop) *divergence {
	ctx, cancel := r.ctx()
	defer cancel()
	dead, err := r.handle(op.slot, op.task, op.rank).Dead(ctx)
	if d := wantErr(op.task+".Dead", err, "nil"); d != nil {
		return d
	}
	var want, got []string
	for _, row := range r.m.sorted() {
		rec := r.m.rec(op.task, row.id)
		if st, _ := r.m.seen(rec); st == mDead {
			want = append(want, fmt.Sprintf("%s/%d", row.key, rec.deliveries))
		}
	}
	for _, dr := range dead {
		got = append(got, fmt.Sprintf("%s/%d", dr.Key, dr.Deliveries))
	}
	if !slices.Equal(want, got) {
		return diverge(op.task+".Dead: dead rows (key/deliveries, by index)", want, got)
	}
	for _, dr := range dead {
		if d := r.observe(op.task+".Dead", dr.Key, dr.Index); d != nil {
			return d
		}
	}
	return nil
}

// stepMark runs Retry or Drop of keys: an unknown key fails with
// ErrNotFound, changing nothing; rows not in the state the op needs
// (dead; ready or dead) are named by a LeaseLostError, the others done.
func (r *runner) stepMark(op *mop) *divergence {
	ctx, cancel := r.ctx()
	defer cancel()
	h := r.handle(op.slot, op.task, op.rank)
	var err error
	if op.kind == "retry" {
		err = h.Retry(ctx, op.keys...)
	} else {
		err = h.Drop(ctx, op.keys...)
	}
	what := op.task + "." + map[string]string{"retry": "Retry", "drop": "Drop"}[op.kind]
	var rows []*mrow
	for _, k := range op.keys {
		row := r.m.rows[k]
		if row == nil {
			return wantErr(what+" of an unknown key", err, "ErrNotFound")
		}
		rows = append(rows, row)
	}
	td := r.tasks[op.task]
	if op.kind == "retry" {
		lost := r.m.retry(op.task, idsOf(rows))
		var lostK []string
		for _, p := range lost {
			lostK = append(lostK, op.keys[p])
		}
		return lostKeys(what, "retry", err, lostK, nil)
	}
	var lostK, ambK []string
	var drop []*mrow
	for _, row := range rows {
		ok, amb := r.m.dropState(td, row)
		switch {
		case amb:
			ambK = append(ambK, row.key)
		case ok:
			drop = append(drop, row)
		default:
			lostK = append(lostK, row.key)
		}
	}
	if d := lostKeys(what, "drop", err, lostK, ambK); d != nil {
		return d
	}
	// A waiting row the error does not name was dropped.
	var named []string
	var le *tq.LeaseLostError
	if errors.As(err, &le) {
		named = le.Keys
	}
	for _, k := range ambK {
		if !slices.Contains(named, k) {
			drop = append(drop, r.m.rows[k])
		}
	}
	r.m.dropRows(td, drop)
	return nil
}

// statusOf counts td's rows by state as Task.Status does (Ready and
// Waiting by the task's fields), or as Client.Status does (fields nil:
// every ready row is Ready).
func (r *runner) statusOf(task string, fields []string) tq.TaskStatus {
	var ts tq.TaskStatus
	leases := map[int]*tq.LeaseStatus{}
	var tokens []int
	for _, row := range r.m.sorted() {
		rec := r.m.rec(task, row.id)
		st, _ := r.m.seen(rec)
		switch st {
		case mReady:
			if hasFields(row, fields) {
				ts.Ready++
			} else {
				ts.Waiting++
			}
			if rec != nil && rec.deliveries > 0 {
				ts.Redelivered++
			}
		case mLeased:
			ts.Leased++
			if rec.deliveries > 1 {
				ts.Redelivered++
			}
			l := leases[rec.token]
			if l == nil {
				l = &tq.LeaseStatus{Holder: r.m.holders[rec.token]}
				leases[rec.token] = l
				tokens = append(tokens, rec.token)
			}
			l.Rows++
			l.Deliveries = max(l.Deliveries, rec.deliveries)
		case mAcked:
			ts.Acked++
		case mDead:
			ts.Dead++
		case mDropped:
			ts.Dropped++
		}
	}
	for _, tok := range tokens {
		ts.Leases = append(ts.Leases, *leases[tok])
	}
	return sameLeaseOrder(ts)
}

// sameLeaseOrder is ts with its Leases' Until and Granted cleared (the
// model keeps no wall clock) and the leases in one order, for comparing.
// An engine's lease with no Granted, or one after its Until, keeps a
// time: it shows as a divergence.
func sameLeaseOrder(ts tq.TaskStatus) tq.TaskStatus {
	ls := slices.Clone(ts.Leases)
	for i := range ls {
		switch {
		case ls[i].Until.IsZero(): // the model's: no clock
		case !ls[i].Granted.IsZero() && !ls[i].Granted.After(ls[i].Until):
			ls[i].Granted = time.Time{}
		case ls[i].Granted.IsZero():
			ls[i].Granted = time.Unix(0, 0) // none: not the model's zero
		}
		ls[i].Until = time.Time{}
		ls[i].ID = "" // a digest of a token the model does not know
	}
	slices.SortFunc(ls, func(a, b tq.LeaseStatus) int {
		return cmp.Or(strings.Compare(a.Holder, b.Holder), a.Rows-b.Rows, a.Deliveries-b.Deliveries)
	})
	ts.Leases = ls
	// Waiting groups are the conformance suite's (GroupDeadline cases):
	// the model keeps no group index.
	ts.Groups = nil
	// Times and counts of the past the model does not keep: when rows
	// became ready, and the rows consumed ever (cleared ones included).
	ts.OldestReady, ts.Consumed = time.Time{}, 0
	return ts
}

// sameStatus compares an engine's status a with the model's b. Why rows
// died the model does not keep: a's must have a last dead row exactly
// when it has a dead row, and at most Dead rows dead of their lease's
// end; then both are left out.
func sameStatus(a, b tq.TaskStatus) bool {
	if (a.Dead > 0) != (a.LastDead != nil) || a.DeadLeaseEnded < 0 || a.DeadLeaseEnded > a.Dead ||
		a.LastDead != nil && a.LastDead.Deliveries < 1 {
		return false
	}
	a.LastDead, a.DeadLeaseEnded, b.LastDead, b.DeadLeaseEnded = nil, 0, nil, 0
	a, b = sameLeaseOrder(a), sameLeaseOrder(b)
	return fmt.Sprintf("%+v", a) == fmt.Sprintf("%+v", b)
}

// stepStatus compares Client.Status. Open choice: a task whose every row
// is ready and undelivered (never claimed, reset, retried) may be listed
// or not; one with any other state must be.
func (r *runner) stepStatus(op *mop) *divergence {
	ctx, cancel := r.ctx()
	defer cancel()
	st, err := r.clients[op.slot].Status(ctx, modelPartition)
	if d := wantErr("Status", err, "nil"); d != nil {
		return d
	}
	rows := r.m.sorted()
	if st.Rows != len(rows) {
		return diverge("Status: Rows", len(rows), st.Rows)
	}
	fields := map[string]int{}
	for _, row := range rows {
		for f := range row.fields {
			fields[f]++
		}
	}
	if fmt.Sprint(fields) != fmt.Sprint(st.Fields) {
		return diverge("Status: Fields", fields, st.Fields)
	}
	for name := range r.tasks {
		ts, listed := st.Tasks[name]
		if !listed {
			if r.m.stateful(name) {
				return diverge("Status: a task with state is not listed", fmt.Sprintf("%s: %+v", name, r.statusOf(name, nil)), "not listed")
			}
			if td := r.tasks[name]; td.groups && r.m.learned[name] == gLearned && len(r.m.waits(td)) > 0 {
				return diverge("Status: a group task with waiting groups is not listed", fmt.Sprintf("%s: %+v", name, r.m.waits(td)), "not listed")
			}
			continue
		}
		if want := r.statusOf(name, nil); !sameStatus(ts, want) {
			return diverge("Status: a task's counts", fmt.Sprintf("%s: %+v", name, want), fmt.Sprintf("%+v", ts))
		}
		if d := r.checkWaits("Status of "+name, name, ts.Groups); d != nil {
			return d
		}
	}
	for name := range st.Tasks {
		if _, ok := r.tasks[name]; !ok {
			return diverge("Status: a task never used", "not listed", name)
		}
	}
	return nil
}

func (r *runner) stepTaskStatus(op *mop) *divergence {
	ctx, cancel := r.ctx()
	defer cancel()
	ts, err := r.handle(op.slot, op.task, op.rank).Status(ctx)
	if d := wantErr(op.task+".Status", err, "nil"); d != nil {
		return d
	}
	if want := r.statusOf(op.task, r.tasks[op.task].fields); !sameStatus(ts, want) {
		return diverge(op.task+".Status: counts", fmt.Sprintf("%+v", want), fmt.Sprintf("%+v", ts))
	}
	return r.checkWaits(op.task+".Status", op.task, ts.Groups)
}
