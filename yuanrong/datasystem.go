package yuanrong

import "context"

// DataSystem is the part of openYuanrong datasystem's KVClient that the
// general KV path uses, one method per batch call of the SDK (README.md
// maps each to the C++ and Python calls). NewLocal is an in-process
// implementation; a binding of the real SDK implements it over cgo.
//
// Implementations must be safe for concurrent use. Every batch takes
// parallel slices; an empty batch is a no-op that returns nil (and empty
// results), although the SDK itself rejects empty batches with K_INVALID:
// a binding short-circuits them. After Close every method returns an error
// matching ErrClosed, and a call whose context is already done returns the
// context's error and has no effect.
type DataSystem interface {
	// MCreate allocates one buffer per key in the datasystem's memory,
	// Data() exactly sizes[i] bytes long (KVClient::MCreate). A created
	// buffer is invisible to MGet until MPublish. Creating a key that is
	// already published is allowed: the conflict shows on MPublish. On
	// error no buffer of the call stays allocated. Mismatched lengths, a
	// negative size or an empty key give ErrInvalid.
	MCreate(ctx context.Context, keys []string, sizes []int) ([]Buffer, error)
	// MPublish makes created buffers visible under their keys
	// (KVClient::MSet(buffers)). It never overwrites: a key that already
	// has a published value fails with a *KeyError matching ErrKeyExists,
	// and that buffer stays created: the caller may delete the key and
	// publish the buffer again, or release it. The other buffers of the
	// call may still be published, so a caller that sees an error deletes
	// every key of the call. A buffer that is not this datasystem's, or
	// was already published or released, gives ErrInvalid and nothing of
	// the call is published. After MPublish the caller must not write the
	// buffer's Data again.
	MPublish(ctx context.Context, bufs []Buffer) error
	// MGet returns the published value of each key, nil for a missing (or
	// created but unpublished) key; a missing key is not an error, and a
	// key may repeat (KVClient::Get(keys, buffers)). The returned slices
	// stay valid for as long as the caller holds them, also after the key
	// is deleted, and must not be modified: decoding aliases them.
	MGet(ctx context.Context, keys []string) ([][]byte, error)
	// Delete removes published keys; missing keys are ignored
	// (KVClient::Del(keys, failedKeys)). Buffers created but not published
	// under these keys are not affected.
	Delete(ctx context.Context, keys []string) error
	// Close releases the connection. Later calls return ErrClosed.
	Close() error
}

// Buffer is one buffer allocated by MCreate (the SDK's
// std::shared_ptr<Buffer>). It is not safe for concurrent use: one
// goroutine fills it, then hands it to MPublish or releases it.
type Buffer interface {
	// Key is the key the buffer will be published under.
	Key() string
	// Data is the buffer's memory (Buffer::MutableData), exactly the size
	// asked for: the codec packs straight into it.
	Data() []byte
	// Release frees a buffer that was not published. It is a no-op after a
	// successful MPublish or an earlier Release, and safe after Close.
	Release()
}
