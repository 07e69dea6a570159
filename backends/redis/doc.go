// Package redis is tqgo's Redis engine: data and metadata of a queue in one
// Redis (standalone, TLS, Sentinel through a caller's client, or Cluster),
// so that processes on many machines share one queue.
//
// # Opening
//
// Importing the package registers the schemes redis, rediss, redis+cluster
// and rediss+cluster with package backends, so that
//
//	import _ "github.com/tqgo/tqgo/backends/redis"
//	c, err := tq.Open(ctx, "redis://127.0.0.1:6379/0?prefix=job1")
//
// works. The URL forms:
//
//	redis://[user:password@]host:port[/db][?params]
//	rediss://...                                     the same over TLS
//	redis+cluster://[user:password@]h1:p1,h2:p2,h3:p3[/][?params]
//	rediss+cluster://...                             the same over TLS
//
// A cluster URL names seed nodes, comma-separated (IPv6 literals go in
// addr= parameters instead: redis+cluster://[::1]:7000/?addr=[::1]:7001).
// Parameters this package reads: prefix (namespace, default "tq"),
// io_depth, round_keys, write_round_bytes, read_round_bytes, direct,
// direct_pool_size, replicas and replica_timeout (see the WithXxx options; the last two are
// WithReplicas). Every other parameter goes to go-redis's ParseURL or
// ParseClusterURL, which reject unknown ones: pool_size, dial_timeout,
// read_timeout, write_timeout, max_retries, protocol, client_name, ... A
// URL-opened client honours context deadlines (ContextTimeoutEnabled), and
// OpenURL checks the server answers PING before it returns.
//
// New wraps a redis.UniversalClient the caller built and owns (any
// *redis.Client, *redis.ClusterClient or *redis.Ring); closing the Store
// and its Meta leaves that client open:
//
//	s, err := redis.New(client, redis.WithPrefix("job1"))
//	c, err := tq.New(backends.Engine{Data: s, Meta: s.Meta()})
//
// The Store is a backends.Store and its Meta a backends.MetaStore and
// backends.Colocated; the opener returns them as a backends.Engine. Both
// share the client and the engine's own connections (below): the Meta
// writes and reads cells itself, over the same pool, when it writes them
// with their commit and reads them with their rows.
//
// # Keys
//
// Every key starts with the prefix and a colon, so jobs sharing a server
// never see each other's keys. Data cells are "<prefix>:d:<storage key>"
// (the storage key is TransferQueue's "<global_index>@<field>"), plain
// strings spread over the Cluster's slots. A partition's metadata keys
// share the hash tag {<prefix>:<partition>} and so one slot; the global
// index counter and the partition registry share {<prefix>}. LAYOUT.md
// lists every key, with its type, writer and lifetime.
//
// # Data
//
// Write, Read and Delete move cells in rounds, with IODepth rounds in flight.
// On the engine's own connections a call takes one connection and no
// goroutine of its own: writes send all their rounds as one pipeline,
// reads keep IODepth rounds requested, counting the one they read.
// On a standalone server a round is one multi-key command (MSET, MGET,
// UNLINK): the server pays per command, and one MSET of 1024 x 512 B
// values took 0.34 ms where pipelined SETs took 0.92 ms. On a Cluster a
// round is a pipeline of single-key commands (SET, GET, UNLINK), never a
// multi-key command across slots. Rounds are sized by bytes as well as
// keys: one huge pipeline or reply makes the server fault in fresh pages
// for its query or output buffer, which on the VM this was measured on
// cost more than the copy (see bench_test.go); a read round still carries
// at least 4 values, up to 4 times its size, since a round trip per large
// value cost more. On its own connections a read sizes its rounds by its
// cells' destinations; through go-redis it does not know value sizes in
// advance, so a Store keeps a running mean of the sizes it read and sizes
// read rounds from it (its first read learns from a round of 16 keys).
// Every cell's Tag is "": the engine keeps no per-cell strategy. Write
// keeps no reference to a cell's Head or Body once it returns; the engine
// is not a backends.Stager (Redis has no memory a client can write into).
//
// Cells skip go-redis on a standalone server: tq hands Write a tensor cell
// as the codec's prefix (Head) and the row of the caller's tensor (Body),
// and Read a cell's destination as its row of the stacked column. go-redis can do
// neither (it writes one buffer per value through its own write buffer, and
// allocates every value it reads), so the Store keeps a few plain RESP2
// connections of its own, dialled, authenticated and SELECTed as the
// client's (through the client's Dialer, so TLS and Sentinel work), and
// sends MSETs (large values with writev, from the caller's memory) and
// MGETs (values read into the caller's memory). A request that fails on
// a connection that sat idle is sent once more on a new one (both are safe
// to repeat). On a Cluster, or with an OnConnect hook or streaming
// credentials, both go through go-redis with a copy. The own connections
// stay because they beat go-redis on tensor cells, by a wide margin for
// reads and a smaller one for writes (BenchmarkOwnConnVsGoRedis measures
// it); WithDirectConnections turns them off.
//
// # Connections
//
// pool_size bounds every connection the engine opens to a server. OpenURL
// splits it: the engine's own connections take direct_pool_size of it
// (WithDirectPoolSize; default half, rounded down) and go-redis's pool
// gets the rest, so the two never exceed pool_size together (go-redis's
// default pool_size, 10 per GOMAXPROCS, is split alike; pool_size=1
// leaves the engine no own connection). Each call on the own connections
// holds one while it runs, and waits for one when all are held. New does
// not resize the caller's client: its own connections come beside the
// client's pool (see WithDirectPoolSize). The Store and its Meta share
// them.
//
// Hooks given with WithHooks are added to the client and also see the
// own connections' dials and requests, described as go-redis commands
// (see WithHooks), so tracing and metrics see all the traffic.
//
// # Metadata
//
// Meta has exactly the semantics of backends/memory's MetaStore (the
// conformance suite in backends/backendtest checks both): monotonic,
// never reused global indexes; a fresh generation per (row, field) in
// Prepare; Commit reporting Superseded and Stale cells and failing with
// backends.ErrConflict, applying nothing, when a row was deleted or
// re-created since Prepare; tags merged key by key; prepared rows
// invisible until committed.
//
// Each partition's metadata is a log in one Redis list: every Prepare,
// Commit and Delete appends one record holding its whole batch (keys,
// the batch's few distinct field sets, tags; see record.go), and every
// Meta keeps a view of the partitions it uses, the state the log's
// records make when replayed in order (see view.go). A write computes its
// outcome against its view and appends its record with a script that
// checks, atomically, that the log still has the epoch, length and head
// the view has; if another writer came first, the script replies with
// the records the view lacks, and the write computes again. A read
// fetches the records its view lacks (mostly none) and answers from the
// view. Every call is thus one script of a few arguments on the
// partition's slot, whatever the batch size, and the server never parses
// a record: per-row entries would cost the server 0.25-0.3 ms per write
// of 1024 rows plus Lua's per-argument work; a record is one string.
// LAYOUT.md gives every key and byte format, and the replay rules,
// enough for a program in another language to list a partition's rows and
// read their cells.
//
// # Consumption
//
// The Meta is also a backends.Queue: each partition's consumption (which
// rows each task's consumers hold, acked, dropped or let die) lives in
// keys of the partition's slot beside its log, every transition is one
// script judged by the server's clock, and a Claim on a current view is
// one round trip (see queue.go; LAYOUT.md section 7). A Delete or
// DeletePartition removes its rows' consumption in the script that
// appends it. Wait blocks on the server: each bump of a partition's
// change counter also appends the counter to the partition's wake stream,
// and one watcher per Meta and partition waits in XREAD BLOCK on it (on
// a connection of a client the Meta opens for its waits), reading from
// the counter it knows, so that a commit after the claim that took the
// mark always wakes it; the same round brings the view the records the
// wake announces, so the claim after a Wait is one round trip; idle, it
// sends one request a second. With
// WithReplicas,
// a Claim, Settle or Reset that wrote waits for the replicas as the log's
// writes do; without it, a failover may lose recent leases and acks, whose
// rows are then delivered again.
//
// # Lost replies and failovers
//
// Every record carries the random id of the write that made it, and the
// log's head is a hash chain over those ids. So:
//
//   - A write sent twice (go-redis resends a command whose reply it lost;
//     its default MaxRetries is 3) applies once: the log accepts a record
//     only at the position it was computed for, and the second send finds
//     the first's record and reports it applied.
//   - A write whose request failed without a reply is settled before the
//     call returns: a second script either finds the write's record
//     (applied) or, if the log is still where the write was computed,
//     appends a fence record, so that a copy of the request still on its
//     way can never apply (not applied). Only when the server cannot be
//     asked (within 10 s), or the log was replaced meanwhile (a
//     compaction's snapshot or a delete, which keep no ids of the records
//     before them), does the call return an error matching
//     backends.ErrOutcomeUnknown; every other error means nothing was
//     applied, and tq rolls such a put back.
//   - A view whose records do not chain to the log's head is not looking
//     at the log it replayed (a replica promoted before it had the last
//     records, a log truncated or rewritten with its epoch kept): the
//     client drops it and replays the log, and no write is ever accepted
//     against it, since the script checks the head.
//   - WithReplicas (replicas=N in the URL) makes an acknowledged commit or
//     clear mean replicated: WAIT N after each, and ErrNotReplicated (which
//     matches backends.ErrOutcomeUnknown) when too few replicas answered,
//     or when the write was found applied after its reply was lost (the
//     count of replicas went with it).
//     Without it, a failover to a lagging replica loses the writes it
//     lacked, though every client then agrees on what is left. The
//     promoted replica's index counter is behind, so it hands out indexes
//     again: a put in flight across the failover holds storage keys that
//     may be another row's now. Its commit fails with
//     backends.ErrReservationLost, and its rollback first asks the log to
//     abandon its reservations, which reports them lost too: tq then
//     deletes none of its cells. What remains is a put that writes its
//     cells after another row got the same index, overwriting them. Use
//     replicas=1 (a Prepare then waits for its replica too) where
//     failovers happen.
//
// Every script reads and checks all the keys it uses before its first
// write (a counter that is not a number, a key of the wrong type): a
// script that fails has changed nothing.
//
// Meta.WriteCommit (backends.Colocated) writes a put's cells with its
// commit: the last write round's MSET and the commit's append go in one
// MULTI/EXEC on the engine's own connection, after the earlier rounds (if
// any) went as Write sends them, so a put whose cells fit one round takes
// two round trips (Prepare, then cells and commit). On a Cluster, with
// WithReplicas, or without the engine's own connections, it is Write then
// Commit. The commit applies only with its cells: an MSET
// refused while queued (out of memory) aborts the transaction, and one
// that fails at EXEC leaves out a marker key the append requires. A reply
// lost after the request went out is settled before the call returns
// (see Meta): the commit's record is found, or a fence makes sure it
// never applies; only when that cannot be done is the error one matching
// backends.ErrOutcomeUnknown, and the caller must look the rows up to
// learn whether the put applied.
//
// Reads skip the lookup's round trip too: Meta.ReadRows (backends.Colocated)
// plans the read of the rows its view already holds and sends the read of
// the log records the view lacks together with the first MGET of the
// cells; if those records changed none of the rows read (the usual case:
// nothing was appended), the cells are the committed ones, in one round
// trip; else the view, now caught up, gives the rows again and the cells
// are read again. A Meta with no view of the partition, or on a Cluster,
// looks the rows up first (two round trips).
//
// Every request the engine waits a reply for is reported with
// backends.CountRoundTrips on the call's context: on the engine's own
// connections each read or write round and each transaction, and through
// go-redis each command or pipeline (counted by a hook the Store adds to
// its client, which counts the Store's own calls only).
//
// A writer that finds the log 256 records long replaces it with a
// snapshot of its view (a new epoch), so that the logs of long-lived
// partitions with many small writes stay quick to replay. A view costs
// its client memory in proportion to the partition; a Meta keeps views of
// at most 256 partitions and reads an evicted one again from its log.
//
// On a standalone server Prepare draws new indexes from the counter
// (INCRBY) in its script; on a Cluster, whose scripts must stay in one
// slot, Prepare first runs a small script on the counter's slot that
// reserves a range with INCRBY and registers the partition, then the
// partition's script takes indexes from that range (a range reserved but
// not used is skipped: indexes stay monotonic and are never reused).
//
// Partitions lists the registry's partitions whose committed-row counter
// is positive. On a standalone server the registry is exact; on a Cluster
// a partition stays registered after DeletePartition (a registry in
// another slot cannot be updated atomically with the partition), which
// costs Partitions one GET per partition name ever used under the prefix.
//
// Limits: keys and fields of one Prepare must be distinct (tq guarantees
// it); indexes must stay below 2^53 (Lua numbers are doubles).
//
// # Log
//
// Store.Log returns the engine's backends.Log, the seam of a layout that
// keeps no rules on the server: per partition a stream of opaque
// records, numbered from 1 and stamped with the server's clock, and a
// snapshot that replaces the entries before it (keys base:log and
// base:snap), sharing the index counter and the partition registry with
// Meta. Each call is one script on the partition's slot; a Read that
// waits blocks in XREAD on a client of its own. On a standalone server
// the Log also implements backends.LogCells: cells and the records that
// name them in one MULTI/EXEC, and cells read with the log at one
// instant. See Log, and LAYOUT.md section 9 for the layout.
//
// # Errors
//
// A failed call to the server returns an *Error naming the operation and
// the address, matching ErrUnavailable (refused, reset), ErrAuth (bad
// credentials) or ErrTimeout (the client's read/write/dial timeout) with
// errors.Is; when the caller's context ended it wraps the context's error
// instead of matching those.
//
// # Concurrency
//
// Store, Meta and Log are safe for concurrent use, by many goroutines and
// many processes. A Store's Close and its Meta's Close each close their
// side; a client from OpenURL is closed once both are, and the Log too
// when it was taken.
package redis
