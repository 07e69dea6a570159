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
// works (through OpenURL). The URL forms:
//
//	redis://[user:password@]host:port[/db][?params]
//	rediss://...                                     the same over TLS
//	redis+cluster://[user:password@]h1:p1,h2:p2,h3:p3[/][?params]
//	rediss+cluster://...                             the same over TLS
//
// A cluster URL names seed nodes, comma-separated (IPv6 literals go in
// addr= parameters instead: redis+cluster://[::1]:7000/?addr=[::1]:7001).
//
// New wraps a redis.UniversalClient the caller built and owns instead:
//
//	s, err := redis.New(client, redis.WithPrefix("job1"))
//	c, err := tq.New(backends.Engine{Data: s, Log: s.Log()})
//
// # URL parameters
//
// The parameters this package reads, and the options they set:
//
//	prefix             WithPrefix
//	io_depth           WithIODepth
//	round_keys         WithRoundKeys
//	write_round_bytes  WithWriteRoundBytes
//	read_round_bytes   WithReadRoundBytes
//	direct             WithDirectConnections (true or false)
//	direct_pool_size   WithDirectPoolSize
//	replicas           WithReplicas (n)
//	replica_timeout    WithReplicas (a Go duration; default DefaultReplicaTimeout)
//
// A parameter given twice is invalid (but for addr, a cluster's further
// seeds), as is an empty value. Every other parameter goes to go-redis's ParseURL or
// ParseClusterURL, which reject unknown ones: pool_size, dial_timeout,
// read_timeout, write_timeout, max_retries, protocol, client_name, ...
//
// # Types
//
// Store is the engine's backends.Store: one key per cell, moved in rounds
// (see Store.Write, Store.Read and the options). On a standalone server it
// moves cells on direct connections, plain RESP2 connections that read
// values into the caller's memory and write them from it (see
// WithDirectConnections).
//
// Log, from Store.Log, is the engine's backends.Log: per partition a
// stream of opaque records, numbered and stamped by the server, and a
// snapshot. On a standalone server it is a *CellLog, which also
// implements backends.LogCells. The engine keeps no rules: each tq client
// applies tqgo's rules to the logs it reads.
//
// Error is a failed call to the server, matching ErrUnavailable, ErrAuth
// or ErrTimeout when the cause is known, and backends.ErrUnavailable when
// the server could not be reached, did not answer in time or was not
// serving yet (loading its data, failing over): tq retries such a call
// when it applied nothing.
//
// Store and Log are safe for concurrent use, by many goroutines and many
// processes.
//
// # See also
//
// LAYOUT.md lists every key, with its type, writer and lifetime, and every
// script, enough for a program in another language to read and append a
// log. Log says what each call does and promises when a reply is lost,
// WithReplicas what a failover keeps, WithDirectPoolSize how pool_size is
// shared, and WithHooks what hooks see.
package redis
