package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/internal/fanout"
)

// Store is the Redis engine's backends.Store; Log returns the partition
// logs that share its client and its direct connections. It is safe for
// concurrent use. Values Read sets in ReadCell.Value are the Store's own
// (fresh memory, or go-redis's reply) and must not be modified. It is not
// a backends.Stager: Redis has no memory a client can write into.
//
// Every request the Store and its Log wait a reply for is reported with
// backends.CountRoundTrips on the call's context: on direct connections
// each read or write round and each transaction, through go-redis each
// command or pipeline, a Cluster pipeline to several nodes at once
// counting one (by a hook the Store adds to its client, which counts the
// Store's own calls only).
type Store struct {
	client  goredis.UniversalClient
	opts    options
	addr    string // for errors
	cluster bool   // keys of one multi-key command must share a slot
	retries bool   // go-redis resends a command whose connection failed

	closed atomic.Bool
	// owned: the client came from Open; it is closed when the Store and
	// its Log (if taken) are both closed (tq closes both).
	owned    bool
	openRefs atomic.Int32

	// meanSize is a running mean of the sizes of values read, in bytes
	// (0: nothing read yet); reads through go-redis size their rounds from it.
	meanSize atomic.Int64

	directOnce sync.Once
	direct     *directConns // shared with the Log; nil: go-redis only

	logOnce sync.Once
	log     backends.Log // see Store.Log
}

var _ backends.Store = (*Store)(nil)

// New returns a Store over a client the caller owns: Close (of the Store
// and of its Log) leaves the client open. The client may be a *Client
// (standalone, or Sentinel failover), a *ClusterClient or a *Ring; with
// anything but a *Client, no script or transaction touches two hash slots.
func New(client goredis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil redis client", backends.ErrInvalid)
	}
	o := defaultOptions()
	if err := o.apply(opts); err != nil {
		return nil, err
	}
	return newStore(client, o, false), nil
}

func newStore(client goredis.UniversalClient, o options, owned bool) *Store {
	s := &Store{client: client, opts: o, owned: owned}
	s.openRefs.Store(1)
	s.addr = o.addr
	s.retries, s.cluster = true, true
	addr := fmt.Sprintf("%T", client)
	switch c := client.(type) {
	case *goredis.Client:
		s.cluster, addr = o.clusterSafe, c.Options().Addr
		s.retries = c.Options().MaxRetries >= 0
	case *goredis.ClusterClient:
		addr = strings.Join(c.Options().Addrs, ",") // it follows redirects whatever MaxRetries says
	}
	if s.addr == "" {
		s.addr = addr
	}
	for _, h := range o.hooks {
		client.AddHook(h)
	}
	client.AddHook(roundTripHook{s})
	return s
}

// nodeFor returns a client of the one server that holds key, whose
// pipelines run on one connection (WAIT counts that connection's writes).
func (s *Store) nodeFor(ctx context.Context, key string) (*goredis.Client, error) {
	switch c := s.client.(type) {
	case *goredis.Client:
		return c, nil
	case *goredis.ClusterClient:
		return c.MasterForKey(ctx, key)
	}
	return nil, fmt.Errorf("%w: WithReplicas needs a *redis.Client or *redis.ClusterClient, not %T", backends.ErrInvalid, s.client)
}

// Client returns the underlying client.
func (s *Store) Client() goredis.UniversalClient { return s.client }

// Prefix returns the namespace of the store's keys.
func (s *Store) Prefix() string { return s.opts.prefix }

// Close closes the data side. Later calls return backends.ErrClosed. The
// client is closed only when it came from Open and the Log, if taken, is
// closed too.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	return s.release()
}

// release drops one side's reference to an owned client.
func (s *Store) release() error {
	if s.openRefs.Add(-1) != 0 {
		return nil
	}
	// Both sides are closed: the direct connections serve both.
	s.directOnce.Do(func() {}) // no pool after this
	if s.direct != nil {
		s.direct.Close()
	}
	if s.owned {
		return s.client.Close()
	}
	return nil
}

func (s *Store) check(ctx context.Context) error {
	if s.closed.Load() {
		return backends.ErrClosed
	}
	return ctx.Err()
}

