package backends

// ConnStater is an optional interface of an engine's Store whose engine
// keeps connections to servers: it reports them, for metrics (tq's
// Client.ConnStats, tqprom's tq_engine_connections). An in-process engine
// does not implement it.
type ConnStater interface {
	// ConnStats returns the engine's connections now. It does no I/O.
	ConnStats() ConnStats
}

// ConnStats counts an engine's connections to its servers.
type ConnStats struct {
	Open int // connections open, idle or in use
	Idle int // of them, idle
	// Timeouts counts, since the engine opened, the requests that gave up
	// waiting for a free connection (a pool too small for the load).
	Timeouts uint64
}
