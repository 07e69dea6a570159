package yuanrong

import (
	"context"
	"fmt"
	"net/url"
	"strconv"

	"github.com/tqgo/tqgo/backends"
)

// Backend is the datasystem as a tq data backend. tq packs; the Backend
// hands it datasystem buffers to pack into (backends.Allocator), publishes
// them and reports TagKV per key (backends.TagReporter), and takes the tags
// back on read and delete (backends.TaggedReader, backends.TaggedDeleter).
// Creates and publishes run in rounds of PutKeysLimit keys, gets and
// deletes in rounds of GetClearKeysLimit.
//
// A Backend is safe for concurrent use when its DataSystem is; a Staged it
// returns is used by one goroutine at a time. It owns the DataSystem: Close
// closes it.
type Backend struct {
	e *engine
}

var (
	_ backends.Backend       = (*Backend)(nil)
	_ backends.Allocator     = (*Backend)(nil)
	_ backends.TaggedWriter  = (*Backend)(nil)
	_ backends.TaggedReader  = (*Backend)(nil)
	_ backends.TaggedDeleter = (*Backend)(nil)
	_ backends.Staged        = (*staged)(nil)
	_ backends.TagReporter   = (*staged)(nil)
)

func init() {
	backends.Register("yuanrong", openURL)
}

// openURL opens "yuanrong://" as a Backend over a fresh Local, with the
// query parameters put_keys_limit and get_clear_keys_limit. The metadata
// stays in process (Engine.Meta is nil), as TransferQueue keeps it in its
// controller. A host names a real datasystem, which needs an SDK binding
// this build does not have.
func openURL(_ context.Context, u *url.URL) (backends.Engine, error) {
	if u.Host != "" || (u.Path != "" && u.Path != "/") {
		return backends.Engine{}, fmt.Errorf("%w: %q: build a DataSystem over the SDK (see yuanrong/README.md) and pass yuanrong.NewBackend(ds) to tq.New", ErrNoSDK, u.Redacted())
	}
	var opts []Option
	for name, vals := range u.Query() {
		n, err := strconv.Atoi(vals[len(vals)-1])
		if err != nil {
			return backends.Engine{}, invalidf("%s=%q: %v", name, vals[len(vals)-1], err)
		}
		switch name {
		case "put_keys_limit":
			opts = append(opts, WithPutKeysLimit(n))
		case "get_clear_keys_limit":
			opts = append(opts, WithGetClearKeysLimit(n))
		default:
			return backends.Engine{}, invalidf("unknown URL parameter %q (want put_keys_limit or get_clear_keys_limit)", name)
		}
	}
	b, err := NewBackend(NewLocal(), opts...)
	if err != nil {
		return backends.Engine{}, err
	}
	return backends.Engine{Data: b}, nil
}

// NewBackend returns a Backend over ds, which it takes ownership of.
// Packing options are ignored: tq packs (see tq.WithDSMaxWorkers).
func NewBackend(ds DataSystem, opts ...Option) (*Backend, error) {
	o := defaultOptions()
	if err := o.apply(opts); err != nil {
		return nil, err
	}
	e, err := newEngine(ds, o)
	if err != nil {
		return nil, err
	}
	return &Backend{e: e}, nil
}

// Allocate creates a buffer per key in the datasystem, invisible until
// Publish. It implements backends.Allocator.
func (b *Backend) Allocate(ctx context.Context, keys []string, sizes []int) (backends.Staged, error) {
	if err := b.e.check(ctx); err != nil {
		return nil, err
	}
	if err := checkWrite(keys, len(sizes)); err != nil {
		return nil, err
	}
	for i, n := range sizes {
		if n < 0 {
			return nil, &KeyError{Key: keys[i], Err: invalidf("negative size %d", n)}
		}
	}
	st, err := b.e.create(ctx, keys, sizes)
	if err != nil {
		return nil, err
	}
	return &staged{st: st}, nil
}

// staged is a Backend's backends.Staged.
type staged struct {
	st        *stage
	published bool
}

func (s *staged) Buffers() [][]byte { return s.st.data }

// Publish publishes the buffers in rounds, rolling the whole Staged back if
// a round fails (see Client.Put).
func (s *staged) Publish(ctx context.Context) error {
	if err := s.st.publish(ctx); err != nil {
		return err
	}
	s.published = true
	return nil
}

// Discard releases buffers not published; after a Publish it does nothing.
func (s *staged) Discard(context.Context) error {
	s.st.discard()
	return nil
}

// Tags implements backends.TagReporter: TagKV per key once published.
func (s *staged) Tags() []string {
	if !s.published {
		return nil
	}
	return tagsOf(len(s.st.keys))
}

// Put stores values under keys, replacing existing values: it creates a
// buffer per value, copies the value in and publishes.
func (b *Backend) Put(ctx context.Context, keys []string, values [][]byte) error {
	_, err := b.PutTagged(ctx, keys, values)
	return err
}

// PutTagged is Put that returns TagKV per key (backends.TaggedWriter).
func (b *Backend) PutTagged(ctx context.Context, keys []string, values [][]byte) ([]string, error) {
	if err := b.e.check(ctx); err != nil {
		return nil, err
	}
	if err := checkWrite(keys, len(values)); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return []string{}, nil
	}
	sizes := make([]int, len(values))
	for i, v := range values {
		sizes[i] = len(v)
	}
	st, err := b.e.create(ctx, keys, sizes)
	if err != nil {
		return nil, err
	}
	for i, v := range values {
		copy(st.data[i], v)
	}
	if err := st.publish(ctx); err != nil {
		return nil, err
	}
	return tagsOf(len(keys)), nil
}

// Get returns each key's value, nil for a missing key.
func (b *Backend) Get(ctx context.Context, keys []string) ([][]byte, error) {
	return b.GetTagged(ctx, keys, nil)
}

// GetTagged is Get with the tag each key was written with (nil: all "");
// an unknown tag gives a *KeyError matching ErrUnknownStrategy before
// anything is read. It implements backends.TaggedReader.
func (b *Backend) GetTagged(ctx context.Context, keys, tags []string) ([][]byte, error) {
	if err := b.e.check(ctx); err != nil {
		return nil, err
	}
	if err := checkRead(keys, tags); err != nil {
		return nil, err
	}
	return b.e.get(ctx, keys)
}

// Delete removes keys; missing keys are ignored.
func (b *Backend) Delete(ctx context.Context, keys []string) error {
	return b.DeleteTagged(ctx, keys, nil)
}

// DeleteTagged is Delete with the tag each key was written with; an unknown
// tag fails the call before anything is deleted. It implements
// backends.TaggedDeleter.
func (b *Backend) DeleteTagged(ctx context.Context, keys, tags []string) error {
	if err := b.e.check(ctx); err != nil {
		return err
	}
	if err := checkRead(keys, tags); err != nil {
		return err
	}
	return b.e.deleteKeys(ctx, keys)
}

// Close closes the DataSystem. Later calls, and Publish of a Staged
// allocated before, return ErrClosed.
func (b *Backend) Close() error { return b.e.close() }