// wrap names the operation and address in a server error. When the
// caller's context ended, the error also wraps ctx.Err(): with
// ContextTimeoutEnabled the client turns a deadline into a socket timeout,
// which must read as the caller's deadline, not the client's timeout.
func (s *Store) wrap(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, backends.ErrClosed) || errors.Is(err, backends.ErrInvalid) || errors.Is(err, backends.ErrConflict) {
		return err
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	cerr := ctx.Err()
	if dl, ok := ctx.Deadline(); ok && cerr == nil && !time.Now().Before(dl) {
		// The socket deadline (set from ctx's) can fire a moment before
		// ctx's own timer does.
		cerr = context.DeadlineExceeded
	}
	if cerr != nil && !errors.Is(err, cerr) {
		err = fmt.Errorf("%w (%w)", cerr, err)
	}
	return &Error{Op: op, Addr: s.addr, Err: err, callerDone: cerr != nil}
}

// Key naming shared by every part of the engine: LAYOUT.md sections 1
// and 2.

// partEscaper keeps a partition name from closing the key's hash tag.
var partEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

// partBase is "base", what every key of partition's starts with:
// <prefix>:{<prefix>:<partition escaped>}. The keys of a partition share
// its hash tag, and so one Cluster slot.
func (s *Store) partBase(partition string) string {
	p := s.opts.prefix
	return p + ":{" + p + ":" + partEscaper.Replace(partition) + "}"
}

// counterKeys are the global index counter and the partition registry,
// in the slot of gbase, <prefix>:{<prefix>}.
func (s *Store) counterKeys() (next, parts string) {
	g := s.opts.prefix + ":{" + s.opts.prefix + "}"
	return g + ":next", g + ":parts"
}

// unsafeBytes views s as bytes, for decoding without a copy; the decoders
// only read, and copy what they keep.
func unsafeBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// dataPrefix is what every data key starts with.
func (s *Store) dataPrefix() string { return s.opts.prefix + ":d:" }

// dataKeys returns dataPrefix() + key for each key, built in one
// allocation.
func (s *Store) dataKeys(keys []string) []string {
	pre := s.dataPrefix()
	n := 0
	for _, k := range keys {
		n += len(pre) + len(k)
	}
	buf := make([]byte, 0, n)
	out := make([]string, len(keys))
	for i, k := range keys {
		lo := len(buf)
		buf = append(buf, pre...)
		buf = append(buf, k...)
		out[i] = unsafe.String(&buf[lo], len(buf)-lo) // buf never changes again
	}
	return out
}

// span is a round: items [lo, hi) of a call.
type span struct{ lo, hi int }

// writeRounds cuts values into rounds of at most roundKeys keys and
// writeRoundBytes bytes (a larger value goes alone).
func (s *Store) writeRounds(cells []backends.Cell) []span {
	return s.rounds(len(cells), s.opts.writeRoundBytes, 1, func(i int) int { return len(cells[i].Head) + len(cells[i].Body) })
}

// minReadRoundKeys is how many values a read round carries even past its
// byte size, up to maxRoundGrowth times it: a round costs a round trip and
// two wake-ups (64 x 1 MiB read in 15.3-15.9 ms in rounds of 4, 19.1-20.0
// ms in rounds of 1). Writes keep one large value per round: grouping
// four measured slower.
const (
	minReadRoundKeys = 4
	maxRoundGrowth   = 4
)

// rounds cuts n values of size(i) bytes into rounds of at most roundKeys
// keys and maxBytes bytes, or, to carry minKeys values, up to
// maxRoundGrowth times that (a larger value goes alone).
func (s *Store) rounds(n, maxBytes, minKeys int, size func(i int) int) []span {
	var out []span
	lo, bytes := 0, 0
	for i := range n {
		v := size(i)
		full := bytes+v > maxBytes && (i-lo >= minKeys || bytes+v > maxRoundGrowth*maxBytes)
		if i > lo && (i-lo >= s.opts.roundKeys || full) {
			out = append(out, span{lo, i})
			lo, bytes = i, 0
		}
		bytes += v
	}
	if lo < n {
		out = append(out, span{lo, n})
	}
	return out
}

