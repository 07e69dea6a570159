package codec

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"
)

// Benchmarks. Run them with
//
//	go test -run '^$' -bench . -benchtime 1s -count 5 ./codec
//
// Every batch holds benchObjects distinct tensors (uint8 and float32,
// alternating) so the copies stream from memory as they do in production.
// The alloc hook hands out buffers preallocated (and touched) once per
// size, so the numbers measure packing, not page faults; the "heap" mode
// shows what HeapAllocator's fresh memory costs on top.

const benchObjects = 1024

var benchSizes = []struct {
	name string
	size int
}{
	{"512B", 512},
	{"8KiB", 8 << 10},
	{"32KiB", 32 << 10},
	{"256KiB", 256 << 10},
	{"1MiB", 1 << 20},
}

var (
	serialOpts = Options{DSMaxWorkers: 1}
	pool16Opts = Options{DSMaxWorkers: 16, Oversubscribe: true, PackThreshold: 1, PoolMinBatchBytes: 1}
)

// benchValues builds n tensors of size bytes each, alternately uint8 and
// float32, each over its own memory.
func benchValues(n, size int) []any {
	backing := make([]byte, n*size)
	for i := range min(len(backing), 4096) {
		backing[i] = byte(i*7 + i>>8)
	}
	for done := 4096; done < len(backing); done *= 2 {
		copy(backing[done:], backing[:done])
	}
	vals := make([]any, n)
	for i := range vals {
		data := backing[i*size : (i+1)*size : (i+1)*size]
		if i%2 == 0 {
			vals[i] = Tensor{DType: Uint8, Shape: []int64{int64(size)}, Data: data}
		} else {
			vals[i] = Tensor{DType: Float32, Shape: []int64{int64(size / 4)}, Data: data}
		}
	}
	return vals
}

// reusingAlloc returns an Allocator that hands out dst every time, and dst,
// sized (and touched) for vals.
func reusingAlloc(tb testing.TB, vals []any) (Allocator, [][]byte) {
	var dst [][]byte
	sizer := func(sizes []int) ([][]byte, error) {
		var err error
		dst, err = HeapAllocator(sizes)
		for _, d := range dst {
			clear(d) // fault the pages in now
		}
		return dst, err
	}
	if _, err := BatchEncodeInto(vals, sizer, serialOpts); err != nil {
		tb.Fatal(err)
	}
	return func(sizes []int) ([][]byte, error) { return dst, nil }, dst
}

func reportPerObject(b *testing.B, objects int) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(objects), "ns/object")
}

// batchSetup is one size's values, destination buffers and sources, built
// on first use so that a -bench filter skips the sizes it does not run.
type batchSetup struct {
	vals       []any
	alloc      Allocator
	dst        [][]byte
	srcs, dsts [][]byte // the copy baseline: tensor bytes and where they go
}

// copyPairs returns each tensor's bytes and the place in its packed buffer
// where packing copies them, so the copy baseline moves exactly the bytes
// packing moves, to the same addresses (memmove's speed depends on the
// relative alignment of source and destination).
func copyPairs(vals []any, dst [][]byte) (srcs, dsts [][]byte) {
	for i, v := range vals {
		src := v.(Tensor).Data
		off := binary.LittleEndian.Uint32(dst[i][12:]) // payload 1's offset
		srcs = append(srcs, src)
		dsts = append(dsts, dst[i][off:int(off)+len(src)])
	}
	return srcs, dsts
}

func BenchmarkBatch(b *testing.B) {
	for _, sz := range benchSizes {
		var st *batchSetup
		get := func(b *testing.B) *batchSetup {
			if st == nil {
				st = &batchSetup{vals: benchValues(benchObjects, sz.size)}
				st.alloc, st.dst = reusingAlloc(b, st.vals)
				st.srcs, st.dsts = copyPairs(st.vals, st.dst)
				b.ResetTimer()
			}
			return st
		}
		bytes := int64(benchObjects * sz.size)

		b.Run(sz.name+"/copy", func(b *testing.B) {
			st := get(b)
			b.ReportAllocs()
			b.SetBytes(bytes)
			for b.Loop() {
				for i, s := range st.srcs {
					copy(st.dsts[i], s)
				}
			}
			reportPerObject(b, benchObjects)
		})
		for _, m := range []struct {
			name string
			opts Options
			heap bool
		}{
			{"serial", serialOpts, false},
			{"pool16", pool16Opts, false},
			{"sizeaware", DefaultOptions(), false},
			{"sizeaware-heap", DefaultOptions(), true},
		} {
			b.Run(sz.name+"/"+m.name, func(b *testing.B) {
				st := get(b)
				p := NewPacker(m.opts)
				defer p.Close()
				a := st.alloc
				if m.heap {
					a = HeapAllocator
				}
				b.ReportAllocs()
				b.SetBytes(bytes)
				for b.Loop() {
					if _, err := p.BatchEncodeInto(st.vals, a); err != nil {
						b.Fatal(err)
					}
				}
				reportPerObject(b, benchObjects)
			})
		}
		b.Run(sz.name+"/decode", func(b *testing.B) {
			st := get(b)
			b.ReportAllocs()
			b.SetBytes(bytes)
			for b.Loop() {
				if _, err := BatchDecodeFrom(st.dst); err != nil {
					b.Fatal(err)
				}
			}
			reportPerObject(b, benchObjects)
		})
		st = nil
		runtime.GC()
	}
}

