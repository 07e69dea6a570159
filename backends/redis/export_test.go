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