// countRounds cuts n items into rounds of at most k.
func countRounds(n, k int) []span {
	out := make([]span, 0, (n+k-1)/k)
	for lo := 0; lo < n; lo += k {
		out = append(out, span{lo, min(lo+k, n)})
	}
	return out
}

// runRounds runs f on each round, ioDepth at a time, and returns the first
// error; after an error no round starts and those in flight are cancelled.
// A single round runs on the calling goroutine.
func (s *Store) runRounds(ctx context.Context, rounds []span, f func(ctx context.Context, r span) error) error {
	return fanout.Run(ctx, len(rounds), s.opts.ioDepth, func(ctx context.Context, i int) error {
		return f(ctx, rounds[i])
	})
}

// Write implements backends.Store: on a standalone server one MSET per
// round on direct connections, written from the cells' Head and Body (see
// writeDirect); without them, one MSET per round through go-redis, or, on
// a Cluster, whose keys live in many slots, pipelined SETs, of the values
// backends.JoinCells makes. Every Tag is "": the engine keeps no per-cell
// strategy. Write keeps no reference to Head or Body.
func (s *Store) Write(ctx context.Context, cells []backends.Cell) error {
	ctx = s.traced(ctx)
	if err := s.check(ctx); err != nil {
		return err
	}
	return s.write(ctx, cells)
}

// write is Write on an open Store.
func (s *Store) write(ctx context.Context, cells []backends.Cell) error {
	if len(cells) == 0 {
		return nil
	}
	for i := range cells {
		cells[i].Tag = ""
	}
	if direct := s.directPool(); direct != nil {
		return s.writeDirect(ctx, direct, cells)
	}
	return s.put(ctx, backends.CellKeys(cells), backends.JoinCells(cells))
}

// Read implements backends.Store: on a standalone server MGETs on direct
// connections, each value read straight into its cell's Head and Body
// (see readDirect); without them, through go-redis, with a copy.
func (s *Store) Read(ctx context.Context, cells []backends.ReadCell) error {
	ctx = s.traced(ctx)
	if err := s.check(ctx); err != nil || len(cells) == 0 {
		return err
	}
	if direct := s.directPool(); direct != nil {
		return s.wrap(ctx, "get", s.readDirect(ctx, direct, cells))
	}
	vals, err := s.get(ctx, backends.ReadCellKeys(cells))
	if err != nil {
		return err
	}
	for i, v := range vals {
		backends.FillReadCell(&cells[i], v)
	}
	return nil
}

// Delete implements backends.Store (UNLINK, which frees large values off
// the server's main thread); missing keys are ignored.
func (s *Store) Delete(ctx context.Context, cells []backends.Cell) error {
	ctx = s.traced(ctx)
	if err := s.check(ctx); err != nil {
		return err
	}
	return s.del(ctx, backends.CellKeys(cells))
}

// put stores values under keys through go-redis, in rounds: one MSET per
// round on a standalone server, pipelined SETs on a Cluster.
func (s *Store) put(ctx context.Context, keys []string, values [][]byte) error {
	dk := s.dataKeys(keys)
	err := s.runRounds(ctx, s.rounds(len(values), s.opts.writeRoundBytes, 1, func(i int) int { return len(values[i]) }), func(ctx context.Context, r span) error {
		if !s.cluster {
			pairs := make([]any, 0, 2*(r.hi-r.lo))
			for i := r.lo; i < r.hi; i++ {
				pairs = append(pairs, dk[i], values[i])
			}
			return s.client.MSet(ctx, pairs...).Err()
		}
		return s.pipelined(ctx, r, func(p goredis.Pipeliner, i int) { p.Set(ctx, dk[i], values[i], 0) })
	})
	return s.wrap(ctx, "put", err)
}