// BenchmarkOverhead measures what packing adds to the bare copy with paired
// samples: every iteration times a copy() of the batch's tensor bytes to
// where packing puts them, the serial packer and the size-aware one, in
// rotating order, into the same destination buffers. On a shared machine
// whose memory bandwidth drifts, the difference within an iteration is far
// steadier than the difference between two benchmarks of the table above;
// the median over iterations (med-*) also shrugs off bursts of load.
func BenchmarkOverhead(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			vals := benchValues(benchObjects, sz.size)
			alloc, dst := reusingAlloc(b, vals)
			srcs, dsts := copyPairs(vals, dst)
			serial, aware := NewPacker(serialOpts), NewPacker(DefaultOptions())
			defer serial.Close()
			defer aware.Close()
			timed := func(f func()) time.Duration {
				start := time.Now()
				f()
				return time.Since(start)
			}
			copyAll := func() {
				for i, s := range srcs {
					copy(dsts[i], s)
				}
			}
			pack := func(p *Packer) func() {
				return func() {
					if _, err := p.BatchEncodeInto(vals, alloc); err != nil {
						b.Fatal(err)
					}
				}
			}
			var tCopy, tSerial, tAware []time.Duration
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				// Rotate the order, so that none gains from following another.
				var c, s, a time.Duration
				switch i % 3 {
				case 0:
					c, s, a = timed(copyAll), timed(pack(serial)), timed(pack(aware))
				case 1:
					s, a, c = timed(pack(serial)), timed(pack(aware)), timed(copyAll)
				default:
					a, c, s = timed(pack(aware)), timed(copyAll), timed(pack(serial))
				}
				tCopy, tSerial, tAware = append(tCopy, c), append(tSerial, s), append(tAware, a)
			}
			perObject := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / benchObjects }
			mean := func(ds []time.Duration) float64 {
				var sum time.Duration
				for _, d := range ds {
					sum += d
				}
				return perObject(sum) / float64(len(ds))
			}
			medianDiff := func(xs, ys []time.Duration) float64 {
				diffs := make([]time.Duration, len(xs))
				for i := range xs {
					diffs[i] = xs[i] - ys[i]
				}
				slices.Sort(diffs)
				return perObject(diffs[len(diffs)/2])
			}
			b.ReportMetric(mean(tCopy), "copy-ns/object")
			b.ReportMetric(mean(tSerial), "serial-ns/object")
			b.ReportMetric(mean(tAware), "sizeaware-ns/object")
			b.ReportMetric(medianDiff(tSerial, tCopy), "med-serial-over-copy-ns/object")
			b.ReportMetric(medianDiff(tAware, tCopy), "med-sizeaware-over-copy-ns/object")
		})
	}
}

// BenchmarkPoolEngage packs batches of n large objects serially and with
// the pool (DefaultOptions with the batch gate open: on two cores, the
// calling goroutine plus one pool goroutine), to find the batch size in
// large-object bytes from which the pool wins. Each iteration runs both, in
// alternating order, so drift in this shared machine's load hits both alike;
// compare serial-ns/batch with pool-ns/batch (pool/serial < 1: the pool
// wins). The idle variants sleep 2 ms before each batch, as a store does
// between puts: the pool's goroutine is then parked, and the time to wake
// it, which a back-to-back loop hides, is part of the measurement.
func BenchmarkPoolEngage(b *testing.B) {
	poolOpts := DefaultOptions()
	poolOpts.PoolMinBatchBytes = 1
	for _, size := range []int{256 << 10, 1 << 20} {
		for _, n := range []int{1, 2, 4, 8, 16, 32, 64, 128} {
			var vals []any
			var alloc Allocator
			for _, idle := range []bool{false, true} {
				name := fmt.Sprintf("%dKiB/n=%d/batch=%dKiB", size>>10, n, n*size>>10)
				if idle {
					name += "/idle"
				} else {
					name += "/busy"
				}
				b.Run(name, func(b *testing.B) {
					if vals == nil {
						vals = benchValues(n, size)
						alloc, _ = reusingAlloc(b, vals)
					}
					serial, pool := NewPacker(serialOpts), NewPacker(poolOpts)
					defer serial.Close()
					defer pool.Close()
					var tSerial, tPool time.Duration
					run := func(p *Packer) time.Duration {
						if idle {
							time.Sleep(2 * time.Millisecond)
						}
						start := time.Now()
						if _, err := p.BatchEncodeInto(vals, alloc); err != nil {
							b.Fatal(err)
						}
						return time.Since(start)
					}
					b.ResetTimer()
					for i := 0; b.Loop(); i++ {
						if i%2 == 0 {
							tSerial += run(serial)
							tPool += run(pool)
						} else {
							tPool += run(pool)
							tSerial += run(serial)
						}
					}
					if pool.Stats().PoolRuns == 0 {
						b.Fatal("the pool never ran")
					}
					per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) }
					b.ReportMetric(per(tSerial), "serial-ns/batch")
					b.ReportMetric(per(tPool), "pool-ns/batch")
					b.ReportMetric(float64(tPool)/float64(tSerial), "pool/serial")
				})
			}
		}
	}
}

// BenchmarkEncode is the single-object path (Encode allocates its buffer).
func BenchmarkEncode(b *testing.B) {
	x := benchValues(1, 512)[0]
	nested := map[string]any{"ids": []any{int64(1), int64(2), int64(3)}, "t": x, "name": "sample"}
	for _, c := range []struct {
		name string
		v    any
	}{{"tensor512B", x}, {"nested", nested}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Encode(c.v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
