package yuanrong

import (
	"context"
	"errors"
	"fmt"

	"github.com/tqgo/tqgo/codec"
)

// Client is the port of TransferQueue's YuanrongStorageClient (its general
// KV strategy): Put packs values straight into datasystem buffers and
// publishes them, Get decodes the buffers it fetched without copying, and
// both, like Clear, run in rounds at the key limits.
//
// A Client is safe for concurrent use when its DataSystem is. It owns its
// packer's goroutine pool and the DataSystem: Close releases both.
type Client struct {
	e      *engine
	packer *codec.Packer
}

// NewClient returns a Client over ds, which it takes ownership of.
func NewClient(ds DataSystem, opts ...Option) (*Client, error) {
	o := defaultOptions()
	if err := o.apply(opts); err != nil {
		return nil, err
	}
	e, err := newEngine(ds, o)
	if err != nil {
		return nil, err
	}
	return &Client{e: e, packer: codec.NewPacker(o.pack)}, nil
}

// Put stores values[i] under keys[i] and returns the strategy tag of each
// key (TagKV), for the caller to keep and pass back to Get and Clear. A
// value is anything the codec packs (codec.Tensor, scalars, strings, []byte,
// lists, maps).
//
// Everything is validated before the first datasystem call: keys (non-empty,
// at most MaxKeyLen bytes, unique) and every value (a bad one gives a
// *KeyError matching ErrInvalid and the codec's reason). Then the buffers
// are created at their packed sizes (rounds of PutKeysLimit), packed in
// place and published round by round, each round deleting its keys first
// (the datasystem does not overwrite). If a round fails, Put deletes
// every key of the put and releases the buffers, and returns the first
// error: on error no key of the put is left, not even its old value (a
// round's delete may already have taken it), except that a put whose
// context ends before its first round changes nothing. An empty put
// returns no tags and no error.
func (c *Client) Put(ctx context.Context, keys []string, values []any) ([]string, error) {
	if err := c.e.check(ctx); err != nil {
		return nil, err
	}
	if err := checkWrite(keys, len(values)); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return []string{}, nil
	}
	var (
		st       *stage
		allocErr error
	)
	_, err := c.packer.BatchEncodeInto(values, func(sizes []int) ([][]byte, error) {
		// Every value is valid and sized by now: this is the first call
		// that changes the datasystem.
		st, allocErr = c.e.create(ctx, keys, sizes)
		if allocErr != nil {
			return nil, allocErr
		}
		return st.data, nil
	})
	if err != nil {
		if st != nil {
			st.discard()
		}
		if allocErr != nil {
			return nil, allocErr
		}
		var oe *codec.ObjectError
		if errors.As(err, &oe) && oe.Index < len(keys) {
			return nil, &KeyError{Key: keys[oe.Index], Err: fmt.Errorf("%w: %w", ErrInvalid, oe.Err)}
		}
		if errors.Is(err, codec.ErrClosed) {
			return nil, ErrClosed
		}
		return nil, err
	}
	if err := st.publish(ctx); err != nil {
		return nil, err
	}
	return tagsOf(len(keys)), nil
}

// Get returns the value of each key, nil for a key the datasystem does not
// have (absent is not an error). tags is what Put returned for the keys, or
// nil when every key was written by this package's KV path; an unknown tag
// gives a *KeyError matching ErrUnknownStrategy before anything is read.
// Keys are fetched in rounds of GetClearKeysLimit and decoded without
// copying: tensor bytes and []byte values alias the datasystem's buffers.
// A buffer that does not decode gives a *KeyError matching codec.ErrCorrupt.
func (c *Client) Get(ctx context.Context, keys, tags []string) ([]any, error) {
	if err := c.e.check(ctx); err != nil {
		return nil, err
	}
	if err := checkRead(keys, tags); err != nil {
		return nil, err
	}
	bufs, err := c.e.get(ctx, keys)
	if err != nil {
		return nil, err
	}
	// Decode the buffers present, in one batch, and put them back in place.
	at := make([]int, 0, len(bufs))
	present := make([][]byte, 0, len(bufs))
	for i, b := range bufs {
		if b != nil {
			at = append(at, i)
			present = append(present, b)
		}
	}
	decoded, err := codec.BatchDecodeFrom(present)
	if err != nil {
		var oe *codec.ObjectError
		if errors.As(err, &oe) && oe.Index < len(at) {
			return nil, &KeyError{Key: keys[at[oe.Index]], Err: oe.Err}
		}
		return nil, err
	}
	out := make([]any, len(keys))
	for j, i := range at {
		out[i] = decoded[j]
	}
	return out, nil
}

// Clear deletes keys in rounds of GetClearKeysLimit; missing keys are
// ignored. tags is as for Get, and every tag is checked before the first
// delete.
func (c *Client) Clear(ctx context.Context, keys, tags []string) error {
	if err := c.e.check(ctx); err != nil {
		return err
	}
	if err := checkRead(keys, tags); err != nil {
		return err
	}
	return c.e.deleteKeys(ctx, keys)
}

// PackStats reports which packing path objects took (see codec.Stats).
func (c *Client) PackStats() codec.Stats { return c.packer.Stats() }

// Close waits for packing in flight, releases the packer's pool and closes
// the DataSystem. Later calls return ErrClosed. Close is idempotent.
func (c *Client) Close() error {
	if c.e.closed.Load() {
		return nil
	}
	return errors.Join(c.packer.Close(), c.e.close())
}
