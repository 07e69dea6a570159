package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
)

// Meta is the metadata of a queue kept in Redis, so that processes on many
// machines share one queue. It has exactly the semantics of
// backends/memory's MetaStore and is safe for concurrent use, also by many
// processes.
//
// Each partition's metadata is a log of batch records in Redis (see
// scripts.go), and each Meta keeps a view of the partitions it uses,
// rebuilt by replaying the log (see view.go). A write computes its
// outcome against the view and appends its record with a script that
// checks, atomically, that the log is still as the view has it; if
// another writer came first, the script replies with the records the view
// lacks, and the write computes again. A read fetches the records its
// view lacks (none, mostly) and answers from the view. So a put of 1024
// rows costs the server two appends of one string each, where per-row
// entries cost it 0.25-0.3 ms per write (see scripts.go).
type Meta struct {
	s      *Store
	closed atomic.Bool

	mu    sync.Mutex // guards views and tick
	views map[string]*view
	tick  uint64

	q queueState // consumption caches and Wait's watchers (queue.go)
}

// maxViews bounds the partitions a Meta keeps views of; the least recently
// used goes first (and is read again from its log when used again).
const maxViews = 256

// compactAt is the log length from which a writer replaces the log with a
// snapshot of its view, so that logs of long-lived partitions (many small
// writes) stay short to replay. Tests lower it.
var compactAt int64 = 256

// maxWriteAttempts bounds how often a write computes again because other
// writers of the partition kept coming first.
const maxWriteAttempts = 64

var _ backends.MetaStore = (*Meta)(nil)

func newMeta(s *Store) *Meta { return &Meta{s: s, views: map[string]*view{}} }

// Close closes the metadata side. Later calls return backends.ErrClosed.
func (m *Meta) Close() error {
	if m.closed.Swap(true) {
		return nil
	}
	m.closeWaits()
	return m.s.release()
}

func (m *Meta) check(ctx context.Context) error {
	if m.closed.Load() {
		return backends.ErrClosed
	}
	return ctx.Err()
}

// view returns the partition's view, creating an empty one (which
// assumes no log: a first write into a fresh partition needs no read).
func (m *Meta) view(partition string) *view {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tick++
	v := m.views[partition]
	if v == nil {
		if len(m.views) >= maxViews {
			var oldest string
			var at uint64
			for name, x := range m.views {
				if oldest == "" || x.used < at {
					oldest, at = name, x.used
				}
			}
			delete(m.views, oldest)
		}
		v = newView()
		m.views[partition] = v
	}
	v.used = m.tick
	return v
}

// partKeys are the key names of one partition (see scripts.go).
type partKeys struct {
	l, e, h, n, x string
}

func (m *Meta) keys(partition string) partKeys {
	base := m.s.partBase(partition)
	return partKeys{l: base + ":l", e: base + ":e", h: base + ":h", n: base + ":n", x: base + ":x"}
}

func (m *Meta) counterKeys() (next, parts string) { return m.s.counterKeys() }

// newEpoch is a log's epoch: random, so that an epoch is never seen twice,
// also across processes and partitions recreated after a delete.
func newEpoch() string {
	return strconv.FormatUint(rand.Uint64(), 36) + strconv.FormatUint(rand.Uint64(), 36)
}

// change is what a write computed against a view: the record to append
// (empty for none: the write only checks that the view was current; else
// built with an id slot, see record.go), the indexes a Prepare draws, the
// change in committed rows, and how to apply it to the view (with the
// base of the drawn indexes).
type change struct {
	record  []byte
	drop    bool // the change empties the partition: delete its log
	need    int64
	delta   int64
	age     int64 // an abort's olderThan, microseconds
	install func(base uint64, stamp int64)
	// cells are data keys the server must hold for the record to be
	// appended (a commit's receipts, see receipts.go).
	cells []string
	// unqueue is, for a Delete, the committed indexes it removes,
	// space-separated: the append script removes them from every task's
	// consumption (see unqueueLua).
	unqueue string
}

