// Package file is tqgo's durable embedded engine: the data and the
// partitions' logs of one process, kept in memory and in a directory
// through a write-ahead log, so that a queue outlives its process.
//
// It registers the "file" scheme:
//
//	tq.Open(ctx, "file:///var/lib/tq-job")                // absolute
//	tq.Open(ctx, "file:tq-job?sync=always")              // relative to the working directory
//
// The directory is created if missing.
package file
