package backends

import "context"

// Backend stores packed objects by key. Implementations must be safe for
// concurrent use. Each batch call takes parallel slices; an empty batch is a
// no-op that returns nil.
type Backend interface {
	// Put stores values[i] under keys[i], replacing any existing value. The
	// backend may keep the value slices (callers hand over ownership). On
	// error some keys may have been written: callers delete them.
	Put(ctx context.Context, keys []string, values [][]byte) error
	// Get returns the value of each key, or nil for a missing key (a missing
	// key is not an error). The returned slices must not be modified.
	Get(ctx context.Context, keys []string) ([][]byte, error)
	// Delete removes keys; missing keys are ignored.
	Delete(ctx context.Context, keys []string) error
	// Close releases the backend's resources. Later calls return ErrClosed.
	Close() error
}

// Allocator is the optional zero-copy write path: the backend allocates
// buffers in its own memory, the caller fills them, and Publish makes them
// visible. A reader never sees a staged buffer before Publish.
type Allocator interface {
	// Allocate stages one buffer per key, buffers[i] exactly sizes[i] long,
	// of unspecified contents: the caller writes every byte.
	// sizes is only valid during the call (the codec reuses it); keys stay
	// valid until Publish or Discard returns.
	Allocate(ctx context.Context, keys []string, sizes []int) (Staged, error)
}

// Staged is a set of allocated, not yet visible buffers. The caller ends it
// with a successful Publish, or with Discard (also after a failed Publish,
// which leaves nothing visible but may still hold buffers). Discard must be
// safe to call in any state, and a no-op after a successful Publish. The
// caller must not touch the buffers after either: an engine may send and
// recycle them (redis does). Not safe for concurrent use.
type Staged interface {
	// Buffers returns the destination buffers, in key order.
	Buffers() [][]byte
	// Publish makes every buffer visible under its key, replacing existing
	// values. On error nothing this Staged published stays visible.
	Publish(ctx context.Context) error
	// Discard releases the buffers without publishing them.
	Discard(ctx context.Context) error
}

// TagReporter is an optional interface of a Staged whose backend chose a
// storage strategy per key (TransferQueue's "custom backend meta").
type TagReporter interface {
	// Tags returns one tag per key, in key order, after a successful Publish.
	Tags() []string
}

// TaggedWriter is an optional interface of a Backend whose Put reports a tag
// per key.
type TaggedWriter interface {
	PutTagged(ctx context.Context, keys []string, values [][]byte) (tags []string, err error)
}

// TaggedReader is an optional interface of a Backend that wants the tags it
// reported back on Get. tags[i] is "" for a key written without a tag.
type TaggedReader interface {
	GetTagged(ctx context.Context, keys, tags []string) ([][]byte, error)
}

// TaggedDeleter is an optional interface of a Backend that wants the tags it
// reported back on Delete.
type TaggedDeleter interface {
	DeleteTagged(ctx context.Context, keys, tags []string) error
}
