package codec

import "runtime"

// Defaults. PackThreshold follows TransferQueue's finding (TransferQueue PR #153) that a
// pool pays only from about 256 KiB per object.
//
// DefaultPoolMinBatchBytes is measured by BenchmarkPoolEngage on the 2-vCPU
// CI VM (AMD EPYC; its team notes put a vCPU wake-up at up to 1.75 ms; Go 1.26, -count 5, medians; pool =
// caller + 1 pool goroutine claiming 64-256 KiB chunks; "idle" sleeps 2 ms
// before each batch). Pool time over serial time, busy / idle:
//
//	large bytes per batch   256 KiB objects   1 MiB objects
//	1 MiB                   1.40 / 1.74       1.52 / 1.56
//	4 MiB                   1.33 / 1.15       1.49 / 1.12
//	8 MiB                   1.25 / 1.05       1.43 / 1.02
//	16 MiB                  1.09 / 1.25       1.14 / 0.97
//	32 MiB                  0.63 / 0.85       0.59 / 0.84
//	64 MiB                                    0.58 / 0.64
//
// Below 16 MiB the pool loses (the batch is still cache-resident and a
// second core copying it only adds cross-core traffic and a wake-up); from
// 32 MiB it wins in every variant. The crossover lies between the two, and
// the gate is set at 32 MiB, the first power of two where the pool wins.
const (
	DefaultDSMaxWorkers      = 16
	DefaultPackThreshold     = 256 << 10
	DefaultPoolMinBatchBytes = 32 << 20
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
	// before the pool is woken at all: below it, a second core does not copy
	// faster than one (see DefaultPoolMinBatchBytes). 0 means
	// DefaultPoolMinBatchBytes (32 MiB); 1 engages the pool for any large
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