// get returns each key's value through go-redis, nil for a missing key,
// aliasing go-redis's replies. Its rounds are sized as if every value were
// of the mean size of the values read so far.
func (s *Store) get(ctx context.Context, keys []string) ([][]byte, error) {
	out := make([][]byte, len(keys))
	dk := s.dataKeys(keys)
	var seen, seenBytes atomic.Int64 // values read in this call, for the mean
	read := func(ctx context.Context, r span) error {
		vals, err := s.getRound(ctx, dk[r.lo:r.hi])
		var bytes int64
		for j, v := range vals {
			out[r.lo+j] = v
			bytes += int64(len(v))
		}
		seen.Add(int64(len(vals)))
		seenBytes.Add(bytes)
		return err
	}
	m, next := s.meanSize.Load(), 0
	if m == 0 {
		// Nothing read yet: a small first round to learn the sizes.
		next = min(len(keys), 16)
		if err := read(ctx, span{0, next}); err != nil {
			return nil, s.wrap(ctx, "get", err)
		}
		m = seenBytes.Load() / max(1, seen.Load())
	}
	rounds := s.rounds(len(keys)-next, s.opts.readRoundBytes, minReadRoundKeys, func(int) int { return int(m) })
	for i := range rounds {
		rounds[i].lo, rounds[i].hi = rounds[i].lo+next, rounds[i].hi+next
	}
	if err := s.runRounds(ctx, rounds, read); err != nil {
		return nil, s.wrap(ctx, "get", err)
	}
	if n := seen.Load(); n > 0 {
		m := max(1, seenBytes.Load()/n)
		if old := s.meanSize.Load(); old > 0 {
			m = (old + 3*m) / 4
		}
		s.meanSize.Store(m)
	}
	return out, nil
}

// getRound reads the data keys dk through go-redis: one MGET on a
// standalone server (one command for the server to parse and one reply
// object for the client, where pipelined GETs cost a command each:
// measured 1.5 against 2.2 ms for 1024 x 512 B), pipelined GETs on a
// Cluster. A missing key's value is nil, an empty one's empty.
func (s *Store) getRound(ctx context.Context, dk []string) ([][]byte, error) {
	out := make([][]byte, len(dk))
	if !s.cluster {
		vals, err := s.client.MGet(ctx, dk...).Result()
		if err == nil && len(vals) != len(dk) {
			err = fmt.Errorf("%w: MGET of %d keys replied %d values", ErrCorrupt, len(dk), len(vals))
		}
		if err != nil {
			return nil, err
		}
		for j, v := range vals {
			if str, ok := v.(string); ok {
				out[j] = present(unsafeBytes(str)) // the reply is ours alone; readers must not write
			}
		}
		return out, nil
	}
	cmds := make([]*goredis.StringCmd, len(dk))
	_, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, k := range dk {
			cmds[i] = p.Get(ctx, k)
		}
		return nil
	})
	if err != nil && !errors.Is(err, goredis.Nil) {
		return nil, err
	}
	for j, c := range cmds {
		switch b, err := c.Bytes(); {
		case errors.Is(err, goredis.Nil):
		case err != nil:
			return nil, err
		default:
			out[j] = present(b)
		}
	}
	return out, nil
}

// present is b, or an empty slice for nil: a value found, maybe empty.
func present(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// del removes keys (data keys without their prefix).
func (s *Store) del(ctx context.Context, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	dk := s.dataKeys(keys)
	err := s.runRounds(ctx, countRounds(len(dk), s.opts.roundKeys), func(ctx context.Context, r span) error {
		if !s.cluster {
			return s.client.Unlink(ctx, dk[r.lo:r.hi]...).Err()
		}
		// A multi-key UNLINK must not span hash slots; one per key, pipelined.
		return s.pipelined(ctx, r, func(p goredis.Pipeliner, i int) { p.Unlink(ctx, dk[i]) })
	})
	return s.wrap(ctx, "delete", err)
}

// pipelined sends the command add queues for each item of round r in one
// pipeline and returns the first error.
func (s *Store) pipelined(ctx context.Context, r span, add func(p goredis.Pipeliner, i int)) error {
	cmds, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i := r.lo; i < r.hi; i++ {
			add(p, i)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return err
		}
	}
	return nil
}

var _ backends.ConnStater = (*Store)(nil)

// ConnStats implements backends.ConnStater: go-redis's pool and the
// direct connections together.
func (s *Store) ConnStats() backends.ConnStats {
	ps := s.client.PoolStats()
	st := backends.ConnStats{Open: int(ps.TotalConns), Idle: int(ps.IdleConns), Timeouts: uint64(ps.Timeouts)}
	if d := s.directPool(); d != nil {
		open, idle := d.Counts()
		st.Open += open
		st.Idle += idle
	}
	return st
}
