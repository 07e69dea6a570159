package main

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/codec"
	"github.com/tqgo/tqgo/tq"
)

// The redis suite measures the Redis engine against the Redis engine's targets:
// BatchPut and BatchGet of n values of one size through tq, against raw
// go-redis moving the same bytes (values as long as tq's packed cells) on
// the same server, in one rotation per shape, so that a shared machine's
// drift hits every arm alike:
//   - BatchPut within 1.15x of one pipeline of SETs;
//   - BatchGet at least as fast as the fastest raw MGET chunking (every
//     chunk size is an arm; the fastest median is the bar), and BatchGetInto,
//     as a trainer's loop calls it (each read into the memory of the one
//     before), against the same bar;
//   - both at least 10x faster than one round trip per key.

// redisShape is one batch shape of the redis suite.
type redisShape struct{ n, size int }

func (s redisShape) String() string { return fmt.Sprintf("%d × %s", s.n, fmtSize(s.size)) }

// The Redis targets' bars.
const (
	putTargetRatio = 1.15 // BatchPut time over pipelined SET time, at most
	getTargetRatio = 1.0  // BatchGet time over the best chunked MGET's, at most
	perKeyTarget   = 10.0 // one-round-trip-per-key time over tq's, at least
)

// mgetChunks are the raw MGET chunk sizes tried (those below a batch's
// key count), besides one MGET of all keys.
var mgetChunks = []int{256, 128, 64, 32, 16, 8, 4}

// perKeyOps is how many keys the one-round-trip-per-key arms time: their
// time is scaled to the batch.
const perKeyOps = 16

// redisSteps is the progress steps of runRedis.
func redisSteps(cfg Config, m *meter) int {
	n := 0
	for _, s := range cfg.RedisShapes {
		n += m.planSteps(len(redisArmsFor(s)))
	}
	return n
}

// redisArmsFor names the arms of shape s, in rotation order.
func redisArmsFor(s redisShape) []string {
	names := []string{"tq BatchPut", "raw pipelined SET", "raw SET per key", "tq BatchGet", "tq BatchGetInto", "raw MGET all"}
	for _, k := range mgetChunks {
		if k < s.n {
			names = append(names, fmt.Sprintf("raw MGET ×%d", k))
		}
	}
	return append(names, "raw GET per key")
}

