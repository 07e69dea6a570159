// Package backends is what a storage engine implements to carry tqgo's
// data and metadata, as database/sql/driver is for databases: trainer
// code imports package tq; engines import this package, never tq.
//
// An engine is an [Opener], registered under a URL scheme by [Register] in
// an init function (import _ "github.com/tqgo/tqgo/backends/redis" makes
// tq.Open know redis://), that returns an [Engine]:
//
//   - Data, a [Store]: cells, opaque values under storage keys
//     ([StorageKey]: "<global_index>@<field>", TransferQueue's layout). A
//     plain key-value engine implements [KV], which [FromKV] makes a Store;
//     a [Stager] lends the engine's memory, for writes with no copy.
//   - Log, a shared engine's metadata: per partition, a numbered,
//     time-stamped [Log] of opaque records, to which tq applies the same
//     rules in every process (LOG.md specifies the records). A [LogCells]
//     writes and reads cells with the log in one request.
//   - Or Meta: a metadata store of the engine's own, whose contract is
//     package metadata's. Only a Local engine may give neither.
//
// A write failing with an error matching [ErrOutcomeUnknown] may have
// applied; any other failed write applied nothing. Engines report each
// request they wait on with [CountRoundTrips]; backendtest's suites check
// every contract.
package backends
