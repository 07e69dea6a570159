package redis

// WithClusterSafe makes a standalone store take the Cluster code path
// (index ranges reserved apart from the partition script), so the
// conformance suites check that path without a Cluster.
func WithClusterSafe() Option {
	return func(o *options) error {
		o.clusterSafe = true
		return nil
	}
}

// WithRoundHook runs f after each round that Read ("get") or Write
// ("set") completes on its own connections, which go-redis hooks do not
// see, and between a metadata transaction's watched reads and its MULTI
// ("watched").
func WithRoundHook(f func(op string)) Option {
	return func(o *options) error {
		o.roundHook = f
		return nil
	}
}

// SetCompactAt sets the log length from which writers compact a
// partition's log, and returns a function restoring it.
func SetCompactAt(n int64) (restore func()) {
	old := compactAt
	compactAt = n
	return func() { compactAt = old }
}

// OwnConnections reports whether s uses the engine's own connections, and
// how many it opens at most.
func OwnConnections(s *Store) (on bool, size int) {
	p := s.rawPool()
	if p == nil {
		return false, 0
	}
	return true, p.Size()
}

// ViewLength returns how many records of partition's log m's view holds
// (0 without a view).
func ViewLength(m *Meta, partition string) int64 {
	m.mu.Lock()
	v := m.views[partition]
	m.mu.Unlock()
	if v == nil {
		return 0
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.n
}
