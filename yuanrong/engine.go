package yuanrong

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/tqgo/tqgo/backends"
)

// TagKV is the strategy tag of the general KV path: every key this package
// writes is packed by the codec into datasystem buffers. TransferQueue
// calls the tag "custom backend meta"; tq keeps it per cell
// (metadata.FieldInfo.BackendTag) and hands it back on get and clear, so
// that further strategies (TransferQueue's NPU tensor path, say) can be
// routed by it later. The empty tag (a key whose metadata kept no tag) is
// read by the same path.
const TagKV = "kv"

// cleanupTimeout bounds a rollback, which runs even when the caller's
// context is done: the keys of a failed put must not stay behind.
const cleanupTimeout = 30 * time.Second

// engine is the code the Client and the Backend share: validation,
// batching at the key limits, create → publish with rollback, get and
// delete. It is safe for concurrent use when its DataSystem is.
type engine struct {
	ds       DataSystem
	putLimit int
	getLimit int
	closed   atomic.Bool
}

func newEngine(ds DataSystem, o options) (*engine, error) {
	if ds == nil {
		return nil, invalidf("nil DataSystem")
	}
	return &engine{ds: ds, putLimit: o.putLimit, getLimit: o.getLimit}, nil
}

func (e *engine) check(ctx context.Context) error {
	if e.closed.Load() {
		return ErrClosed
	}
	return ctx.Err()
}

// close marks the engine closed and closes the DataSystem, once.
func (e *engine) close() error {
	if e.closed.Swap(true) {
		return nil
	}
	return e.ds.Close()
}

// checkKey: the datasystem rejects empty keys and keys of 256 bytes or more.
func checkKey(i int, k string) error {
	if k == "" {
		return invalidf("key %d is empty", i)
	}
	if len(k) > MaxKeyLen {
		return &KeyError{Key: k, Err: invalidf("key of %d bytes (at most %d)", len(k), MaxKeyLen)}
	}
	return nil
}

// checkWrite validates the keys of a write against n values: valid and
// unique (the datasystem would refuse the second publish of a key anyway,
// but only after creating and packing everything).
func checkWrite(keys []string, n int) error {
	if len(keys) != n {
		return invalidf("%d keys, %d values", len(keys), n)
	}
	seen := make(map[string]struct{}, len(keys))
	for i, k := range keys {
		if err := checkKey(i, k); err != nil {
			return err
		}
		if _, dup := seen[k]; dup {
			return &KeyError{Key: k, Err: invalidf("key appears twice in one put")}
		}
		seen[k] = struct{}{}
	}
	return nil
}

// checkRead validates the keys and strategy tags of a get or clear; tags is
// nil (every key written by the general KV path) or one tag per key. Every
// tag is checked before any I/O, so an unknown one fails the whole call.
func checkRead(keys, tags []string) error {
	if tags != nil && len(tags) != len(keys) {
		return invalidf("%d keys, %d tags", len(keys), len(tags))
	}
	for i, k := range keys {
		if err := checkKey(i, k); err != nil {
			return err
		}
		if tags == nil {
			continue
		}
		switch tags[i] {
		case TagKV, "":
		default:
			return &KeyError{Key: k, Err: fmt.Errorf("%w %q", ErrUnknownStrategy, tags[i])}
		}
	}
	return nil
}

// rounds calls f for each round [lo, hi) of n items, at most limit a round,
// in order, and stops at the first error.
func rounds(n, limit int, f func(lo, hi int) error) error {
	for lo := 0; lo < n; lo += limit {
		if err := f(lo, min(lo+limit, n)); err != nil {
			return err
		}
	}
	return nil
}

// stage is one put's buffers, created in the datasystem and not yet
// visible. Not safe for concurrent use.
type stage struct {
	e    *engine
	keys []string
	bufs []Buffer
	data [][]byte // bufs[i].Data(), what the codec packs into
	done bool     // published, discarded or rolled back
}

// create allocates a buffer per key, in rounds of putLimit keys. On error
// it releases what earlier rounds created.
func (e *engine) create(ctx context.Context, keys []string, sizes []int) (*stage, error) {
	st := &stage{e: e, keys: keys, bufs: make([]Buffer, 0, len(keys)), data: make([][]byte, 0, len(keys))}
	err := rounds(len(keys), e.putLimit, func(lo, hi int) error {
		if err := e.check(ctx); err != nil {
			return err
		}
		backends.CountRoundTrips(ctx, 1)
		bufs, err := e.ds.MCreate(ctx, keys[lo:hi], sizes[lo:hi])
		if err != nil {
			return fmt.Errorf("yuanrong: create keys %d-%d: %w", lo, hi-1, err)
		}
		if len(bufs) != hi-lo {
			releaseAll(bufs)
			return fmt.Errorf("yuanrong: create keys %d-%d: datasystem returned %d buffers", lo, hi-1, len(bufs))
		}
		st.bufs = append(st.bufs, bufs...) // all of them, to release on error
		for i, b := range bufs {
			data := b.Data()
			if len(data) != sizes[lo+i] {
				return fmt.Errorf("yuanrong: create key %q: datasystem returned %d bytes for %d", keys[lo+i], len(data), sizes[lo+i])
			}
			st.data = append(st.data, data)
		}
		return nil
	})
	if err != nil {
		releaseAll(st.bufs)
		return nil, err
	}
	return st, nil
}

func releaseAll(bufs []Buffer) {
	for _, b := range bufs {
		b.Release()
	}
}

