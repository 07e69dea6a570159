package yuanrong_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tqgo/tqgo/codec"
	"github.com/tqgo/tqgo/yuanrong"
)

// Benchmarks: TransferQueue PR #153's experiment ("Pack serially in
// YuanrongStorageClient, DS_MAX_WORKERS 16 -> 1") through the port. Run
//
//	go test -run '^$' -bench . -benchtime 1s -count 5 ./yuanrong
//
// Three packing configurations:
//
//	ds1     DSMaxWorkers 1: everything on the calling goroutine (the PR)
//	ds16tq  TransferQueue before the PR: a fixed pool of 16 that every
//	        object goes through (Oversubscribe, PackThreshold 1,
//	        PoolMinBatchBytes 1)
//	ds16    this port's default: DSMaxWorkers 16, size-aware (capped at
//	        GOMAXPROCS; the pool only for objects >= 256 KiB in batches
//	        holding >= 32 MiB (codec.DefaultPoolMinBatchBytes) of them)
//
// The sweeps are paired: each iteration puts the batch once per
// configuration, rotating which goes first, so the load other tenants of a
// shared machine put on it falls on all three alike. They report each
// configuration's time per put (ds1-ms, ds16tq-ms, ds16-ms) and the ratios
// tq/ds1 and ds16/ds1 (ns/op is the sum of the three). They run over shmDS,
// whose buffers are allocated once and reused as a datasystem's pre-faulted
// shared memory would be, so they measure the port and the packing.
// BenchmarkLocalPut shows the same GRPO put through NewLocal, which
// allocates fresh, zeroed Go memory on every MCreate.
//
// Every put reuses the same keys, so it is the steady state: create, pack,
// delete the previous value, publish.
var benchConfigs = []struct {
	name string
	opts []yuanrong.Option
}{
	{"ds1", []yuanrong.Option{yuanrong.WithDSMaxWorkers(1)}},
	{"ds16tq", []yuanrong.Option{yuanrong.WithPackOptions(tqPool16)}},
	{"ds16", []yuanrong.Option{yuanrong.WithDSMaxWorkers(16)}},
}

// benchPaired puts vals under keys with every configuration in turn, b.N
// times, over one shared shmDS.
func benchPaired(b *testing.B, keys []string, vals []any) {
	ctx := context.Background()
	ds := newShmDS()
	clients := make([]*yuanrong.Client, len(benchConfigs))
	for i, cfg := range benchConfigs {
		c, err := yuanrong.NewClient(ds, cfg.opts...)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Put(ctx, keys, vals); err != nil { // warm: slabs, pool
			b.Fatal(err)
		}
		clients[i] = c
	}
	spent := make([]time.Duration, len(clients))
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		for j := range clients {
			k := (i + j) % len(clients)
			start := time.Now()
			if _, err := clients[k].Put(ctx, keys, vals); err != nil {
				b.Fatal(err)
			}
			spent[k] += time.Since(start)
		}
	}
	b.StopTimer()
	ms := func(k int) float64 { return float64(spent[k].Nanoseconds()) / float64(b.N) / 1e6 }
	for k, cfg := range benchConfigs {
		b.ReportMetric(ms(k), cfg.name+"-ms")
	}
	b.ReportMetric(ms(1)/ms(0), "tq/ds1")
	b.ReportMetric(ms(2)/ms(0), "ds16/ds1")
}

// grpoBatch is a 512-sample GRPO-shaped put: two fields per sample, a
// prompt of 256 int64 tokens (2 KiB) and a response of 64 to 512 int64
// tokens (512 B to 4 KiB), 1024 objects in all.
func grpoBatch() ([]string, []any) {
	const samples = 512
	keys := make([]string, 0, 2*samples)
	vals := make([]any, 0, 2*samples)
	for _, field := range []string{"prompts", "responses"} {
		for i := range samples {
			n := 256
			if field == "responses" {
				n = 64 + (i*37)%449
			}
			toks := make([]int64, n)
			for j := range toks {
				toks[j] = int64(i*7 + j)
			}
			t, _ := codec.FromSlice(toks)
			keys = append(keys, fmt.Sprintf("%d@%s", i, field))
			vals = append(vals, t)
		}
	}
	return keys, vals
}

// BenchmarkGRPOPut is TransferQueue PR #153's 512-sample put: 1024 objects.
func BenchmarkGRPOPut(b *testing.B) {
	keys, vals := grpoBatch()
	benchPaired(b, keys, vals)
}