// pos is where a view was when a write was computed against it.
type pos struct {
	epoch string
	n     int64
	head  string
	era   uint64
}

// write runs compute against the partition's view and appends its record,
// computing again after each catch-up until the log accepts it. compute
// runs with the view locked; it may return backends.ErrConflict, which
// write returns only once the server confirmed the view it came from.
// It returns the base of the indexes drawn.
func (m *Meta) write(ctx context.Context, op, partition string, compute func(v *view) (change, error)) (uint64, error) {
	return m.writeVia(ctx, op, partition, compute, nil)
}

// appendRunner runs appendScript with keys and args; first, when not nil,
// runs the first attempt of writeVia whose record was computed to apply
// (a commit sent with its data).
type appendRunner func(ctx context.Context, keys []string, args ...any) ([]any, error)

// writeVia is write with the script of the first attempt that computed a
// record run by first.
//
// Every attempt of one write carries the same id in its record. The log
// accepts a record only at the position the attempt was computed for, so
// at most one attempt applies, and a resent attempt (go-redis resends a
// command whose reply it lost) finds its own record in the reply and
// counts as applied. An attempt that fails without a reply is settled
// (see settle) before writeVia returns: only when that fails too, or
// finds the log replaced since the attempt was computed (so that the
// write's record may be gone although the write applied), is the error
// one of unknown outcome.
func (m *Meta) writeVia(ctx context.Context, op, partition string, compute func(v *view) (change, error), first appendRunner) (uint64, error) {
	pk := m.keys(partition)
	inline := !m.s.cluster
	skeys := []string{pk.l, pk.e, pk.h, pk.n, pk.x}
	inlineArg := "0"
	if inline {
		next, parts := m.counterKeys()
		skeys = append(skeys, next, parts)
		inlineArg = "1"
	}
	id := newID()
	v := m.view(partition)
	var rangeBase, rangeLen int64 // indexes reserved on a Cluster
	for attempt := 0; ; attempt++ {
		v.mu.Lock()
		at := pos{epoch: v.epoch, n: v.n, head: v.head, era: v.era}
		ch, cerr := compute(v)
		v.mu.Unlock()
		if cerr != nil && !errors.Is(cerr, backends.ErrConflict) {
			return 0, cerr
		}
		if cerr != nil {
			ch = change{} // confirm the view before reporting the conflict
		}
		base := rangeBase
		if !inline && ch.need > rangeLen {
			var err error
			if base, err = m.alloc(ctx, partition, ch.need); err != nil {
				return 0, err
			}
			rangeBase, rangeLen = base, ch.need
		}
		m.s.computed()
		newE := ""
		if at.epoch == "" || (len(ch.record) > 0 && ch.record[0] == recSnapshot) {
			newE = newEpoch()
		}
		run := m.runAppend
		// A Prepare waits too: indexes a failover could hand out again
		// would let a stale put's cells, written or rolled back by
		// storage key, hit another row's.
		replicated := m.s.opts.replicas > 0 && op != "compact"
		if replicated {
			run = m.runAppendReplicated
		}
		// first sends the record's cells with it: only with a record
		// computed to apply, so that a commit that conflicts (its
		// reservation lost, say) never writes them.
		useFirst := first != nil && cerr == nil
		if useFirst {
			run, first = first, nil
		}
		drop := "0"
		if ch.drop {
			drop = "1"
		}
		if len(ch.record) > 0 {
			setID(ch.record, id)
		}
		keys, args := skeys, []any{at.epoch, at.n, at.head, newE,
			unsafe.String(unsafe.SliceData(ch.record), len(ch.record)), id, ch.need, base, ch.delta, partition, drop, inlineArg, "0", ch.age}
		cells := 0
		if len(ch.cells) > 0 && inline && !useFirst {
			keys = append(slices.Clip(skeys), ch.cells...)
			cells = len(ch.cells)
		}
		args = append(args, cells, ch.unqueue)
		reply, err := run(ctx, keys, args...)
		var cause error // the failure a settled reply answers
		if err != nil {
			var short *notReplicated
			switch {
			case errors.As(err, &short) && op == "prepare":
				return 0, m.s.wrap(ctx, op, err) // its rows stay invisible: nothing to be unsure of
			case errors.As(err, &short):
				return 0, &unknownOutcome{m.s.wrap(ctx, op, err)}
			case len(ch.record) == 0 && !ch.drop:
				return 0, m.s.wrap(ctx, op, err) // a check only: nothing to apply
			}
			cause = err
			if reply, err = m.settle(partition, at, id, cause); err != nil {
				if op == "prepare" {
					return 0, m.s.wrap(ctx, op, err) // reserved rows, if any, stay invisible
				}
				return 0, &unknownOutcome{m.s.wrap(ctx, op, err)}
			}
		}
		status, ok := replyString(reply, 0)
		if !ok {
			return 0, m.s.wrap(ctx, op, fmt.Errorf("%w: append replied %v", ErrCorrupt, reply))
		}
		switch status {
		case "ok":
			if len(reply) < 5 {
				return 0, m.s.wrap(ctx, op, fmt.Errorf("%w: append replied %v", ErrCorrupt, reply))
			}
			cur, _ := replyString(reply, 1)
			head, _ := replyString(reply, 3)
			b, ok := reply[2].(int64)
			stamp, ok2 := reply[4].(int64)
			if !ok || !ok2 || b < 0 {
				return 0, m.s.wrap(ctx, op, fmt.Errorf("%w: append replied %v", ErrCorrupt, reply))
			}
			if cerr != nil {
				return 0, cerr
			}
			v.mu.Lock()
			if v.epoch == at.epoch && v.n == at.n && v.era == at.era && v.head == at.head {
				// Nobody moved the view since compute: apply the change
				// (else a catch-up that fetched the record applied it).
				switch {
				case ch.drop:
					v.reset("")
				case len(ch.record) > 0:
					ch.install(uint64(b), stamp)
					v.epoch, v.n, v.head = cur, at.n+1, head
					if ch.record[0] == recSnapshot {
						v.n = 1
					}
					v.pass()
				}
			}
			long := v.n >= compactAt && v.epoch == cur
			v.mu.Unlock()
			if long {
				m.compact(ctx, partition)
			}
			return uint64(b), nil
		case "dropped":
			// This write deleted the log (a resent drop, or one settled).
			v.mu.Lock()
			if v.epoch == at.epoch && v.n == at.n && v.era == at.era {
				v.reset("")
			}
			v.mu.Unlock()
			if replicated {
				return 0, m.unacknowledged(ctx, op)
			}
			return 0, nil
		case "fenced":
			return 0, m.s.wrap(ctx, op, notApplied(cause)) // and never will
		case "nodata":
			// The server lacks cells the record needs: nothing applied.
			return 0, m.s.wrap(ctx, op, fmt.Errorf("%w: partition %q", ErrCellsMissing, partition))
		case "stale", "moved":
			if len(reply) < 5 {
				return 0, m.s.wrap(ctx, op, fmt.Errorf("%w: append replied %v", ErrCorrupt, reply))
			}
			if own := ownRecord(reply[4], id); own != "" {
				// An attempt of this write applied (sent twice, or its
				// reply lost): its record stands where it was computed.
				var b uint64
				if own[0] == recPrepare {
					var err error
					if b, _, _, _, err = readPrepare(unsafeBytes(own)); err != nil {
						return 0, m.s.wrap(ctx, op, fmt.Errorf("%w: %v", ErrCorrupt, err))
					}
				}
				_, _ = m.catchUp(v, at.era, at.n, reply[1:]) // replays it; a failure leaves the view to be read again
				if replicated {
					return 0, m.unacknowledged(ctx, op)
				}
				return b, nil
			}
			// Whether the view caught up or moved on meanwhile, the next
			// attempt computes against what it holds then.
			if _, err := m.catchUp(v, at.era, at.n, reply[1:]); err != nil {
				return 0, m.s.wrap(ctx, op, err)
			}
			if status == "moved" {
				// The log moved past where the write could apply. The
				// records from there on tell whether it applied only if
				// they are that log's: a log replaced meanwhile (a
				// compaction's snapshot, a delete and a new log) may hold
				// the write's effect but not its record. A log of the same
				// epoch that is shorter (truncated, a replica promoted)
				// lost the write if it ever applied: it is absent. A write
				// computed against a view to be read again applies to no
				// log, and a Prepare that may have applied only reserved
				// rows, which stay invisible.
				if epoch, _ := replyString(reply, 1); op != "prepare" && epoch != at.epoch && at.epoch != badEpoch {
					return 0, &unknownOutcome{m.s.wrap(ctx, op, fmt.Errorf("%w; the log was replaced before the write could be settled", cause))}
				}
				return 0, m.s.wrap(ctx, op, notApplied(cause))
			}
			if attempt+1 >= maxWriteAttempts {
				return 0, m.s.wrap(ctx, op, fmt.Errorf("%w: %d attempts on partition %q", ErrContention, maxWriteAttempts, partition))
			}
			if attempt > 0 {
				// Someone else keeps coming first: step aside for a moment.
				if err := sleepCtx(ctx, time.Duration(rand.Int64N(int64(attempt)*int64(200*time.Microsecond)))); err != nil {
					return 0, err
				}
			}
		default:
			return 0, m.s.wrap(ctx, op, fmt.Errorf("%w: append replied %v", ErrCorrupt, reply))
		}
	}
}

