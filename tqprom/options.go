package tqprom

import (
	"fmt"
	"slices"
	"time"
)

// Defaults of the options.
const (
	// DefaultScrapeTimeout bounds the Status calls of one scrape, together.
	DefaultScrapeTimeout = 5 * time.Second
	// DefaultWatchLimit is the label sets a collector may watch.
	DefaultWatchLimit = 256
)

// DefaultBuckets are the upper bounds, in seconds, of the call latency
// histogram's buckets: 50µs to 60s, about three per decade.
var DefaultBuckets = []float64{
	50e-6, 100e-6, 250e-6, 500e-6,
	1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3,
	1, 2.5, 5, 10, 30, 60,
}

// Option configures a Collector. New rejects an invalid one with an error
// matching ErrInvalid.
type Option func(*options) error

type options struct {
	scrapeTimeout time.Duration
	watchLimit    int
	buckets       []float64
}

func defaultOptions() options {
	return options{
		scrapeTimeout: DefaultScrapeTimeout,
		watchLimit:    DefaultWatchLimit,
		buckets:       DefaultBuckets,
	}
}

// WithScrapeTimeout bounds the Status calls one scrape makes for the
// watched partitions, all together (they run up to 8 at a time): a
// partition whose Status has not returned by then is left out of that
// scrape and counted in tq_scrape_errors_total. Default
// DefaultScrapeTimeout; d must be positive.
func WithScrapeTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("%w: scrape timeout %v, want > 0", ErrInvalid, d)
		}
		o.scrapeTimeout = d
		return nil
	}
}

// WithWatchLimit caps the label sets the collector watches at n: each
// watched partition counts one, each task named in a Watch one, and each
// (partition, task) pair of the tasks given to WatchTask one. A Watch or
// WatchTask past the cap fails with ErrWatchLimit. Default
// DefaultWatchLimit; n must be at least 1.
func WithWatchLimit(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("%w: watch limit %d, want >= 1", ErrInvalid, n)
		}
		o.watchLimit = n
		return nil
	}
}

// WithBuckets sets the upper bounds, in seconds, of the buckets of
// tq_call_duration_seconds. Default DefaultBuckets; the bounds must be
// positive and increasing, at least one.
func WithBuckets(bounds ...float64) Option {
	return func(o *options) error {
		if len(bounds) == 0 || bounds[0] <= 0 || !slices.IsSorted(bounds) || len(slices.Compact(slices.Clone(bounds))) != len(bounds) {
			return fmt.Errorf("%w: buckets %v, want positive increasing bounds", ErrInvalid, bounds)
		}
		o.buckets = slices.Clone(bounds)
		return nil
	}
}