// publish makes the buffers visible, in rounds of putLimit keys. Each
// round first deletes its keys, since the datasystem does not overwrite
// (TransferQueue deletes before mset_d2h for the same reason): a reader
// sees the old value until the round's delete, no value in between, and
// the new one after its publish, never a mix. If a round fails, publish
// rolls the whole put back: it deletes every key of the put (those of the
// rounds before were published or deleted already, so the keys of later
// rounds go too: after a failed put none of its keys is left, a state the
// caller can tell from the error alone), releases the buffers not
// published, and returns the round's error. A put whose context ends before
// its first round changes nothing.
func (st *stage) publish(ctx context.Context) error {
	if st.done {
		return invalidf("buffers already published or discarded")
	}
	e := st.e
	err := rounds(len(st.keys), e.putLimit, func(lo, hi int) error {
		if err := e.check(ctx); err != nil {
			if lo == 0 { // nothing deleted or published yet: change nothing
				releaseAll(st.bufs)
				return err
			}
			return errors.Join(err, st.rollback(ctx))
		}
		err := st.publishRound(ctx, lo, hi)
		if err != nil {
			err = fmt.Errorf("yuanrong: publish keys %d-%d: %w", lo, hi-1, err)
			return errors.Join(err, st.rollback(ctx))
		}
		return nil
	})
	st.done = true
	return err
}

// maxPublishAttempts bounds how often a round publishes keys that another
// writer published between this round's delete and its publish.
const maxPublishAttempts = 10

// publishRound deletes the keys of bufs[lo:hi] and publishes the buffers.
// A key another writer published in between (ErrKeyExists) is deleted and
// published again: the later put wins, as with any store that overwrites.
func (st *stage) publishRound(ctx context.Context, lo, hi int) error {
	e := st.e
	keys, bufs := st.keys[lo:hi], st.bufs[lo:hi]
	for attempt := 1; ; attempt++ {
		if err := e.deleteKeys(ctx, keys); err != nil {
			return err
		}
		backends.CountRoundTrips(ctx, 1)
		err := e.ds.MPublish(ctx, bufs)
		if err == nil {
			return nil
		}
		taken := keysTaken(err)
		if taken == nil || attempt == maxPublishAttempts {
			return err
		}
		keys, bufs = nil, slices.DeleteFunc(slices.Clone(bufs), func(b Buffer) bool { return !taken[b.Key()] })
		for _, b := range bufs {
			keys = append(keys, b.Key())
		}
	}
}

// keysTaken returns the keys MPublish refused because they were published
// already, or nil if it failed for any other reason too.
func keysTaken(err error) map[string]bool {
	taken := make(map[string]bool)
	var walk func(error) bool
	walk = func(err error) bool {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				if !walk(e) {
					return false
				}
			}
			return true
		}
		var ke *KeyError
		if errors.As(err, &ke) && errors.Is(ke.Err, ErrKeyExists) {
			taken[ke.Key] = true
			return true
		}
		return false
	}
	if !walk(err) || len(taken) == 0 {
		return nil
	}
	return taken
}

// rollback deletes every key of the put and releases every buffer not
// published. It runs on a context of its own: the caller's may be the
// reason for it.
func (st *stage) rollback(ctx context.Context) error {
	releaseAll(st.bufs)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := st.e.deleteKeys(ctx, st.keys); err != nil {
		return fmt.Errorf("yuanrong: rollback left keys of the put behind: %w", err)
	}
	return nil
}

// discard releases the buffers without publishing them.
func (st *stage) discard() {
	if !st.done {
		st.done = true
		releaseAll(st.bufs)
	}
}

// get reads keys in rounds of getLimit; a missing key gives nil.
func (e *engine) get(ctx context.Context, keys []string) ([][]byte, error) {
	out := make([][]byte, len(keys))
	if err := e.read(ctx, keys, func(i int, v []byte) { out[i] = v }); err != nil {
		return nil, err
	}
	return out, nil
}

// read reads keys in rounds of getLimit and hands each key's value (nil
// for a missing key) to set with the key's index, round by round.
func (e *engine) read(ctx context.Context, keys []string, set func(i int, v []byte)) error {
	return rounds(len(keys), e.getLimit, func(lo, hi int) error {
		if err := e.check(ctx); err != nil {
			return err
		}
		backends.CountRoundTrips(ctx, 1)
		got, err := e.ds.MGet(ctx, keys[lo:hi])
		if err != nil {
			return fmt.Errorf("yuanrong: get keys %d-%d: %w", lo, hi-1, err)
		}
		if len(got) != hi-lo {
			return fmt.Errorf("yuanrong: get keys %d-%d: datasystem returned %d values", lo, hi-1, len(got))
		}
		for j, v := range got {
			set(lo+j, v)
		}
		return nil
	})
}

// deleteKeys deletes keys in rounds of getLimit.
func (e *engine) deleteKeys(ctx context.Context, keys []string) error {
	return rounds(len(keys), e.getLimit, func(lo, hi int) error {
		backends.CountRoundTrips(ctx, 1)
		if err := e.ds.Delete(ctx, keys[lo:hi]); err != nil {
			return fmt.Errorf("yuanrong: delete keys %d-%d: %w", lo, hi-1, err)
		}
		return nil
	})
}

// tagsOf is the strategy tag of each of n keys written by the KV path.
func tagsOf(n int) []string {
	tags := make([]string, n)
	for i := range tags {
		tags[i] = TagKV
	}
	return tags
}