// ownRecord returns the record of recs (a reply's list of records) that
// carries the write id, or "".
func ownRecord(recs any, id string) string {
	list, _ := recs.([]any)
	for _, r := range list {
		if s, ok := r.(string); ok && len(s) >= bodyAt && s[0] != recFence && s[1:bodyAt] == id {
			return s
		}
	}
	return ""
}

// notApplied is the error of a write whose failure without a reply (cause)
// the settle found did not apply: no longer a lost reply of unknown
// outcome, but its cause.
func notApplied(cause error) error {
	return fmt.Errorf("%w (settled: the write did not apply)", cause)
}

// settleTimeout bounds settle, which runs even when the caller's context
// is done: a write must not be left unsettled for that.
const settleTimeout = 10 * time.Second

// settle finds out what became of a write computed at at, with id, whose
// append failed without a reply (cause): fenceScript either finds the
// write's record or makes sure it can never be appended. It returns the
// script's reply, or an error (wrapping cause) when the server cannot be
// asked.
func (m *Meta) settle(partition string, at pos, id string, cause error) ([]any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	pk := m.keys(partition)
	reply, err := fenceScript.Run(ctx, m.s.client, []string{pk.l, pk.e, pk.h, pk.x},
		at.epoch, at.n, at.head, id, newID(), newEpoch()).Slice()
	if err != nil {
		return nil, fmt.Errorf("%w; settling its outcome failed: %w", cause, err)
	}
	return reply, nil
}

