package redis_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/codec"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

// The benchmarks compare tq on this engine with raw go-redis moving the
// same bytes against the same private redis-server, in the same run:
//
//	go test -run '^$' -bench . -count 5 ./backends/redis
//
// Raw values are as long as tq's packed cells (payload plus the codec's
// header), and every write goes to keys that do not exist yet (the keys
// are deleted with the timer stopped), as tq's puts of new rows do.

var benchSizes = []struct {
	name      string
	n, size   int
	perKeyOps int // keys per op for the one-round-trip-per-key baseline
}{
	{"1024x512B", 1024, 512, 64},
	{"1024x8KiB", 1024, 8 << 10, 64},
	{"64x1MiB", 64, 1 << 20, 16},
}

// benchServer is one private server for every benchmark of a run.
func benchServer(b *testing.B) (url string, raw *goredis.Client) {
	b.Helper()
	srv := redistest.Start(b)
	raw = goredis.NewClient(&goredis.Options{Addr: srv.Addr(), PoolSize: 16})
	b.Cleanup(func() { raw.Close() })
	return srv.URL(), raw
}

// cellBatch is n rows of one uint8 tensor of size bytes each, and the
// packed size of one cell.
func cellBatch(b *testing.B, n, size int) (tq.Batch, int) { return cellBatchT(b, n, size) }

func cellBatchT(b testing.TB, n, size int) (tq.Batch, int) {
	data := make([]byte, n*size)
	for i := range data {
		data[i] = byte(i*31 + i>>10)
	}
	t, err := codec.FromSlice(data[:size], int64(size))
	if err != nil {
		b.Fatal(err)
	}
	packed, err := codec.Encode(t)
	if err != nil {
		b.Fatal(err)
	}
	return tq.Batch{"x": tq.Stacked(data, n, size)}, len(packed)
}

func rawValues(n, size int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = make([]byte, size)
		for j := range out[i] {
			out[i][j] = byte(i + j)
		}
	}
	return out
}

func rawKeys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i) + "@x"
	}
	return out
}

func pipelinedSet(ctx context.Context, c *goredis.Client, keys []string, vals [][]byte) error {
	_, err := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, k := range keys {
			p.Set(ctx, k, vals[i], 0)
		}
		return nil
	})
	return err
}

