package redis

import (
	"fmt"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
)

// Defaults. The round sizes were measured on a 2-core VM against a local
// redis-server 7.0 (see bench_test.go): a round much larger than this
// makes the server fault in fresh pages for one huge query or reply
// buffer, which cost more than the copy, and much smaller ones pay a
// round trip each.
const (
	// DefaultPrefix is the namespace of every key when none is given.
	DefaultPrefix = "tq"
	// DefaultRoundKeys is the most keys one pipelined round carries.
	DefaultRoundKeys = 1024
	// DefaultWriteRoundBytes is the most value bytes one write round
	// carries (a larger single value goes alone).
	DefaultWriteRoundBytes = 1 << 20
	// DefaultReadRoundBytes is the reply size a read round aims at, from
	// the value sizes recently read.
	DefaultReadRoundBytes = 1 << 20
	// DefaultIODepth is how many rounds of one call are in flight at once.
	DefaultIODepth = 2
)

// Option configures New (and, through URL query parameters, Open).
type Option func(*options) error

type options struct {
	prefix          string
	roundKeys       int
	writeRoundBytes int
	readRoundBytes  int
	ioDepth         int
	addr            string // for error messages; "" means ask the client
	clusterSafe     bool   // force the cluster-safe (two-step) metadata path
	noDirect        bool   // never use direct connections
	directPoolSize  int    // direct connections at most; -1: directShare of the client's pool
	hooks           []goredis.Hook
	replicas        int // WAIT for this many replicas after each metadata write (0: none)
	replicaTimeout  time.Duration
	timeOffset      func() time.Duration // added to the log's TIME (WithTimeOffset)
	// roundHook, when set (tests), runs after each round Read or Write
	// sends on direct connections ("get", "set"), and between a
	// metadata write's computation and the script that appends it ("meta").
	roundHook func(op string)
}

func defaultOptions() options {
	return options{
		prefix:          DefaultPrefix,
		roundKeys:       DefaultRoundKeys,
		writeRoundBytes: DefaultWriteRoundBytes,
		readRoundBytes:  DefaultReadRoundBytes,
		ioDepth:         DefaultIODepth,
		directPoolSize:  -1,
		replicaTimeout:  DefaultReplicaTimeout,
	}
}

func (o *options) apply(opts []Option) error {
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(o); err != nil {
			return err
		}
	}
	return nil
}

// WithPrefix sets the namespace (default "tq"): every data and metadata
// key starts with prefix + ":", so jobs sharing one Redis keep apart. A
// prefix is 1 to 64 bytes of letters, digits, '_', '-' and '.': no ':'
// (prefix "a" must not see the keys of prefix "a:b"), no braces (Cluster
// hash tags) and no glob characters.
func WithPrefix(prefix string) Option {
	return func(o *options) error {
		if !validPrefix(prefix) {
			return fmt.Errorf("%w: redis prefix %q (want 1-64 bytes of [A-Za-z0-9_.-])", backends.ErrInvalid, prefix)
		}
		o.prefix = prefix
		return nil
	}
}

func validPrefix(s string) bool {
	const chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-."
	return len(s) >= 1 && len(s) <= 64 && strings.Trim(s, chars) == ""
}

// positive is an Option that sets the field of o that field returns to n,
// which must be at least 1.
func positive(what string, n int, field func(o *options) *int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("%w: redis %s %d < 1", backends.ErrInvalid, what, n)
		}
		*field(o) = n
		return nil
	}
}

// WithRoundKeys sets the most keys one pipelined round of Write, Read or
// Delete carries (default DefaultRoundKeys, 1024).
func WithRoundKeys(n int) Option {
	return positive("round keys", n, func(o *options) *int { return &o.roundKeys })
}

// WithWriteRoundBytes sets the most value bytes one write round carries
// (default DefaultWriteRoundBytes, 1 MiB); a larger value goes alone.
func WithWriteRoundBytes(n int) Option {
	return positive("write round bytes", n, func(o *options) *int { return &o.writeRoundBytes })
}

// WithReadRoundBytes sets the reply size a read round aims at (default 1
// MiB). On direct connections a round is sized by its cells'
// destinations; through go-redis, which does not know value sizes in
// advance, by a running mean of the sizes the Store read (its first read
// learns from a round of 16 keys). A round still carries at least 4
// values, up to 4 times this size, since a round trip per large value
// costs more.
func WithReadRoundBytes(n int) Option {
	return positive("read round bytes", n, func(o *options) *int { return &o.readRoundBytes })
}

// WithIODepth sets how many rounds of one call are in flight at once
// (default 2). Rounds wait on the network and the server, not on this
// process's CPU, so this is a queue depth, sized apart from tq's packing
// workers. Through go-redis each round in flight holds a connection of the
// client's pool. On direct connections a call holds one, and no goroutine
// of its own: reads (Read, and ReadCells of the Log) keep this many rounds
// requested on it, counting the one being read, and writes (Write, and
// the rounds of AppendCells before its last) send all their rounds as one
// pipeline.
func WithIODepth(n int) Option {
	return positive("io depth", n, func(o *options) *int { return &o.ioDepth })
}