// unacknowledged is the error of a write with WithReplicas that applied
// on an earlier send (go-redis resent the script, or settle found its
// record), not on the send this call saw acknowledged: that send wrote
// nothing, so its WAIT, which counts the replicas that have the
// connection's own writes, says nothing of the write. It matches
// ErrNotReplicated and, but for a Prepare's, backends.ErrOutcomeUnknown.
func (m *Meta) unacknowledged(ctx context.Context, op string) error {
	err := m.s.wrap(ctx, op, &notReplicated{want: m.s.opts.replicas, err: errAckLost})
	if op == "prepare" {
		return err // its rows stay invisible
	}
	return &unknownOutcome{err}
}

// runAppend runs appendScript through the client.
func (m *Meta) runAppend(ctx context.Context, keys []string, args ...any) ([]any, error) {
	return appendScript.Run(ctx, m.s.client, keys, args...).Slice()
}

// runAppendReplicated runs appendScript and then WAIT on the same
// connection (WithReplicas): WAIT counts the replicas that acknowledged
// every write the connection made, and since replication is one ordered
// stream, a commit acknowledged carries the cells written before it. An
// append that applied with too few acknowledgements returns a
// *notReplicated error.
func (m *Meta) runAppendReplicated(ctx context.Context, keys []string, args ...any) ([]any, error) {
	reply, acks, err := m.evalWait(ctx, appendScript, keys, args...)
	if err != nil {
		return nil, err
	}
	if status, _ := replyString(reply, 0); status != "ok" {
		return reply, nil // nothing was written: nothing to wait for
	}
	if err := acks(); err != nil {
		return nil, err
	}
	return reply, nil
}

