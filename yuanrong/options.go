package yuanrong

import (
	"fmt"

	"github.com/tqgo/tqgo/codec"
)

// Defaults, as TransferQueue's YuanrongStorageClient (GeneralKVClientAdapter)
// sets them.
const (
	// DefaultPutKeysLimit is the most keys one MCreate and one MPublish
	// carry (TransferQueue's PUT_KEYS_LIMIT).
	DefaultPutKeysLimit = 10_000
	// DefaultGetClearKeysLimit is the most keys one MGet and one Delete
	// carry (TransferQueue's GET_CLEAR_KEYS_LIMIT).
	DefaultGetClearKeysLimit = 10_000
	// DefaultDSMaxWorkers is TransferQueue's DS_MAX_WORKERS. Here it is an
	// upper bound, not a pool every batch wakes: the codec packs small
	// objects on the calling goroutine and caps the pool at GOMAXPROCS
	// (see codec.Options), which keeps the small-object win TransferQueue PR #153 measured without
	// losing its large-object case.
	DefaultDSMaxWorkers = codec.DefaultDSMaxWorkers
)

// MaxKeyLen is the longest key the datasystem accepts ("ID length should
// less than 256" in its KVClient::MCreate). Keys are checked before any
// call, so an over-long key fails the whole batch up front.
const MaxKeyLen = 255

// Option configures a Client or a Backend; pass them to NewClient,
// NewBackend or Open.
type Option func(*options) error

type options struct {
	putLimit int           // keys per MCreate / MPublish round
	getLimit int           // keys per MGet / Delete round
	pack     codec.Options // Client only: how values are packed
}

func defaultOptions() options {
	return options{
		putLimit: DefaultPutKeysLimit,
		getLimit: DefaultGetClearKeysLimit,
		pack:     codec.DefaultOptions(),
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

// WithPutKeysLimit sets the most keys one MCreate or MPublish call carries
// (default 10,000). A put of more keys runs in rounds.
func WithPutKeysLimit(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return invalidf("PutKeysLimit %d < 1", n)
		}
		o.putLimit = n
		return nil
	}
}

// WithGetClearKeysLimit sets the most keys one MGet or Delete call carries
// (default 10,000).
func WithGetClearKeysLimit(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return invalidf("GetClearKeysLimit %d < 1", n)
		}
		o.getLimit = n
		return nil
	}
}

// WithDSMaxWorkers sets how many goroutines a Client packs large objects
// with (default 16, capped at GOMAXPROCS; 1 packs everything on the calling
// goroutine). Objects under the codec's PackThreshold (256 KiB) are always
// packed serially, so at TransferQueue's object sizes this changes nothing.
// A Backend does not pack (tq does, see tq.WithDSMaxWorkers) and ignores it.
func WithDSMaxWorkers(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return invalidf("DSMaxWorkers %d < 1", n)
		}
		o.pack.DSMaxWorkers = n
		return nil
	}
}

// WithPackOptions replaces every packing option of a Client (default
// codec.DefaultOptions()): for measurements that reproduce TransferQueue's
// fixed pool, codec.Options{DSMaxWorkers: 16, Oversubscribe: true,
// PackThreshold: 1, PoolMinBatchBytes: 1}. A later WithDSMaxWorkers still
// applies. A Backend ignores it.
func WithPackOptions(p codec.Options) Option {
	return func(o *options) error {
		if p.DSMaxWorkers < 0 || p.PackThreshold < 0 || p.PoolMinBatchBytes < 0 {
			return fmt.Errorf("%w: negative pack option in %+v", ErrInvalid, p)
		}
		o.pack = p
		return nil
	}
}
