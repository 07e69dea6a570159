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
// [Backend] is the same engine as a tq data store: it implements
// backends.Store and backends.Stager. tq stages a cell per value (Stage
// creates the datasystem buffers), packs into them, and Write publishes
// them in place with no copy; a cell of the caller's memory is copied into
// a buffer Write creates. Write reports TagKV per cell (Cell.Tag), which
// Read and Delete take back; Read fills the caller's destination or hands
// out the datasystem's memory (Value) without a copy.
//
// # Where the metadata lives
//
// The datasystem holds data only: it has no atomic index allocation or
// commit to build a MetaStore on, so tq's metadata must come from
// elsewhere, and it must be as shared as the data. The package registers
// the scheme "yuanrong": tq.Open(ctx, "yuanrong://") opens a Backend over
// a fresh in-process [Local], whose data no other process reaches, so the
// engine is Local (backends.Engine.Local) and tq keeps the metadata in
// process, as TransferQueue keeps it in its controller; the query
// parameters put_keys_limit and get_clear_keys_limit set the key limits.
// A URL naming a real datasystem ("yuanrong://host:port"), which other
// processes share, fails with an error matching ErrInvalid and ErrNoSDK:
// build the engine by hand over an SDK binding and a MetaStore every
// process shares,
//
//	b, _ := yuanrong.NewBackend(ds)
//	q, _ := tq.New(backends.Engine{Data: b, Meta: sharedMeta})
//
// # The datasystem
//
// [DataSystem] is the slice of the datasystem's KVClient the port needs
// (MCreate, MPublish, MGet, Delete), documented call by call. [NewLocal]
// implements it in process with the datasystem's semantics. README.md
// explains how to put the real SDK behind the interface with cgo.
package yuanrong