// evalWait is Store.evalWait.
func (m *Meta) evalWait(ctx context.Context, script *goredis.Script, keys []string, args ...any) (_ []any, acks func() error, _ error) {
	return m.s.evalWait(ctx, script, keys, args...)
}

// compact replaces a long log with a snapshot of the view. It is an
// optimisation: a failure leaves the log as it was.
func (m *Meta) compact(ctx context.Context, partition string) {
	_, _ = m.write(ctx, "compact", partition, func(v *view) (change, error) {
		if v.n < compactAt {
			return change{}, nil // someone else compacted
		}
		rec, err := v.snapshot()
		if err != nil {
			return change{}, err
		}
		return change{record: rec, install: func(uint64, int64) {}}, nil
	})
}

// logReply decodes a reply {epoch, from, head, records}.
func logReply(reply []any) (epoch string, from int64, head string, recs []string, _ error) {
	if len(reply) < 4 {
		return "", 0, "", nil, fmt.Errorf("%w: log reply %v", ErrCorrupt, reply)
	}
	epoch, ok1 := replyString(reply, 0)
	from, ok2 := reply[1].(int64)
	head, ok3 := replyString(reply, 2)
	raw, ok4 := reply[3].([]any)
	if !ok1 || !ok2 || !ok3 || !ok4 || from < 0 {
		return "", 0, "", nil, fmt.Errorf("%w: log reply %v", ErrCorrupt, reply)
	}
	recs = make([]string, len(raw))
	for i, r := range raw {
		s, ok := r.(string)
		if !ok {
			return "", 0, "", nil, fmt.Errorf("%w: log record of type %T", ErrCorrupt, r)
		}
		recs[i] = s
	}
	return epoch, from, head, recs, nil
}

