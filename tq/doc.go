// Package tq is the tqgo client: a transfer queue that RL post-training
// workers (rollout, reward, reference, trainer) use to hand each other
// per-sample data, with TransferQueue's KV interface.
//
// A partition is a table: a row per sample (the caller's key), a column per
// field ("input_ids", "responses", "rewards" …). Rows gain columns over
// time: the rollout writes responses, the reward worker later writes rewards
// for the same keys. Each row has a small Tag ({"step": 3, "status":
// "rewarded"}).
//
//	TransferQueue                         tqgo
//	kv_put(key, partition_id, fields, tag)      Client.Put
//	kv_batch_put(keys, partition_id, fields, tags)  Client.BatchPut
//	kv_batch_get(keys, partition_id, select_fields) Client.BatchGet
//	kv_batch_get_by_meta(meta, select_fields)  Client.BatchGetByMeta
//	kv_list(partition_id)                 Client.List, Client.Partitions
//	kv_clear(keys, partition_id)          Client.Clear, Client.ClearPartition
//	clear of single fields                Client.ClearFields
//
// A put to existing keys is the update: the fields it names are replaced,
// the rows' other fields stay, and its tags merge into the rows' (each
// tag key it names overwrites, the others stay). ClearFields removes
// fields from rows, which keep their other fields, their tag and their
// consumption; a task needing a removed field waits for it again.
//
// # How a put flows
//
// BatchPut validates everything first; nothing is written before that
// passes. It then flattens the batch to one cell per (row, field), in
// sorted-field-major order, packs the cells with package codec (size-aware:
// small cells on the calling goroutine, large ones on a pool when enough of
// them pay for it), reserves global indexes in the metadata store, writes
// the cells under "<global_index>@<field>" in chunks of KeysLimit keys
// (packing straight into the engine's memory when it can allocate), and
// commits the metadata last. A reader never sees a field whose bytes are
// not all written; a failed put deletes what it wrote and commits nothing.
// With WithIndexBlocks, a put of new keys takes its indexes from a block
// the client reserved ahead and reserves and commits its rows in one call
// after its cells (see WithIndexBlocks for what that does to index order).
//
// Tags are checked with the rest: a value of a type outside Tag's list
// (pointers, structs, time.Time, complex numbers, NaN ...) fails the put
// with ErrInvalid, naming the key and the tag key, before any engine
// request. Accepted values are normalised (every signed integer to int64,
// every unsigned one to uint64, floats to float64, lists to []any, maps to
// map[string]any) into a deep copy the client owns, so every engine stores
// the same types and every client, the writer included, reads back the
// same Go types and values; changing the caller's tag objects afterwards
// changes nothing stored.
//
// Overwriting a field writes a new generation ("<index>@<field>#<gen>")
// and deletes the old one after the commit, so readers and failures never
// see a half-replaced field.
//
// # Reclaiming leaked cells
//
// A failure can leave cells no row references: a rollback whose deletes
// failed, a client killed between writing cells and committing them or
// before deleting the cells its commit replaced, a Clear whose deletes
// failed. Where the engine's metadata tracks every cell it handed out
// (memory does), Client.Reclaim(ctx, partition, olderThan) deletes them
// with no scan of the data: run it now and then, with olderThan longer
// than any put takes (a put reserved longer ago is taken for abandoned: it
// is aborted and fails with ErrConflict). It never deletes a cell a
// committed row references. In the normal course tq reports every delete
// it makes to the metadata, so Reclaim only has failures to collect.
//
// # Consuming
//
// A Task is a consumer's handle on a partition's consumption by a named
// task: Claim and Wait lease rows ready for it (every field it names
// committed, not acknowledged), Ack, Nack and Extend settle the lease, and
// Consume runs a handler over leases, extending each while the handler
// runs. Delivery is at least once: rows of a lease that ends unacknowledged
// are delivered again. Samplers (Sequential, WithGroups, Ranks,
// TokenBudget, Staleness, a Sampler of one's own) choose what a claim
// takes; GroupDeadline keeps a straggler from wedging a group task; Status
// shows every task's rows by state, who holds each lease (WithName,
// ConsumerName) and the groups waiting for members.
//
// # Capacity and pacing
//
// SetCapacity bounds a partition's rows and bytes: a put that would pass
// them waits for room (or fails with ErrFull: FullPolicy), checked before
// anything is written, and nothing is ever evicted: room is made by
// clearing rows, which ClearAcked does as soon as the named tasks
// consumed them. Pace holds a producer back by policy version until the
// consumers are within a staleness bound, and Ratio (AwaitInsert,
// AwaitSample) keeps a sample-to-insert ratio; both wake on the
// acknowledgement that lets them go.
//
// # Failures and liveness
//
// An engine request that failed without applying anything because the
// server was unavailable is made again by the client's RetryPolicy
// (WithRetry; DefaultRetry rides out a minute); a write whose reply was
// lost is settled by the engine, or fails with ErrOutcomeUnknown. A Wait
// never waits silently: without progress in its partition it logs what it
// waits for, and with Stall it returns a *StallError once the processes
// that feed it (their presence: Announce, Members) are gone.
//
// # Engines
//
// Open picks an engine by URL scheme: "memory://" (or "") is embedded
// and private to the client: two Opens of "memory://" are two queues.
// "memory://NAME" is the process's embedded queue of that name, shared by
// every client opened on it (a Wait in one is woken by a put in another),
// alive while one of them is open: once the last closes, its rows are
// gone and the name starts empty again (see package backends/memory);
// "file:///dir" is embedded and kept in a directory across crashes (see
// package backends/file); "redis://" needs import _
// "github.com/tqgo/tqgo/backends/redis";
// "yuanrong://" needs import _ "github.com/tqgo/tqgo/yuanrong". New takes a
// backend value the caller built.
package tq
