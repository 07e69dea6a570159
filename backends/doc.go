// Package backends is what a storage engine implements to carry tqgo's data
// and metadata, in the manner of database/sql/driver: trainer code imports
// package tq; engines import this package (and codec), never tq.
//
// An engine is an [Opener], registered under a URL scheme, that returns an
// [Engine]: a [Store] for the data and a [MetaStore] for the metadata.
//
// # Data: Store
//
// A Store writes, reads and deletes cells: opaque values under storage
// keys ([StorageKey]: "<global_index>@<field>", TransferQueue's layout).
//
//   - Write takes each value as a Head and a Body (a tensor travels as the
//     codec's prefix and the caller's own row, never packed first) and
//     reports a Tag per cell if the engine wants one back (a storage
//     strategy: TransferQueue's "custom backend meta"), which the
//     metadata keeps and Read and Delete hand back.
//   - Read reads each value into the caller's Head and Body when it has
//     their length (a stacked column's row, filled in place), or returns
//     it whole.
//   - A plain key-value engine implements [KV] (Put, Get, Delete, Close)
//     and [FromKV] makes the Store: an engine in a screen of code.
//
// Optional: a [Stager] hands out the engine's own memory for values the
// codec packs, which Write then publishes with no copy (memory, yuanrong).
//
// # Metadata: MetaStore
//
// A MetaStore plays the part of TransferQueue's controller: it maps a
// partition's keys to global indexes (allocated once, monotonic, never
// reused), records which fields each row has committed with their dtype and
// shape, keeps each row's tag, and finds cells nothing references
// (Garbage). A write goes Prepare, cells, Commit; see MetaStore. Every
// failure is classed: an error matching [ErrOutcomeUnknown] may have
// applied; any other applied nothing.
//
// Metadata must be as shared as the data: an engine over storage other
// processes reach returns its MetaStore; only a Local engine may return
// none and get an in-process one (package memory's).
//
// Optional: a MetaStore whose server also holds the data is [Colocated]: it
// writes cells with their commit, and reads cells confirming the rows, in
// one request each (redis).
//
// # Observing
//
// An engine reports each request it waits on with [CountRoundTrips], so a
// tracer sees the round trips of every call.
//
// # Testing
//
// Package backendtest holds the conformance suites every engine runs
// (RunStore, RunMeta, ...) and wrappers (Faulty) that pass every
// capability through.
//
// # Registry
//
// Engines register an [Opener] under a URL scheme in an init function;
// tq.Open looks the scheme up. Importing an engine package for its side
// effect (import _ "github.com/tqgo/tqgo/backends/redis") makes its scheme
// available.
package backends