// catchUp applies a reply {epoch, from, head, records}, asked for when v
// was in era and held asked records, to v (see view.catchUp).
func (m *Meta) catchUp(v *view, era uint64, asked int64, reply []any) (moved bool, _ error) {
	epoch, from, head, recs, err := logReply(reply)
	if err != nil {
		return false, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.catchUp(era, asked, epoch, from, head, recs)
}

func replyString(reply []any, i int) (string, bool) {
	if i >= len(reply) {
		return "", false
	}
	s, ok := reply[i].(string)
	return s, ok
}

// maxReadAttempts bounds how often a read asks again because its view
// moved to another log (a compaction, a delete) while it asked.
const maxReadAttempts = 16

// readKeys are the keys readScript takes.
func (m *Meta) readKeys(partition string) []string {
	pk := m.keys(partition)
	return []string{pk.l, pk.e, pk.h}
}

// read brings the partition's view up to date and returns it.
func (m *Meta) read(ctx context.Context, op, partition string) (*view, error) {
	skeys := m.readKeys(partition)
	v := m.view(partition)
	for attempt := 0; ; attempt++ {
		v.mu.Lock()
		epoch, from, era := v.epoch, v.n, v.era
		v.mu.Unlock()
		reply, err := readScript.Run(ctx, m.s.client, skeys, epoch, from).Slice()
		var moved bool
		if err == nil {
			moved, err = m.catchUp(v, era, from, reply)
		}
		if err != nil {
			return nil, m.s.wrap(ctx, op, err)
		}
		if !moved {
			return v, nil
		}
		if attempt+1 >= maxReadAttempts {
			return nil, m.s.wrap(ctx, op, fmt.Errorf("%w: %d attempts on partition %q", ErrContention, maxReadAttempts, partition))
		}
	}
}

// Prepare implements backends.MetaStore.
func (m *Meta) Prepare(ctx context.Context, partition string, keys, fields []string) ([]backends.Reservation, error) {
	ctx = m.s.traced(ctx)
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return []backends.Reservation{}, nil
	}
	if err := checkPrepare(keys, fields); err != nil {
		return nil, err
	}
	record := prepareRecord(keys, fields)
	var p *prepared
	base, err := m.write(ctx, "prepare", partition, func(v *view) (change, error) {
		p = v.prepare(keys, fields)
		return change{record: record, need: int64(len(p.newPos)), install: func(base uint64, at int64) {
			v.installPrepare(p, keys, fields, base, at)
		}}, nil
	})
	if err != nil {
		return nil, err
	}
	p.setBase(base)
	return p.res, nil
}

func checkPrepare(keys, fields []string) error {
	seen := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		if _, dup := seen[k]; dup {
			return fmt.Errorf("%w: key %q twice in one Prepare", backends.ErrInvalid, k)
		}
		seen[k] = struct{}{}
	}
	for i, f := range fields {
		for _, g := range fields[:i] {
			if g == f {
				return fmt.Errorf("%w: field %q twice in one Prepare", backends.ErrInvalid, f)
			}
		}
	}
	return nil
}

// alloc reserves n global indexes and registers partition (cluster mode).
func (m *Meta) alloc(ctx context.Context, partition string, n int64) (int64, error) {
	next, parts := m.counterKeys()
	top, err := allocScript.Run(ctx, m.s.client, []string{next, parts}, n, partition).Int64()
	if err != nil {
		return 0, m.s.wrap(ctx, "prepare", err)
	}
	return top - n, nil
}

// Commit implements backends.MetaStore.
func (m *Meta) Commit(ctx context.Context, partition string, updates []backends.RowUpdate) (backends.CommitResult, error) {
	ctx = m.s.traced(ctx)
	if err := m.check(ctx); err != nil {
		return backends.CommitResult{}, err
	}
	if len(updates) == 0 {
		return backends.CommitResult{}, nil
	}
	record, err := commitRecord(updates)
	if err != nil {
		return backends.CommitResult{}, err
	}
	return m.commitVia(ctx, partition, updates, record, nil)
}

// commitVia is Commit of updates, encoded as record, with the first
// attempt run by first (see writeVia).
func (m *Meta) commitVia(ctx context.Context, partition string, updates []backends.RowUpdate, record []byte, first appendRunner) (backends.CommitResult, error) {
	var c *committing
	var receipts []string // storage keys, taken from m.s.receipts
	_, err := m.writeVia(ctx, "commit", partition, func(v *view) (change, error) {
		var err error
		if c, err = v.commit(partition, updates); err != nil {
			return change{}, err
		}
		var cells []string
		if !m.s.cluster {
			receipts = m.s.receipts.of(updates)
			cells = m.s.dataKeys(receipts)
		}
		return change{record: record, delta: c.fresh, install: func(uint64, int64) { v.installCommit(c) }, cells: cells}, nil
	}, first)
	m.s.receipts.forget(receipts)
	if err != nil {
		return backends.CommitResult{}, err
	}
	return c.res, nil
}

