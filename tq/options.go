package tq

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"unicode"

	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/codec"
)

// Defaults, as TransferQueue's YuanrongStorageClient sets them.
const (
	DefaultKeysLimit = 10_000 // storage keys per backend call
	DefaultIODepth   = 4      // backend calls in flight per client call
)

// Option configures a Client; pass them to Open or New.
type Option func(*options) error

type options struct {
	pack      codec.Options
	tracer    Tracer
	keysLimit int
	ioDepth   int
	logger    *slog.Logger
	retry     RetryPolicy
	name      string
	full      FullPolicy
	blocks    bool
}

func defaultOptions() options {
	return options{
		pack:      codec.DefaultOptions(),
		keysLimit: DefaultKeysLimit,
		ioDepth:   DefaultIODepth,
		logger:    defaultLogger(),
		retry:     DefaultRetry,
		name:      defaultName(),
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

// WithDSMaxWorkers sets how many goroutines pack large objects (default 16,
// capped at GOMAXPROCS). 1 packs everything on the calling goroutine. Small
// objects are always packed serially: see WithPackThreshold.
func WithDSMaxWorkers(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("%w: DSMaxWorkers %d < 1", ErrInvalid, n)
		}
		o.pack.DSMaxWorkers = n
		return nil
	}
}

// WithPackThreshold sets the packed size from which an object may be packed
// by the pool (default 256 KiB).
func WithPackThreshold(bytes int) Option {
	return func(o *options) error {
		if bytes < 1 {
			return fmt.Errorf("%w: PackThreshold %d < 1", ErrInvalid, bytes)
		}
		o.pack.PackThreshold = bytes
		return nil
	}
}

// WithPoolMinBatchBytes sets how many bytes of large objects a batch needs
// before the packing pool is woken (default codec.DefaultPoolMinBatchBytes,
// measured on a 2-core machine).
func WithPoolMinBatchBytes(bytes int) Option {
	return func(o *options) error {
		if bytes < 1 {
			return fmt.Errorf("%w: PoolMinBatchBytes %d < 1", ErrInvalid, bytes)
		}
		o.pack.PoolMinBatchBytes = bytes
		return nil
	}
}

// WithKeysLimit sets the most storage keys one backend call carries
// (default 10,000, TransferQueue's PUT_KEYS_LIMIT and GET_CLEAR_KEYS_LIMIT).
func WithKeysLimit(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("%w: KeysLimit %d < 1", ErrInvalid, n)
		}
		o.keysLimit = n
		return nil
	}
}

// WithIODepth sets how many backend calls one client call keeps in flight
// (default 4). Backend calls wait on the network, not the CPU, so this is a
// queue depth, sized apart from the CPU-bound packing workers.
func WithIODepth(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("%w: IODepth %d < 1", ErrInvalid, n)
		}
		o.ioDepth = n
		return nil
	}
}

// WithLogger sets the client's logger. By default a client logs warnings
// and errors, and nothing below, through slog.Default()'s handler as it is
// at each record (unless the program set another, the standard log
// package's, on stderr); a logger given here gets every level it enables.
// Quiet silences the client; a nil l fails with ErrInvalid.
//
// Writes and rollbacks are logged at Debug. At Warn, once per occurrence
// and at most once a second per event, partition and task (the records
// passed over are counted in the next one's "suppressed"): a Consume
// handler's failure and its rows' redelivery, rows delivered again, a
// lease lost, rows given up on (dropped as Permanent, or dead after
// MaxDeliveries), a Wait that makes no progress (see DefaultStallWarn and Stall), failed
// cleanups, and an engine found unavailable (once per outage: see
// RetryPolicy). Such records carry the attributes "event", "partition",
// "task", "keys" (the first few), "rows" and "cause". A panicking handler
// or Sampler, and an engine given up on, are logged at Error.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalid)
		}
		o.logger = l
		return nil
	}
}

// WithTracer has t observe every call of the client (see Tracer). A nil t
// traces nothing.
func WithTracer(t Tracer) Option {
	return func(o *options) error {
		o.tracer = t
		return nil
	}
}

// WithName names the client to other processes: its leases' holder (see
// TaskStatus.Leases) unless a task says otherwise (ConsumerName), and its
// name in presence (see Client.Announce). Default: "<hostname>:<pid>". A
// name longer than 128 bytes, or not printable text, fails with
// ErrInvalid.
func WithName(name string) Option {
	return func(o *options) error {
		if err := checkHolder(name); err != nil {
			return err
		}
		o.name = name
		return nil
	}
}

// WithIndexBlocks makes puts of new keys take global indexes the client
// reserved ahead, a few puts' worth at a time per partition, where the
// engine can: through a tq server (tq://) and on a Redis Cluster. Such a
// put writes its cells and then makes one metadata call that reserves
// and commits its rows, where it otherwise makes two (Prepare before the
// cells, Commit after): through a tq server, two round trips per put of
// new keys instead of three. Where cells go with their commit already (a
// standalone Redis, file://) or are encoded into the engine's memory
// (memory://), puts stay as they are.
//
// The first put of new keys of a set of fields in a partition, a put of
// keys that have rows, and a put into a partition whose Capacity bounds
// bytes go the other way. A put that finds a key has a row after all
// deletes what it wrote and goes the other way too (its set of fields
// then leaves blocks alone for a while, and the partition's other sets
// too once a put of that set's new keys went the other way). A block no put used for a minute is
// released for a fresh one, since Reclaim (and a tq server's periodic
// reclaim) aborts a block idle for its olderThan; a put that finds its
// block aborted anyway leaves what it wrote for lost and goes the other
// way.
//
// The price is order. Without blocks, index order (List's order, and the
// order tasks are served in, oldest first) is the order puts of new keys
// returned in, across clients too. With blocks it is that order among
// the puts of this client, but its rows may rank below rows another
// client put after its block was reserved: across clients, index order
// follows put order only to within a few puts of each. And a failover of
// the engine that loses acknowledged writes (Redis's replication is
// asynchronous) can hand out again indexes it had reserved: a put in
// flight then may write its cells under another row's keys, with blocks
// as without, but with blocks for as long as the client holds a block
// the failover lost, a minute at most. Off by default.
func WithIndexBlocks() Option {
	return func(o *options) error {
		o.blocks = true
		return nil
	}
}

func checkHolder(name string) error {
	if name == "" || len(name) > metadata.MaxHolder || strings.ContainsFunc(name, func(c rune) bool { return !unicode.IsPrint(c) || c == '|' }) {
		return fmt.Errorf("%w: name %q: empty, more than %d bytes, or not printable text without '|'", ErrInvalid, name, metadata.MaxHolder)
	}
	return nil
}

// defaultName is "<hostname>:<pid>", the name of a client no option
// names.
func defaultName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	if len(host) > 100 {
		host = host[:100]
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}
