// Package yuanrong ports TransferQueue's YuanrongStorageClient (its general
// KV strategy) to Go: per-sample objects packed by the codec straight into
// openYuanrong datasystem buffers, with TransferQueue's key limits and
// DS_MAX_WORKERS.
//
// # The flow
//
// A put validates every key and value first, then creates one buffer per
// key in the datasystem at the object's packed size (MCreate, in rounds of
// PutKeysLimit keys), packs each value in place with the codec's
// size-aware packer (objects under 256 KiB on the calling goroutine, larger
// ones on a pool of at most DSMaxWorkers, and only when the batch is big
// enough to pay for waking it), and publishes the buffers round by round
// (MPublish). The datasystem does not overwrite, so each round deletes its
// keys first, as TransferQueue does before mset_d2h. If a round fails, the
// put is rolled back by index: every key it may have published is deleted,
// every buffer not published is released, and the first error is returned.
// A get fetches buffers (MGet, in rounds of GetClearKeysLimit) and decodes
// them without copying; a missing key comes back as nil. A clear deletes in
// rounds of GetClearKeysLimit.
//
// Each key written gets a strategy tag, TagKV (TransferQueue's "custom
// backend meta"), for the caller to keep and hand back on get and clear,
// so that further strategies can be routed by it; an unknown tag fails the
// call before any I/O with ErrUnknownStrategy.
//
// # Two faces, one engine
//
// [Client] is the direct port: Put(ctx, keys, values) returns the tags,
// Get and Clear take them back. It owns a codec.Packer and closes its pool
// on Close.
//
// [Backend] is the same engine as a tq data backend: it implements
// backends.Backend, backends.Allocator (tq packs into the datasystem's
// buffers; the Staged reports tags as a backends.TagReporter),
// backends.TaggedWriter, backends.TaggedReader and backends.TaggedDeleter.
// It registers the scheme "yuanrong": tq.Open(ctx, "yuanrong://") opens a
// Backend over a fresh in-process [Local] datasystem and keeps the metadata
// in process; the query parameters put_keys_limit and get_clear_keys_limit
// set the key limits.
//
// # The datasystem
//
// [DataSystem] is the slice of the datasystem's KVClient the port needs
// (MCreate, MPublish, MGet, Delete), documented call by call. [NewLocal]
// implements it in process with the datasystem's semantics. README.md
// explains how to put the real SDK behind the interface with cgo.
package yuanrong
