// Package backendtest checks that a storage engine keeps the contracts of
// package backends, in the manner of testing/fstest.TestFS: an engine's own
// test calls [Run] with a constructor of its [backends.Backend] and
// [RunMeta] with one of its [backends.MetaStore], and every subtest that
// fails names the contract broken. It also holds [Faulty], a wrapper that
// injects errors and delays into any Backend, so tests of higher layers need
// no server to see a backend fail.
//
// # The data contract Run checks
//
//   - Get returns nil for a missing key, without error; present and missing
//     keys mix freely in one call, and a key may repeat.
//   - Put replaces; Delete of a missing key is no error; an empty batch (nil
//     or zero-length slices) is a no-op that returns nil, and Get of an
//     empty batch returns an empty result.
//   - Mismatched slice lengths (keys and values, keys and sizes, keys and
//     tags) give an error wrapping [backends.ErrInvalid] and write nothing;
//     so does a negative size passed to Allocate.
//   - Values round-trip byte-exactly: every byte value, 8 MiB in one value,
//     64 x 256 KiB in one batch, 25,000 keys in one call.
//   - A zero-length value is a value: Put of []byte{} (or a published
//     zero-size buffer) reads back as a non-nil slice of length 0, never as
//     nil, which would mean missing. Callers never Put a nil value; the suite
//     does not define what an engine does with one.
//   - The engine is safe for concurrent use: goroutines writing, reading and
//     deleting disjoint and shared keys never see a torn value, and the final
//     state is that of the last write of each key.
//   - A call with an already cancelled context returns an error wrapping
//     context.Canceled and has no effect.
//   - After Close, Put, Get, Delete, Allocate, the Tagged methods and Publish
//     of a buffer staged before Close return an error wrapping
//     [backends.ErrClosed].
//
// For an [backends.Allocator]: Allocate returns one buffer per key, each
// exactly its size long and sharing no bytes with another buffer of the same
// or another live Staged; nothing is visible (Get returns nil, or the old
// value) until Publish; Publish replaces old values; Discard publishes
// nothing; a second Publish, or Publish after Discard, is an error; Discard
// after a successful Publish leaves the values visible; Allocate of an empty
// batch returns a Staged with no buffers whose Publish succeeds. A Staged
// that implements [backends.TagReporter] reports one tag per key after
// Publish.
//
// For the tagged interfaces: PutTagged returns one tag per key; reading back
// with those tags (GetTagged when the engine is a [backends.TaggedReader],
// else Get) gives the values; DeleteTagged with them removes the keys; the
// tag "" names a key written by plain Put. An engine that is not a
// TaggedReader must serve plain Get for values written by any path.
//
// # The metadata contract RunMeta checks
//
// Beyond what the [backends.MetaStore] doc says: indexes are distinct,
// increase in key order within one Prepare and from one Prepare to the next
// (across partitions too), and a key re-created after Delete or
// DeletePartition gets a new, larger index; a fresh row's first generation of
// a field is 0, then 1, 2, ...; a Commit that fails with ErrConflict applies
// none of its updates; a committed row with a Tag is visible even with no
// fields; a partition whose committed rows were all deleted is not listed.
//
// Values round-trip as stored: FieldInfo's DType, Shape, Gen and BackendTag
// (a nil and an empty Shape count as equal; DType tells a tensor from a
// non-tensor), and tag values of the Go types string, bool, int64 and
// float64, each of which must come back with the same Go type and value
// (float64(2) must not come back as int64(2), nor int64(1<<62+3) as a
// float64). A store that serialises tags must keep the type; tag values of
// other types are not checked.
//
// For a store that is a [backends.Reclaimer] (RunMeta's Reclaim subtests,
// skipped for another): Garbage returns exactly the cells nothing
// references and not yet reported swept, whatever the order of Prepare,
// Commit, Delete, DeletePartition, Garbage and Swept (checked against a
// model over random sequences): superseded and stale generations with
// their tags, the committed cells of removed rows at once, and
// reservations (of live or removed rows, tag "") once older than
// olderThan, which it aborts so that their Commit fails with ErrConflict,
// applying nothing; a younger reservation is never returned and commits.
// Swept of a pending reservation aborts it; Swept of cells that are not
// garbage (committed ones, unknown ones, another partition's) changes
// nothing; a negative olderThan is an error wrapping [backends.ErrInvalid].
//
// # Keys, partitions and instances
//
// Every key and partition name the suites use starts with a prefix unique to
// the Run call and subtest, so one server may serve every subtest and keep
// data between test runs. Each call of newBackend or newMeta must return a
// new instance (it may share a server) and register its own cleanup with
// t.Cleanup; the Closed subtests close their instance, so that cleanup must
// tolerate an instance already closed.
package backendtest