// Lookup implements backends.MetaStore.
func (m *Meta) Lookup(ctx context.Context, partition string, keys []string) ([]*backends.Row, error) {
	ctx = m.s.traced(ctx)
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return make([]*backends.Row, 0), nil
	}
	v, err := m.read(ctx, "lookup", partition)
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.committedRows(keys), nil
}

// List implements backends.MetaStore.
func (m *Meta) List(ctx context.Context, partition string) ([]*backends.Row, error) {
	ctx = m.s.traced(ctx)
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	v, err := m.read(ctx, "list", partition)
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.committed(), nil
}

// Partitions implements backends.MetaStore. The registry may name
// partitions whose rows are gone (on a Cluster it is only ever added to,
// see the package doc); those with no committed row are left out.
func (m *Meta) Partitions(ctx context.Context) ([]string, error) {
	ctx = m.s.traced(ctx)
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	_, parts := m.counterKeys()
	names, err := m.s.client.SMembers(ctx, parts).Result()
	if err != nil {
		return nil, m.s.wrap(ctx, "partitions", err)
	}
	if len(names) == 0 {
		return []string{}, nil
	}
	counts := make([]*goredis.StringCmd, len(names))
	_, err = m.s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, n := range names {
			counts[i] = p.Get(ctx, m.keys(n).n)
		}
		return nil
	})
	if err != nil && !errors.Is(err, goredis.Nil) {
		return nil, m.s.wrap(ctx, "partitions", err)
	}
	out := names[:0]
	for i, n := range names {
		if c, err := counts[i].Int64(); err == nil && c > 0 {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Delete implements backends.MetaStore.
func (m *Meta) Delete(ctx context.Context, partition string, keys []string) ([]*backends.Row, error) {
	ctx = m.s.traced(ctx)
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, nil
	}
	var d *deleting
	_, err := m.write(ctx, "delete", partition, func(v *view) (change, error) {
		d = v.delete(keys)
		if len(d.keys) == 0 {
			return change{}, nil
		}
		// A delete that leaves nothing (no row, no cell to sweep) leaves
		// nothing to keep a log for.
		drop := v.emptyAfter(d)
		return change{record: deleteRecord(d.keys), drop: drop, delta: -int64(len(d.rows)), install: func(uint64, int64) { v.installDelete(d) }, unqueue: indexList(d.rows)}, nil
	})
	if err != nil || len(d.rows) == 0 {
		return nil, err
	}
	return d.rows, nil
}

// DeletePartition implements backends.MetaStore. It is a write like
// any other: computed against the view (the committed rows it removes),
// applied only if the log is still what the view replayed. The removed
// rows' cells stay known as garbage (see Garbage) until swept; the log's
// keys go with the last of them (or at once when there are none). A
// resent delete that deleted the log finds its id in the partition's x
// key and counts as applied.
func (m *Meta) DeletePartition(ctx context.Context, partition string) ([]*backends.Row, error) {
	ctx = m.s.traced(ctx)
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	var rows []*backends.Row
	_, err := m.write(ctx, "delete partition", partition, func(v *view) (change, error) {
		rows = nil
		if v.epoch == "" && len(v.rows) == 0 {
			return change{}, nil // no log as far as the view knows: check that
		}
		rows = v.committed()
		d := &deleting{rows: rows}
		for k := range v.rows {
			d.keys = append(d.keys, k)
		}
		if v.emptyAfter(d) {
			return change{drop: true}, nil
		}
		return change{record: bareRecord(recClear), delta: -int64(len(rows)), install: func(uint64, int64) { v.clear() }}, nil
	})
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	return rows, nil
}

// computed runs the test hook between a write's computation against its
// view and the script that appends it.
func (s *Store) computed() {
	if s.opts.roundHook != nil {
		s.opts.roundHook("meta")
	}
}