// WithAddr sets the address that error messages name (default: the
// client's address, or its seed addresses for a cluster).
func WithAddr(addr string) Option {
	return func(o *options) error {
		o.addr = addr
		return nil
	}
}

// WithDirectConnections says whether the engine may use direct
// connections (default true): on a standalone server, plain RESP2
// connections beside go-redis's, dialled, authenticated and SELECTed as
// the client's (through its Dialer, so TLS and Sentinel work), which send
// MSETs with each value's head and body written from the caller's memory
// (writev for large bodies), MGETs whose values are read straight into
// the cells' destinations, the Log's scripts, and the MULTI/EXEC of
// AppendCells and ReadCells. They beat go-redis, which copies every value
// in and out, on tensor cells: by a wide margin for reads and a smaller
// one for writes (BenchmarkDirectVsGoRedis). A request that
// fails on a direct connection that sat idle, before any reply, is sent
// once more on a new one (every request they send is safe to repeat).
// Their commands go through the hooks WithHooks gives, as the client's
// do. On a Cluster or a Ring, or for a client with an OnConnect hook or
// streaming credentials, everything goes through go-redis, with a copy,
// as it does when this is off; off, go-redis's pool gets all of
// pool_size.
func WithDirectConnections(on bool) Option {
	return func(o *options) error {
		o.noDirect = !on
		return nil
	}
}

// WithReplicas makes an acknowledged metadata write (a put's Prepare and
// commit, a Clear, a ClearPartition, and a Claim, Settle or Reset of
// consumption that changed something) mean replicated: after each one the
// engine sends WAIT n on the same connection, and a write that fewer than
// n replicas acknowledged within timeout returns an error matching
// ErrNotReplicated and, but for a Prepare (whose rows stay invisible),
// backends.ErrOutcomeUnknown (the master applied it; a failover may still
// lose it). So does a write that applied on a send whose WAIT reply was
// lost (go-redis resends a pipeline whose reply it lost). The Prepare
// waits so that a failover never hands out again the indexes it drew.
// Replication is one ordered stream, so a commit acknowledged carries the
// cells written before it. A put takes one more round trip: its cells
// and commit no longer share a transaction. timeout must be positive when
// n is (WAIT 0 would block forever); WAIT counts whole milliseconds,
// rounding a timeout up. It should be below the client's read timeout: a
// WAIT that outlasts it loses its reply.
//
// Default 0: no wait, and a failover to a replica that lags loses the
// appends it lacked (puts, and leases and acks too, whose rows are then
// delivered again), though every client then agrees on what is left: a
// client whose copy of a partition is ahead of the log finds its position
// missing and replays the log from its snapshot, and no write is accepted
// against the copy it dropped. The replica's index counter is behind too,
// so a put in flight across the failover may hold storage keys that are
// another row's now. Use replicas=1 where failovers happen.
func WithReplicas(n int, timeout time.Duration) Option {
	return func(o *options) error {
		if n < 0 || (n > 0 && timeout <= 0) {
			return fmt.Errorf("%w: redis replicas %d with timeout %v (want n >= 0 and, for n > 0, a positive timeout)", backends.ErrInvalid, n, timeout)
		}
		o.replicas, o.replicaTimeout = n, timeout
		return nil
	}
}

// WithDirectPoolSize sets how many direct connections the engine opens at
// most (see WithDirectConnections); the Store and its Log share them. A
// call on them holds one while it runs, and waits for one when all are
// held. With OpenURL, they are taken out of the URL's pool_size: go-redis's
// pool gets the rest, and pool_size stays the bound on every connection
// the engine opens; n must leave go-redis at least one. The default is
// half of pool_size, rounded down (go-redis's default pool_size is 10 per
// GOMAXPROCS; pool_size=1 leaves none); 0 turns direct connections off.
// With New the client's pool is the caller's and is not resized: the
// direct connections, by default half the client's PoolSize, come beside
// it, so a caller bounding the total gives the client PoolSize minus n.
func WithDirectPoolSize(n int) Option {
	return func(o *options) error {
		if n < 0 {
			return fmt.Errorf("%w: redis direct pool size %d < 0", backends.ErrInvalid, n)
		}
		o.directPoolSize = n
		return nil
	}
}

// WithHooks adds go-redis hooks that see all of the engine's traffic:
// they are added to the client (Client.AddHook, also for a client given to
// New) and also see every dial and request of the direct connections.
// There each request is described as goredis.Cmder values
// (an MGET per read round, an MSET per write round, an EVALSHA, or a
// MULTI/MSET/PEXPIRE/EVALSHA/EXEC transaction), run through ProcessHook
// when it is one command and ProcessPipelineHook when it is several. The
// hooks see each command's name, its keys and arguments, and its error;
// an MSET's values appear as their lengths in bytes (ints), and no
// command's reply value is set. They are also added to the client the Log
// opens for its waiting Reads: there each partition waited on sends a
// pipeline (XREAD BLOCK of at most a second, EVALSHA) about once a second
// while idle, which a hook must let run past a second.
func WithHooks(hooks ...goredis.Hook) Option {
	return func(o *options) error {
		for _, h := range hooks {
			if h == nil {
				return fmt.Errorf("%w: nil redis hook", backends.ErrInvalid)
			}
		}
		o.hooks = append(o.hooks, hooks...)
		return nil
	}
}
