package redis_test

import (
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/redis"
)

// BenchmarkDirectVsGoRedis measures what the direct connections
// gain over go-redis, on 1024 values of 8 KiB against one private server:
//
//	go test -run '^$' -bench DirectVsGoRedis -count 5 ./backends/redis
//
// get/direct is Read on the direct connections, reading each value
// into the caller's memory; get/goredis is the same Read with direct
// connections off (go-redis MGET rounds, then a copy into the caller's
// memory); get/goredis-1mget is one plain go-redis MGET of all the keys
// and the copy. put/direct is Write on the direct connections (bodies
// written from the caller's memory); put/goredis is Write with direct
// connections off (go-redis MSET rounds); put/goredis-1mset is one plain
// go-redis MSET. Puts overwrite the same keys.
func BenchmarkDirectVsGoRedis(b *testing.B) {
	const n, size = 1024, 8 << 10
	url, raw := benchServer(b)
	own, err := redis.OpenURL(b.Context(), url+"?prefix=own")
	if err != nil {
		b.Fatal(err)
	}
	via, err := redis.OpenURL(b.Context(), url+"?prefix=via&direct=false")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		own.Close()
		own.Log().Close()
		via.Close()
		via.Log().Close()
	})
	if on, _ := redis.DirectConnections(own); !on {
		b.Fatal("no direct connections")
	}
	keys := rawKeys("k", n)
	bodies := rawValues(n, size)
	cells := cellsOf(keys, bodies)
	pairs := make([]any, 0, 2*n)
	for i, k := range keys {
		pairs = append(pairs, "plain:"+k, bodies[i])
	}
	plainKeys := make([]string, n)
	for i, k := range keys {
		plainKeys[i] = "plain:" + k
	}
	ctx := b.Context()
	for _, s := range []*redis.Store{own, via} {
		if err := s.Write(ctx, cells); err != nil {
			b.Fatal(err)
		}
	}
	if err := raw.MSet(ctx, pairs...).Err(); err != nil {
		b.Fatal(err)
	}
	dst := make([]backends.ReadCell, n)
	for i := range dst {
		dst[i] = backends.ReadCell{Key: keys[i], Body: make([]byte, size)}
	}
	check := func(b *testing.B) {
		for i := range dst {
			if !dst[i].Found || dst[i].Value != nil || dst[i].Body[1] != bodies[i][1] {
				b.Fatalf("value %d not read into its destination", i)
			}
		}
	}
	b.Run("get/direct", func(b *testing.B) {
		b.SetBytes(n * size)
		for b.Loop() {
			if err := own.Read(ctx, dst); err != nil {
				b.Fatal(err)
			}
		}
		check(b)
	})
	b.Run("get/goredis", func(b *testing.B) {
		b.SetBytes(n * size)
		for b.Loop() {
			if err := via.Read(ctx, dst); err != nil {
				b.Fatal(err)
			}
		}
		check(b)
	})
	b.Run("get/goredis-1mget", func(b *testing.B) {
		b.SetBytes(n * size)
		for b.Loop() {
			vals, err := raw.MGet(ctx, plainKeys...).Result()
			if err != nil {
				b.Fatal(err)
			}
			for i, v := range vals {
				s, _ := v.(string)
				dst[i].Found = copy(dst[i].Body, s) == size
			}
		}
		check(b)
	})
	b.Run("put/direct", func(b *testing.B) {
		b.SetBytes(n * size)
		for b.Loop() {
			if err := own.Write(ctx, cells); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("put/goredis", func(b *testing.B) {
		b.SetBytes(n * size)
		for b.Loop() {
			if err := via.Write(ctx, cells); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("put/goredis-1mset", func(b *testing.B) {
		b.SetBytes(n * size)
		for b.Loop() {
			if err := raw.MSet(ctx, pairs...).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
