// Package redis is tqgo's Redis engine: the cells and the partition logs
// of a queue in one Redis (standalone, TLS, Sentinel through a caller's
// client, or Cluster), so that processes on many machines share one queue.
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
// and its Log leaves that client open:
//
//	s, err := redis.New(client, redis.WithPrefix("job1"))
//	c, err := tq.New(backends.Engine{Data: s, Log: s.Log()})
//
// The Store is a backends.Store and its Log a backends.Log (on a
// standalone server also a backends.LogCells); the opener returns them as
// a backends.Engine. The engine keeps no rules: each tq client applies
// tqgo's rules (rows, fields, tags, consumption) to the partition logs it
// reads, as every other client does, and the server only numbers, stamps
// and keeps records. Both share the client and the engine's own
// connections (below).
//
// # Keys
//
// Every key starts with the prefix and a colon, so jobs sharing a server
// never see each other's keys. Data cells are "<prefix>:d:<storage key>"
// (the storage key is TransferQueue's "<global_index>@<field>"), plain
// strings spread over the Cluster's slots (no hash tag). A partition's
// log and snapshot share the hash tag {<prefix>:<partition>} and so one
// slot; the global index counter and the partition registry share
// {<prefix>}. LAYOUT.md lists every key, with its type, writer and
// lifetime, and how to read and append a log, enough for a program in
// another language.
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
// client's pool (see WithDirectPoolSize). The Store and its Log share
// them.
//
// Hooks given with WithHooks are added to the client and also see the
// own connections' dials and requests, described as go-redis commands
// (see WithHooks), so tracing and metrics see all the traffic.
//
// # Logs
//
// Store.Log returns the engine's backends.Log: per partition a stream of
// opaque records, numbered from 1 and stamped with the server's clock,
// and a snapshot that replaces the entries before it. Every call is one
// script on the partition's slot (see Log for what each does and
// promises): an Append replies with every entry between the caller's
// position and its own records, so a write and the catching up it needs
// are one round trip; a Read that waits blocks in XREAD BLOCK on a client
// of its own, and the entries that woke it come in the same round trip.
// So a put is two round trips (its reservation, then its cells with its
// commit), a claim one, an ack one, and a read after a claim one (the
// cells with the log, below).
//
// On a standalone server the Log also implements backends.LogCells: the
// last write round's MSET and the append go in one MULTI/EXEC on the
// engine's own connection (after the earlier rounds, if any, went as
// Write sends them), and a read of cells goes with the read of the log in
// one MULTI/EXEC, so the cells are those of the rows at that instant. The
// MSET also sets a marker key that the append requires and deletes: a
// transaction runs every queued command even when one fails at EXEC, and
// the records apply only with their cells. On a Cluster, with
// WithReplicas, or without the engine's own connections, cells go with
// Write, then the records with Append.
//
// On a standalone server the append script draws the records' global
// indexes (INCRBY) and registers a partition whose log it creates (SADD).
// On a Cluster, whose scripts stay in one slot, an append that reserves
// indexes or may create the log first sends one pipeline to the counter's
// slot; an index range reserved but not used is skipped: indexes stay
// monotonic and are never reused. Indexes must stay below 2^53 (Lua
// numbers are doubles).
//
// # Lost replies and failovers
//
//   - An Append sent twice (go-redis resends a command whose reply it
//     lost) appends once: the script appends nothing when the first
//     record's ID is already among the entries after the caller's
//     position, and replies as the first send would have.
//   - A request whose reply was lost returns an error matching
//     backends.ErrOutcomeUnknown; the rules' client then settles it before
//     its call returns, by appending a fence record that voids the lost
//     records unless they came first, so a tq call reports an unknown
//     outcome only when no fence got through.
//   - A client whose copy of a partition is ahead of the log it reads (a
//     replica promoted before it had the last entries, a log put back by
//     hand) finds the entry at its position missing or another record's:
//     the log reads as a restart, and the client replays the log from its
//     snapshot. No write is accepted against the copy it dropped.
//   - WithReplicas (replicas=N in the URL) makes every acknowledged append
//     (a put's commit, a clear, a claim, an ack) mean replicated: WAIT N
//     after each, and ErrNotReplicated (which matches
//     backends.ErrOutcomeUnknown) when too few replicas answered, or when
//     the append was found applied after its reply was lost. Without it,
//     a failover to a lagging replica loses the appends it lacked (leases
//     and acks too: their rows are then delivered again), though every
//     client then agrees on what is left; its index counter is behind, so
//     a put in flight across the failover may hold storage keys that are
//     another row's now. Use replicas=1 where failovers happen.
//
// Every script reads and checks all the keys it uses before its first
// write (a key of the wrong type, a missing marker): a script that fails
// has changed nothing.
//
// Every request the engine waits a reply for is reported with
// backends.CountRoundTrips on the call's context: on the engine's own
// connections each read or write round and each transaction, and through
// go-redis each command or pipeline (counted by a hook the Store adds to
// its client, which counts the Store's own calls only).
//
// The rules' client replaces a partition's entries with a snapshot once
// the log outgrows the last snapshot, so a client joining a long-lived
// partition reads the live rows, not their history; a partition with no
// rows and no consumption left is emptied (the stream trimmed to its last
// entry, and both keys expire an hour later unless an append comes
// first). Partitions lists the registry's partitions whose log exists and
// is not emptied.
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
// Store and Log are safe for concurrent use, by many goroutines and many
// processes. A Store's Close and its Log's Close each close their side; a
// client from OpenURL is closed once the Store is, and the Log too when
// it was taken.
package redis