// BenchmarkLocalPut is the GRPO put through NewLocal.
func BenchmarkLocalPut(b *testing.B) {
	keys, vals := grpoBatch()
	ctx := context.Background()
	for _, cfg := range benchConfigs {
		b.Run(cfg.name, func(b *testing.B) {
			c, err := yuanrong.NewClient(yuanrong.NewLocal(), cfg.opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Put(ctx, keys, vals); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// sizedBatch is n tensors of size bytes each, alternately uint8 and
// float32, each over its own memory.
func sizedBatch(n, size int) ([]string, []any) {
	backing := make([]byte, n*size)
	for i := range backing {
		backing[i] = byte(i*7 + i>>9)
	}
	keys := make([]string, n)
	vals := make([]any, n)
	for i := range vals {
		data := backing[i*size : (i+1)*size : (i+1)*size]
		keys[i] = fmt.Sprintf("%d@obs", i)
		if i%2 == 0 {
			vals[i] = codec.Tensor{DType: codec.Uint8, Shape: []int64{int64(size)}, Data: data}
		} else {
			vals[i] = codec.Tensor{DType: codec.Float32, Shape: []int64{int64(size / 4)}, Data: data}
		}
	}
	return keys, vals
}

// BenchmarkSizeSweep is TransferQueue PR #153's object-size sweep: 1024 objects.
func BenchmarkSizeSweep(b *testing.B) {
	for _, size := range []struct {
		name  string
		bytes int
	}{{"512B", 512}, {"8KiB", 8 << 10}, {"32KiB", 32 << 10}, {"256KiB", 256 << 10}, {"512KiB", 512 << 10}, {"1MiB", 1 << 20}} {
		b.Run(size.name, func(b *testing.B) {
			keys, vals := sizedBatch(1024, size.bytes)
			benchPaired(b, keys, vals)
		})
	}
}

// BenchmarkCountSweep is TransferQueue PR #153's object-count sweep at 512 B.
func BenchmarkCountSweep(b *testing.B) {
	for _, n := range []int{128, 512, 1024, 2048, 8192} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			keys, vals := sizedBatch(n, 512)
			benchPaired(b, keys, vals)
		})
	}
}

// shmDS is a DataSystem whose buffers are allocated once per key, touched,
// and handed out again on every MCreate of that key, as a datasystem's
// pre-faulted shared memory would be: benchmarks over it measure the port
// and the packing, not the Go allocator or page faults. It keeps the
// datasystem's semantics (invisible until published, no overwrite).
type shmDS struct {
	mu        sync.Mutex // guards the maps
	slabs     map[string][]byte
	published map[string][]byte
}

func newShmDS() *shmDS {
	return &shmDS{slabs: map[string][]byte{}, published: map[string][]byte{}}
}

type shmBuffer struct {
	key  string
	data []byte
}

func (b *shmBuffer) Key() string  { return b.key }
func (b *shmBuffer) Data() []byte { return b.data }
func (b *shmBuffer) Release()     {}

func (s *shmDS) MCreate(_ context.Context, keys []string, sizes []int) ([]yuanrong.Buffer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]yuanrong.Buffer, len(keys))
	handles := make([]shmBuffer, len(keys))
	for i, k := range keys {
		slab := s.slabs[k]
		if cap(slab) < sizes[i] {
			slab = make([]byte, sizes[i])
			for j := 0; j < len(slab); j += 4096 {
				slab[j] = 1
			}
			s.slabs[k] = slab
		}
		handles[i] = shmBuffer{key: k, data: slab[:sizes[i]]}
		out[i] = &handles[i]
	}
	return out, nil
}

func (s *shmDS) MPublish(_ context.Context, bufs []yuanrong.Buffer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range bufs {
		if _, ok := s.published[b.Key()]; ok {
			return &yuanrong.KeyError{Key: b.Key(), Err: yuanrong.ErrKeyExists}
		}
		s.published[b.Key()] = b.Data()
	}
	return nil
}

func (s *shmDS) MGet(_ context.Context, keys []string) ([][]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = s.published[k]
	}
	return out, nil
}

func (s *shmDS) Delete(_ context.Context, keys []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		delete(s.published, k)
	}
	return nil
}

func (s *shmDS) Close() error { return nil }
