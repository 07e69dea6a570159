package codec

import "runtime"

// Defaults. PackThreshold follows TransferQueue's finding (seed 000) that a
// pool pays only from about 256 KiB per object; DefaultPoolMinBatchBytes is
// measured by BenchmarkPoolEngage (see the README's Performance section).
const (
	DefaultDSMaxWorkers      = 16
	DefaultPackThreshold     = 256 << 10
	DefaultPoolMinBatchBytes = 8 << 20
)

// Options tune a Packer. The zero value packs every object serially.
type Options struct {
	// DSMaxWorkers is how many goroutines pack large objects, the calling
	// goroutine included. 0 or 1 packs everything serially. The pool is
	// capped at GOMAXPROCS unless Oversubscribe is set: packing is a memory
	// copy, and goroutines beyond the cores only queue.
	DSMaxWorkers int
	// PackThreshold is the packed size from which an object may be packed by
	// the pool; smaller objects are always packed on the calling goroutine.
	// 0 means DefaultPackThreshold (256 KiB).
	PackThreshold int
	// PoolMinBatchBytes is how many bytes of large objects a batch must hold
	// before the pool is woken at all: waking a goroutine on the other core
	// costs 0.1 to 1.7 ms here, which a smaller batch never wins back.
	// 0 means DefaultPoolMinBatchBytes; 1 engages the pool for any large
	// object (the "always pool" mode of the benchmarks).
	PoolMinBatchBytes int
	// Oversubscribe lets DSMaxWorkers exceed GOMAXPROCS (for measurements
	// that reproduce a fixed pool size, such as TransferQueue's 16).
	Oversubscribe bool
}

// DefaultOptions are TransferQueue's DS_MAX_WORKERS of 16 (capped at
// GOMAXPROCS) with the measured size-aware thresholds.
func DefaultOptions() Options {
	return Options{DSMaxWorkers: DefaultDSMaxWorkers}
}

func (o Options) withDefaults() Options {
	if o.PackThreshold <= 0 {
		o.PackThreshold = DefaultPackThreshold
	}
	if o.PoolMinBatchBytes <= 0 {
		o.PoolMinBatchBytes = DefaultPoolMinBatchBytes
	}
	return o
}

// workers is the effective pool size, the calling goroutine included.
func (o Options) workers() int {
	w := o.DSMaxWorkers
	if !o.Oversubscribe {
		w = min(w, runtime.GOMAXPROCS(0))
	}
	return max(w, 1)
}