// runRedis measures every shape of cfg on the first Redis target that tq
// opens.
func runRedis(ctx context.Context, cfg Config, m *meter, targets []*target, rep *Report) error {
	var t *target
	for _, c := range targets {
		if c.kv && c.isRedis() && !c.isServed() {
			t = c
			break
		}
	}
	if t == nil {
		rep.note("redis suite: skipped, no Redis engine among -urls")
		return nil
	}
	u, err := url.Parse(t.url)
	if err != nil {
		return err
	}
	q := u.Query()
	q.Set("prefix", "tqgo-bench-targets") // its own keys, whatever -urls set
	u.RawQuery = q.Encode()
	c, err := tq.Open(ctx, u.String())
	if err != nil {
		return fmt.Errorf("open %s: %w", t.name, err)
	}
	defer c.Close()
	raw := redis.NewClient(t.redisOpts)
	defer raw.Close()

	tbl := &Table{
		ID:    "redis-targets",
		Title: "Redis engine against raw go-redis",
		Intro: fmt.Sprintf("n values of one size: tq writes a [n, size] uint8 column into fresh rows of an empty partition, and reads "+
			"it back; raw go-redis moves values as long as tq's packed cells on the same server. Per shape the puts are one "+
			"rotation and the gets another (%d repetitions), time per batch median [min–max]. BatchGetInto is BatchGet as a trainer's loop calls "+
			"it, each read into the memory of the batch before (no fresh pages). Targets: BatchPut ≤ %.2fx one pipeline of SETs; "+
			"BatchGet ≤ %.2fx the fastest raw MGET chunking (of all keys, and of %s keys); both ≥ %.0fx faster than one "+
			"round trip per key (%d keys timed, scaled to n).",
			cfg.Reps, putTargetRatio, getTargetRatio, joinInts(mgetChunks), perKeyTarget, perKeyOps),
		Header: []string{"shape", "op", "tq", "raw bar", "raw time", "tq / raw", "target", "one round trip per key", "per key / tq"},
	}
	for si, s := range cfg.RedisShapes {
		if err := runRedisShape(ctx, m, c, raw, s, fmt.Sprintf("p%d", si), tbl, rep); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	rep.Tables = append(rep.Tables, tbl)
	return nil
}

func runRedisShape(ctx context.Context, m *meter, c *tq.Client, raw *redis.Client, s redisShape, partition string, tbl *Table, rep *Report) error {
	data := make([]byte, s.n*s.size)
	for i := range data {
		data[i] = byte(i*31 + i>>10)
	}
	batch := tq.Batch{"x": tq.Stacked(data, s.n, s.size)}
	keys := make([]string, s.n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	one, err := codec.FromSlice(data[:s.size], int64(s.size))
	if err != nil {
		return err
	}
	cell, err := codec.Encode(one)
	if err != nil {
		return err
	}
	vals := make([][]byte, s.n)
	rawKeys := make([]string, s.n)
	for i := range vals {
		vals[i] = append([]byte(nil), cell...)
		vals[i][len(cell)-1] = byte(i) // distinct values, tq's cell length
		rawKeys[i] = fmt.Sprintf("tqgo-bench-targets:raw:%d", i)
	}
	getKeys := make([]string, s.n)
	for i := range getKeys {
		getKeys[i] = fmt.Sprintf("tqgo-bench-targets:rawget:%d", i)
	}
	getPart := partition + "-get"
	if err := c.ClearPartition(ctx, partition); err != nil {
		return err
	}
	// A run stopped in a put leaves nothing behind on the server.
	defer c.ClearPartition(context.WithoutCancel(ctx), partition)
	defer raw.Unlink(context.WithoutCancel(ctx), rawKeys...)
	if err := c.BatchPut(ctx, getPart, keys, batch, nil); err != nil {
		return err
	}
	defer c.ClearPartition(context.WithoutCancel(ctx), getPart)
	if err := pipelinedSET(ctx, raw, getKeys, vals); err != nil {
		return err
	}
	defer raw.Unlink(context.WithoutCancel(ctx), getKeys...)

	// Parity, once: the reads below return what was written.
	got, err := c.BatchGet(ctx, getPart, keys)
	if err != nil {
		return err
	}
	if x, ok := got["x"].Tensor(); !ok || string(x.Data) != string(data) {
		return fmt.Errorf("parity: tq BatchGet read other bytes than BatchPut wrote")
	}

	timedThenClear := func(op func() error, clear func() error) func() (time.Duration, error) {
		return func() (time.Duration, error) {
			start := time.Now()
			if err := op(); err != nil {
				return 0, err
			}
			d := time.Since(start)
			return d, clear()
		}
	}
	perKey := func(op func(i int) error, clear func() error) func() (time.Duration, error) {
		k := min(perKeyOps, s.n)
		return func() (time.Duration, error) {
			start := time.Now()
			for i := range k {
				if err := op(i); err != nil {
					return 0, err
				}
			}
			d := time.Since(start) * time.Duration(s.n) / time.Duration(k)
			if clear != nil {
				return d, clear()
			}
			return d, nil
		}
	}
	unlinkRaw := func() error { return raw.Unlink(ctx, rawKeys...).Err() }
	byName := map[string]*arm{}
	var arms []*arm
	for _, name := range redisArmsFor(s) {
		a := &arm{name: name}
		switch {
		case name == "tq BatchPut":
			a.timed = timedThenClear(func() error { return c.BatchPut(ctx, partition, keys, batch, nil) },
				func() error { return c.ClearPartition(ctx, partition) })
		case name == "raw pipelined SET":
			a.timed = timedThenClear(func() error { return pipelinedSET(ctx, raw, rawKeys, vals) }, unlinkRaw)
		case name == "raw SET per key":
			a.timed = perKey(func(i int) error { return raw.Set(ctx, rawKeys[i], vals[i], 0).Err() }, unlinkRaw)
		case name == "tq BatchGet":
			a.op = func() error {
				b, err := c.BatchGet(ctx, getPart, keys)
				if err == nil && b.Len() != s.n {
					err = fmt.Errorf("BatchGet read %d rows of %d", b.Len(), s.n)
				}
				return err
			}
		case name == "tq BatchGetInto":
			var last tq.Batch // the trainer's loop: each read into the one before's memory
			a.op = func() error {
				b, err := c.BatchGetInto(ctx, getPart, keys, last)
				if err == nil && b.Len() != s.n {
					err = fmt.Errorf("BatchGetInto read %d rows of %d", b.Len(), s.n)
				}
				last = b
				return err
			}
		case name == "raw GET per key":
			a.timed = perKey(func(i int) error { return raw.Get(ctx, getKeys[i]).Err() }, nil)
		default: // raw MGET
			chunk := s.n
			if k, ok := strings.CutPrefix(name, "raw MGET ×"); ok {
				fmt.Sscan(k, &chunk)
			}
			a.op = func() error { return chunkedMGET(ctx, raw, getKeys, chunk) }
		}
		byName[name] = a
		arms = append(arms, a)
	}
	// Puts and gets rotate apart: a put frees and refills the server's
	// memory, which would slow whichever read came next.
	var puts, gets []*arm
	for _, a := range arms {
		if strings.Contains(a.name, "SET") || strings.Contains(a.name, "Put") {
			puts = append(puts, a)
		} else {
			gets = append(gets, a)
		}
	}
	for _, group := range [][]*arm{puts, gets} {
		if _, err := m.run(ctx, "redis "+s.String(), group); err != nil {
			return err
		}
	}

	dist := func(name string) Dist { return summarize(byName[name].samples) }
	bestGet, bestName := Dist{Median: math.Inf(1)}, ""
	for _, name := range redisArmsFor(s) {
		if strings.HasPrefix(name, "raw MGET") {
			if d := dist(name); d.Median < bestGet.Median {
				bestGet, bestName = d, name
			}
		}
	}
	bytes := int64(s.n * len(cell))
	for _, row := range []struct {
		op, rawName     string
		tq, raw, perKey Dist
		target          float64
	}{
		{"BatchPut", "raw pipelined SET", dist("tq BatchPut"), dist("raw pipelined SET"), dist("raw SET per key"), putTargetRatio},
		{"BatchGet", bestName, dist("tq BatchGet"), bestGet, dist("raw GET per key"), getTargetRatio},
		{"BatchGetInto", bestName, dist("tq BatchGetInto"), bestGet, dist("raw GET per key"), getTargetRatio},
	} {
		ratio := row.tq.Median / row.raw.Median
		speedup := row.perKey.Median / row.tq.Median
		tbl.Rows = append(tbl.Rows, []string{s.String(), row.op, fmtTime(row.tq), row.rawName, fmtTime(row.raw),
			fmtRatio(ratio) + " " + metMark(ratio <= row.target), fmt.Sprintf("≤ %.2fx", row.target),
			fmtTime(row.perKey), fmtRatio(speedup) + " " + metMark(speedup >= perKeyTarget)})
		rep.Records = append(rep.Records,
			Record{Suite: "redis", Table: tbl.ID, Row: s.String(), Series: "tq " + row.op, Unit: "s", Dist: row.tq, Bytes: bytes},
			Record{Suite: "redis", Table: tbl.ID, Row: s.String(), Series: row.rawName, Unit: "s", Dist: row.raw, Bytes: bytes},
			Record{Suite: "redis", Table: tbl.ID, Row: s.String(), Series: row.op + " one round trip per key", Unit: "s", Dist: row.perKey, Bytes: bytes})
	}
	var chunks []string
	for _, name := range redisArmsFor(s) {
		if strings.HasPrefix(name, "raw MGET") {
			chunks = append(chunks, fmt.Sprintf("%s %s", strings.TrimPrefix(name, "raw MGET "), fmtTime(dist(name))))
		}
	}
	tbl.Notes = append(tbl.Notes, fmt.Sprintf("%s raw MGET chunkings: %s.", s, strings.Join(chunks, "; ")))
	return nil
}

func metMark(ok bool) string {
	if ok {
		return "(met)"
	}
	return "(NOT met)"
}

// pipelinedSET writes vals under keys in one go-redis pipeline.
func pipelinedSET(ctx context.Context, c *redis.Client, keys []string, vals [][]byte) error {
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			p.Set(ctx, k, vals[i], 0)
		}
		return nil
	})
	return err
}

// chunkedMGET reads keys with MGETs of chunk keys, one after another.
func chunkedMGET(ctx context.Context, c *redis.Client, keys []string, chunk int) error {
	for lo := 0; lo < len(keys); lo += chunk {
		v, err := c.MGet(ctx, keys[lo:min(lo+chunk, len(keys))]...).Result()
		if err != nil {
			return err
		}
		if slices.Contains(v, nil) {
			return fmt.Errorf("raw MGET: a key is missing")
		}
	}
	return nil
}