func BenchmarkBatchPut(b *testing.B) {
	url, raw := benchServer(b)
	ctx := context.Background()
	for _, sz := range benchSizes {
		batch, cell := cellBatch(b, sz.n, sz.size)
		bytes := int64(sz.n * cell)
		b.Run(sz.name+"/tq", func(b *testing.B) {
			c, err := tq.Open(ctx, url+"?prefix=bench")
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			keys := rawKeys("k", sz.n)
			for range 2 { // warm the server's memory and the buffer pools
				if err := c.BatchPut(ctx, "p", keys, batch, nil); err != nil {
					b.Fatal(err)
				}
				if err := c.ClearPartition(ctx, "p"); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(bytes)
			b.ReportAllocs()
			for b.Loop() {
				if err := c.BatchPut(ctx, "p", keys, batch, nil); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := c.ClearPartition(ctx, "p"); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
		vals := rawValues(sz.n, cell)
		keys := rawKeys("raw:", sz.n)
		b.Run(sz.name+"/raw-pipelined-set", func(b *testing.B) {
			for range 2 {
				if err := pipelinedSet(ctx, raw, keys, vals); err != nil {
					b.Fatal(err)
				}
				raw.Unlink(ctx, keys...)
			}
			b.SetBytes(bytes)
			b.ReportAllocs()
			for b.Loop() {
				if err := pipelinedSet(ctx, raw, keys, vals); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := raw.Unlink(ctx, keys...).Err(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
		b.Run(sz.name+"/engine-put", func(b *testing.B) {
			// The engine's data path alone: Store.Put of the same bytes.
			s, err := redis.OpenURL(ctx, url+"?prefix=benchengine")
			if err != nil {
				b.Fatal(err)
			}
			defer func() { s.Close(); s.Log().Close() }()
			ekeys := rawKeys("e", sz.n)
			b.SetBytes(bytes)
			b.ReportAllocs()
			for b.Loop() {
				if err := putVals(ctx, s, ekeys, vals); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := delKeys(ctx, s, ekeys); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
		b.Run(sz.name+"/raw-set-per-key", func(b *testing.B) {
			perKey(b, sz.n, sz.perKeyOps, bytes, func(i int) error {
				return raw.Set(ctx, keys[i], vals[i], 0).Err()
			}, func() { raw.Unlink(ctx, keys[:sz.perKeyOps]...) })
		})
	}
}

// perKey runs ops single round trips per op and reports the time the n
// keys of a batch would take one round trip each (ns/batch). after, if
// set, runs with the timer stopped (to delete what the op wrote).
func perKey(b *testing.B, n, ops int, batchBytes int64, op func(i int) error, after func()) {
	b.SetBytes(batchBytes * int64(ops) / int64(n))
	for b.Loop() {
		for i := range ops {
			if err := op(i); err != nil {
				b.Fatal(err)
			}
		}
		if after != nil {
			b.StopTimer()
			after()
			b.StartTimer()
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(ops)*float64(n), "ns/batch")
}

func BenchmarkBatchGet(b *testing.B) {
	url, raw := benchServer(b)
	ctx := context.Background()
	for _, sz := range benchSizes {
		batch, cell := cellBatch(b, sz.n, sz.size)
		bytes := int64(sz.n * cell)
		// tq-into is a trainer's loop: each read into the memory of the one
		// before (BatchGetInto); tq allocates fresh columns every call.
		for _, arm := range []struct {
			name string
			into bool
		}{{"tq", false}, {"tq-into", true}} {
			b.Run(sz.name+"/"+arm.name, func(b *testing.B) {
				c, err := tq.Open(ctx, url+"?prefix=bench")
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				keys := rawKeys("k", sz.n)
				if err := c.BatchPut(ctx, "g", keys, batch, nil); err != nil {
					b.Fatal(err)
				}
				defer c.ClearPartition(ctx, "g")
				var last tq.Batch
				b.SetBytes(bytes)
				b.ReportAllocs()
				for b.Loop() {
					var got tq.Batch
					if arm.into {
						got, err = c.BatchGetInto(ctx, "g", keys, last)
					} else {
						got, err = c.BatchGet(ctx, "g", keys)
					}
					if err != nil {
						b.Fatal(err)
					}
					if got["x"].Len() != sz.n {
						b.Fatalf("read %d rows", got["x"].Len())
					}
					last = got
				}
			})
		}
		vals := rawValues(sz.n, cell)
		keys := rawKeys(fmt.Sprintf("rawget%d:", sz.size), sz.n)
		if err := pipelinedSet(ctx, raw, keys, vals); err != nil {
			b.Fatal(err)
		}
		for i, chunk := range []int{sz.n, 256, 128, 64, 32, 16, 8, 4} {
			if i > 0 && chunk >= sz.n {
				continue
			}
			name := fmt.Sprintf("%s/raw-mget-%d", sz.name, chunk)
			if chunk == sz.n {
				name = sz.name + "/raw-mget-all"
			}
			b.Run(name, func(b *testing.B) {
				b.SetBytes(bytes)
				b.ReportAllocs()
				for b.Loop() {
					for lo := 0; lo < len(keys); lo += chunk {
						v, err := raw.MGet(ctx, keys[lo:min(lo+chunk, len(keys))]...).Result()
						if err != nil || v[0] == nil {
							b.Fatal(err, v[0] == nil)
						}
					}
				}
			})
		}
		b.Run(sz.name+"/engine-get", func(b *testing.B) {
			// The engine's data path alone: Store.Get of the same bytes
			// (no metadata lookup, no decoding).
			s, err := redis.OpenURL(ctx, url+"?prefix=benchengine")
			if err != nil {
				b.Fatal(err)
			}
			defer func() { s.Close(); s.Log().Close() }()
			ekeys := rawKeys("e", sz.n)
			if err := putVals(ctx, s, ekeys, vals); err != nil {
				b.Fatal(err)
			}
			defer delKeys(ctx, s, ekeys)
			if _, err := getVals(ctx, s, ekeys[:1]); err != nil { // learn the value size
				b.Fatal(err)
			}
			b.SetBytes(bytes)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := getVals(ctx, s, ekeys); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(sz.name+"/raw-get-per-key", func(b *testing.B) {
			perKey(b, sz.n, sz.perKeyOps, bytes, func(i int) error {
				return raw.Get(ctx, keys[i]).Err()
			}, nil)
		})
		raw.Unlink(ctx, keys...)
	}
}
