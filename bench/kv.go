package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tqgo/tqgo/codec"
	"github.com/tqgo/tqgo/tq"
)

const kvPartition = "bench"

// grpo is a GRPO-shaped batch: what a rollout worker hands the trainer per
// step, one row per sample.
type grpo struct {
	n, L      int
	keys      []string
	inputIDs  []int64 // [n, L]
	responses []int64 // [n, L]
	mask      []float32
	logp      []float32
	rewards   []float32 // [n]
	uid       []string  // prompt id, shared by a group of responses
	batch     tq.Batch
	tags      []tq.Tag
}

var grpoFields = []string{"attention_mask", "input_ids", "old_log_probs", "responses", "rewards", "uid"}

func newGRPO(n, L int) *grpo {
	g := &grpo{n: n, L: L,
		keys: make([]string, n), inputIDs: make([]int64, n*L), responses: make([]int64, n*L),
		mask: make([]float32, n*L), logp: make([]float32, n*L), rewards: make([]float32, n), uid: make([]string, n),
		tags: make([]tq.Tag, n),
	}
	x := uint64(0x9e3779b97f4a7c15)
	next := func() uint64 { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return x }
	for i := range n {
		g.keys[i] = fmt.Sprintf("sample-%06d", i)
		g.uid[i] = fmt.Sprintf("prompt-%06d", i/8) // 8 responses per prompt
		g.rewards[i] = float32(next()%2) - 0.5
		g.tags[i] = tq.Tag{"step": int64(0), "status": "rolled_out"}
		valid := L/2 + int(next()%uint64(L/2+1)) // padded tail
		for j := range L {
			k := i*L + j
			g.inputIDs[k] = int64(next() % 151_936)
			g.responses[k] = int64(next() % 151_936)
			if j < valid {
				g.mask[k] = 1
			}
			g.logp[k] = -float32(next()%10_000) / 1000
		}
	}
	g.batch = tq.Batch{
		"input_ids":      tq.Stacked(g.inputIDs, n, L),
		"responses":      tq.Stacked(g.responses, n, L),
		"attention_mask": tq.Stacked(g.mask, n, L),
		"old_log_probs":  tq.Stacked(g.logp, n, L),
		"rewards":        tq.Stacked(g.rewards),
		"uid":            tq.ValuesOf(g.uid),
	}
	return g
}

// payload is the batch's data bytes: tensor bytes and uid strings.
func (g *grpo) payload() int64 {
	b := int64(g.n) * int64(g.L) * (8 + 8 + 4 + 4)
	b += int64(g.n) * 4
	for _, u := range g.uid {
		b += int64(len(u))
	}
	return b
}

// cells packs the batch as tq does, one object per (field, sample) in
// field-major order: the bytes the raw limits move.
func (g *grpo) cells() ([][]byte, error) {
	var vals []any
	for _, f := range grpoFields {
		vals = append(vals, g.batch[f].Values()...)
	}
	return codec.BatchEncodeInto(vals, codec.HeapAllocator, codec.Options{DSMaxWorkers: 1})
}

// check is the parity check: b must hold exactly what was written.
func (g *grpo) check(b tq.Batch) error {
	if got := b.Fields(); !slices.Equal(got, grpoFields) {
		return fmt.Errorf("read fields %v, wrote %v", got, grpoFields)
	}
	if b.Len() != g.n {
		return fmt.Errorf("read %d rows, wrote %d", b.Len(), g.n)
	}
	if err := sameAs(b, "input_ids", g.inputIDs); err != nil {
		return err
	}
	if err := sameAs(b, "responses", g.responses); err != nil {
		return err
	}
	if err := sameAs(b, "attention_mask", g.mask); err != nil {
		return err
	}
	if err := sameAs(b, "old_log_probs", g.logp); err != nil {
		return err
	}
	if err := sameAs(b, "rewards", g.rewards); err != nil {
		return err
	}
	for i, v := range b["uid"].Values() {
		if s, ok := v.(string); !ok || s != g.uid[i] {
			return fmt.Errorf("uid of row %d: read %v, wrote %q", i, v, g.uid[i])
		}
	}
	return nil
}

