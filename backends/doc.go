// Package backends is what a storage engine implements to carry tqgo's data
// and metadata, in the manner of database/sql/driver: trainer code imports
// package tq; engines import this package (and codec), never tq.
//
// # Data
//
// A [Backend] stores opaque packed objects by storage key. It is small on
// purpose; extra abilities are optional interfaces found by type assertion:
//
//   - [Allocator]: the engine hands out destination buffers of its own
//     memory, the codec packs straight into them, and [Staged.Publish] makes
//     them visible (zero-copy write; memory and yuanrong implement it).
//   - [TagReporter]: the engine reports an opaque tag per key on write (a
//     strategy, in TransferQueue's words "custom backend meta"), which the
//     metadata keeps and hands back through [TaggedReader] and [TaggedDeleter].
//   - [SplitWriter] and [SplitReader]: the engine stores a value given as a
//     head and a body, and reads a value straight into a head and a body of
//     the caller's, so tq moves a tensor cell as the codec's prefix and the
//     row of a stacked tensor, with no packing copy on the way out and no
//     stacking copy on the way in (redis implements both, memory the
//     writer: its Get is already zero-copy).
//   - [CommitWriter]: the engine writes cells and commits the rows that
//     reference them in one request, when the MetaStore is its own (redis:
//     one MULTI/EXEC), so a put waits for one round trip fewer.
//   - [ConfirmingReader], with a MetaStore that is a [CachedLookup]: the
//     metadata keeps a copy of the rows in the client, and the engine
//     checks that copy in the request that reads the cells, so a read of
//     rows the client has seen takes one round trip, not two (redis).
//
// Wrappers (metrics, fault injection) must pass these through; see
// backendtest.Faulty for one that does.
//
// # Metadata
//
// A [MetaStore] plays the part of TransferQueue's controller: it maps a
// partition's keys to global indexes (allocated once, monotonic, never
// reused), records which fields each row has committed with their dtype and
// shape, and keeps each row's tag. See its doc for the write protocol.
// Its optional interfaces:
//
//   - [CachedLookup]: a client-side copy of rows, for [ConfirmingReader]
//     (see Data above).
//   - [Reclaimer]: the store remembers every cell it handed out a
//     generation for until the caller reports it deleted, and hands back
//     those nothing references (replaced, rolled back, abandoned by a
//     client that died, left by a clear whose deletes failed), so
//     tq.Client.Reclaim deletes leaked cells with no scan of the data
//     (memory implements it).
//
// # Registry
//
// Engines register an [Opener] under a URL scheme in an init function;
// tq.Open looks the scheme up. Importing an engine package for its side
// effect (import _ "github.com/tqgo/tqgo/backends/redis") makes its scheme
// available.
package backends