func sameAs[T codec.Element](b tq.Batch, field string, want []T) error {
	got, err := tq.As[T](b[field])
	if err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	if !slices.Equal(got, want) {
		return fmt.Errorf("%s: read values differ from those written", field)
	}
	return nil
}

// kvArms are the arms of one engine: BatchPut, BatchGet and their limits.
type kvArms struct {
	t                      *target
	put, get               *arm
	putBlocks              *arm // BatchPut by a client WithIndexBlocks (a tq server's: redis:// sends a commit with its cells already)
	limPut, limGet         *arm // the same arm for a copy() limit
	limPutName, limGetName string
}

func kvSteps(targets []*target, m *meter) int {
	n, copyArm := 0, 0
	for _, t := range targets {
		switch {
		case t.kv && t.isServed():
			n += 5 // BatchPut, BatchPut by blocks, BatchGet, raw SET, raw MGET
		case t.kv && t.isRedis():
			n += 4 // BatchPut, BatchGet, raw SET, raw MGET
		case t.kv:
			n += 2
			copyArm = 1 // one copy() arm serves every in-process engine
		}
	}
	return m.planSteps(n + copyArm)
}

// runKV writes and reads the GRPO batch through tq on every engine, with
// every engine's arms interleaved in one rotation.
func runKV(ctx context.Context, cfg Config, m *meter, targets []*target, rep *Report) error {
	g := newGRPO(cfg.Samples, cfg.L)
	cells, err := g.cells()
	if err != nil {
		return err
	}
	dst := make([][]byte, len(cells))
	for i, c := range cells {
		dst[i] = make([]byte, len(c))
	}
	copyLimit := &arm{name: "copy", op: func() error {
		for i, c := range cells {
			copy(dst[i], c)
		}
		return nil
	}}

	var engines []*kvArms
	var arms []*arm
	copyAdded := false
	for _, t := range targets {
		if !t.kv {
			continue
		}
		c, err := tq.Open(ctx, t.url)
		if err != nil {
			return fmt.Errorf("open %s: %w", t.name, err)
		}
		defer c.Close()
		if err := c.ClearPartition(ctx, kvPartition); err != nil {
			return fmt.Errorf("%s: clearing partition: %w", t.name, err)
		}
		e := &kvArms{t: t}
		e.put = &arm{name: t.name + " BatchPut", timed: func() (time.Duration, error) {
			start := time.Now()
			if err := c.BatchPut(ctx, kvPartition, g.keys, g.batch, g.tags); err != nil {
				return 0, err
			}
			d := time.Since(start)
			return d, c.ClearPartition(ctx, kvPartition)
		}}
		e.get = &arm{name: t.name + " BatchGet", timed: func() (time.Duration, error) {
			if err := c.BatchPut(ctx, kvPartition, g.keys, g.batch, g.tags); err != nil {
				return 0, err
			}
			start := time.Now()
			b, err := c.BatchGet(ctx, kvPartition, g.keys)
			if err != nil {
				return 0, err
			}
			d := time.Since(start)
			if err := g.check(b); err != nil {
				return 0, fmt.Errorf("parity: %w", err)
			}
			return d, c.ClearPartition(ctx, kvPartition)
		}}
		arms = append(arms, e.put, e.get)
		if t.isServed() {
			// A put of new keys by a block of indexes reserved ahead:
			// its cells, then one call (tq.WithIndexBlocks). On redis://
			// a put is already two round trips (Prepare, then the cells
			// with their commit), and blocks are not used.
			cb, err := tq.Open(ctx, t.url, tq.WithIndexBlocks())
			if err != nil {
				return fmt.Errorf("open %s: %w", t.name, err)
			}
			defer cb.Close()
			e.putBlocks = &arm{name: t.name + " BatchPut by blocks", timed: func() (time.Duration, error) {
				start := time.Now()
				if err := cb.BatchPut(ctx, kvPartition, g.keys, g.batch, g.tags); err != nil {
					return 0, err
				}
				d := time.Since(start)
				return d, cb.ClearPartition(ctx, kvPartition)
			}}
			arms = append(arms, e.putBlocks)
		}
		if t.isRedis() {
			raw := newRawRedis(t.redisOpts, len(cells))
			defer raw.Close()
			e.limPutName, e.limGetName = "go-redis pipelined SET", fmt.Sprintf("go-redis pipelined MGET ×%d", mgetChunk)
			e.limPut = &arm{name: t.name + " raw SET", timed: func() (time.Duration, error) {
				start := time.Now()
				if err := raw.set(ctx, cells); err != nil {
					return 0, err
				}
				d := time.Since(start)
				return d, raw.del(ctx, len(cells))
			}}
			e.limGet = &arm{name: t.name + " raw MGET", timed: func() (time.Duration, error) {
				if err := raw.set(ctx, cells); err != nil {
					return 0, err
				}
				start := time.Now()
				cmds, err := raw.mget(ctx, cells)
				if err != nil {
					return 0, err
				}
				d := time.Since(start)
				if err := raw.check(cmds, cells); err != nil {
					return 0, fmt.Errorf("parity: %w", err)
				}
				return d, raw.del(ctx, len(cells))
			}}
			arms = append(arms, e.limPut, e.limGet)
		} else {
			e.limPutName, e.limGetName = "copy() of the same bytes", "copy() of the same bytes"
			e.limPut, e.limGet = copyLimit, copyLimit
			if !copyAdded {
				arms = append(arms, copyLimit)
				copyAdded = true
			}
		}
		engines = append(engines, e)
	}
	if len(engines) == 0 {
		rep.note("kv: no engine to run")
		return nil
	}
	if _, err := m.run(ctx, "kv", arms); err != nil {
		return err
	}

	t := &Table{
		ID:    "kv",
		Title: fmt.Sprintf("KV: GRPO batch of %d samples, L = %d", g.n, g.L),
		Intro: fmt.Sprintf("Fields input_ids, responses int64 [L]; attention_mask, old_log_probs float32 [L]; rewards float32; uid string: "+
			"%d cells, %s of payload. Each BatchPut writes fresh keys into an empty partition (\"index blocks\", through a tq server: by a client with "+
			"tq.WithIndexBlocks, its cells then one call); each BatchGet reads every field "+
			"of every key and is checked value for value against what was written (parity). Time per batch, median [min–max]; "+
			"\"of limit\" is the limit's time over the engine's: the share of the limit's throughput reached. "+
			"Limits move the same packed bytes: copy() on one goroutine for in-process engines, raw go-redis for Redis.",
			len(cells), fmtSize(int(g.payload()))),
		Header: []string{"engine", "op", "time per batch", "throughput", "limit", "limit time", "of limit"},
	}
	for _, e := range engines {
		for _, row := range []struct {
			op, limName string
			a, lim      *arm
		}{{"BatchPut", e.limPutName, e.put, e.limPut}, {"BatchPut, index blocks", e.limPutName, e.putBlocks, e.limPut}, {"BatchGet", e.limGetName, e.get, e.limGet}} {
			if row.a == nil {
				continue
			}
			d, ld := summarize(row.a.samples), summarize(row.lim.samples)
			t.Rows = append(t.Rows, []string{e.t.name, row.op, fmtTime(d), fmtRate(float64(g.payload()) / d.Median),
				row.limName, fmtTime(ld), fmtPercent(ld.Median / d.Median)})
			rep.Records = append(rep.Records,
				Record{Suite: "kv", Table: "kv", Row: e.t.name, Series: row.op, Unit: "s", Dist: d, Bytes: g.payload()},
				Record{Suite: "kv", Table: "kv", Row: e.t.name, Series: row.op + " limit: " + row.limName, Unit: "s", Dist: ld, Bytes: g.payload()})
		}
	}
	rep.Tables = append(rep.Tables, t)
	return nil
}
