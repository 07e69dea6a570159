package main

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"

	"github.com/tqgo/tqgo/codec"
)

// packModes are the three packers of TransferQueue PR #153's table, in Go: everything on
// the calling goroutine; TransferQueue's fixed pool of 16 used for every
// object; and the size-aware default.
var packModes = []struct {
	name string
	opts codec.Options
}{
	{"serial", codec.Options{DSMaxWorkers: 1}},
	{"pool16", codec.Options{DSMaxWorkers: 16, Oversubscribe: true, PackThreshold: 1, PoolMinBatchBytes: 1}},
	{"size-aware", codec.DefaultOptions()},
}

// sweepPoint is one batch shape measured in every mode; times are seconds
// per batch.
type sweepPoint struct {
	Size, Objects int
	Copy          Dist
	Modes         []Dist // in packModes order
	DefaultPath   string // which path the size-aware packer took
}

func (p sweepPoint) bytes() int64 { return int64(p.Size) * int64(p.Objects) }

func packSteps(cfg Config, m *meter) int {
	return (len(cfg.Sizes) + len(cfg.Counts)) * m.planSteps(1+len(packModes))
}

func runPack(ctx context.Context, cfg Config, m *meter, rep *Report) error {
	var sizes, counts []sweepPoint
	for _, size := range cfg.Sizes {
		pt, err := packPoint(ctx, m, size, cfg.Objects)
		if err != nil {
			return err
		}
		sizes = append(sizes, pt)
	}
	for _, n := range cfg.Counts {
		pt, err := packPoint(ctx, m, cfg.CountSize, n)
		if err != nil {
			return err
		}
		counts = append(counts, pt)
	}
	rep.SizeSweep = sizes

	if len(sizes) > 0 {
		t := packTable("pack-size", fmt.Sprintf("Pack: object-size sweep (%d objects per batch)", cfg.Objects), sizes,
			func(p sweepPoint) string { return fmtSize(p.Size) }, rep)
		t.Intro = packIntro
		t.Notes = append(t.Notes, crossover(sizes))
		rep.Tables = append(rep.Tables, t)
	}
	if len(counts) > 0 {
		t := packTable("pack-count", fmt.Sprintf("Pack: object-count sweep (%s objects)", fmtSize(cfg.CountSize)), counts,
			func(p sweepPoint) string { return fmt.Sprint(p.Objects) }, rep)
		t.Intro = "TransferQueue PR #153's second table: the same modes and method at a fixed object size, the count growing."
		if len(sizes) == 0 {
			t.Intro = packIntro
		}
		rep.Tables = append(rep.Tables, t)
	}
	return nil
}

const packIntro = "Wall time per `Packer.BatchEncodeInto` call, median [min–max] of the repetitions. " +
	"serial: `DSMaxWorkers` 1; pool16: TransferQueue's fixed pool of 16 for every object (`DSMaxWorkers` 16, " +
	"`Oversubscribe`, `PackThreshold` 1, `PoolMinBatchBytes` 1; the codec hands the pool byte-balanced shares of at least 64 KiB, " +
	"not one task per object as TransferQueue's thread pool does); size-aware: `codec.DefaultOptions()`. " +
	"Destination buffers are preallocated and reused, so page faults are not measured; `copy()` moves the same " +
	"tensor bytes on one goroutine, the limit. \"÷ serial\" are ratios of medians (below 1x: faster than serial); " +
	"\"of copy()\" is the share of copy()'s throughput reached."

func packTable(id, title string, pts []sweepPoint, label func(sweepPoint) string, rep *Report) *Table {
	t := &Table{
		ID:    id,
		Title: title,
		Header: []string{"object size", "objects", "copy() limit", "serial", "pool16", "size-aware",
			"pool16 ÷ serial", "size-aware ÷ serial", "size-aware of copy()", "size-aware path"},
	}
	for _, p := range pts {
		serial, pool, def := p.Modes[0], p.Modes[1], p.Modes[2]
		t.Rows = append(t.Rows, []string{
			fmtSize(p.Size), fmt.Sprint(p.Objects), fmtTime(p.Copy), fmtTime(serial), fmtTime(pool), fmtTime(def),
			fmtRatio(pool.Median / serial.Median), fmtRatio(def.Median / serial.Median), fmtPercent(p.Copy.Median / def.Median),
			p.DefaultPath,
		})
		row := label(p)
		rep.Records = append(rep.Records, Record{Suite: "pack", Table: id, Row: row, Series: "copy", Unit: "s", Dist: p.Copy, Bytes: p.bytes()})
		for i, md := range packModes {
			rep.Records = append(rep.Records, Record{Suite: "pack", Table: id, Row: row, Series: md.name, Unit: "s", Dist: p.Modes[i], Bytes: p.bytes()})
		}
	}
	return t
}

// crossover names the smallest object size at which the pool's median beats
// serial's (TransferQueue PR #153 found about 256 KiB in Python), and says whether the
// two ranges are apart or the win is within the spread of the repetitions.
func crossover(pts []sweepPoint) string {
	for _, p := range pts {
		serial, pool := p.Modes[0], p.Modes[1]
		if pool.Median < serial.Median {
			spread := "the ranges overlap, so the win is within the spread of the repetitions"
			if pool.Max < serial.Min {
				spread = "every pool16 repetition beat every serial one"
			}
			return fmt.Sprintf("Measured crossover: pool16 first beats serial at **%s** per object (%s of serial's time; %s).",
				fmtSize(p.Size), fmtRatio(pool.Median/serial.Median), spread)
		}
	}
	return "Measured crossover: pool16 never beats serial in this sweep."
}

// packPoint measures one batch shape: size-byte tensors, objects of them.
func packPoint(ctx context.Context, m *meter, size, objects int) (sweepPoint, error) {
	defer func() {
		runtime.GC()
		debug.FreeOSMemory() // a 1 GiB sweep point must not stay resident on a shared machine
	}()
	vals, srcs := packValues(objects, size)

	// Size the destinations once and fault their pages in: every arm then
	// writes into the same warm memory.
	var dst [][]byte
	sizer := func(sizes []int) ([][]byte, error) {
		var err error
		dst, err = codec.HeapAllocator(sizes)
		for _, d := range dst {
			clear(d)
		}
		return dst, err
	}
	if _, err := codec.BatchEncodeInto(vals, sizer, packModes[0].opts); err != nil {
		return sweepPoint{}, err
	}
	reuse := func([]int) ([][]byte, error) { return dst, nil }

	label := fmt.Sprintf("pack %s×%d", fmtSize(size), objects)
	arms := []*arm{{name: "copy", op: func() error {
		for i, s := range srcs {
			copy(dst[i], s)
		}
		return nil
	}}}
	packers := make([]*codec.Packer, len(packModes))
	for i, md := range packModes {
		p := codec.NewPacker(md.opts)
		defer p.Close()
		packers[i] = p
		if err := packParity(p, vals, dst, reuse); err != nil {
			return sweepPoint{}, fmt.Errorf("%s: %s: parity: %w", label, md.name, err)
		}
		arms = append(arms, &arm{name: md.name, op: func() error {
			_, err := p.BatchEncodeInto(vals, reuse)
			return err
		}})
	}
	before := packers[2].Stats()
	dists, err := m.run(ctx, label, arms)
	if err != nil {
		return sweepPoint{}, err
	}
	return sweepPoint{Size: size, Objects: objects, Copy: dists[0], Modes: dists[1:], DefaultPath: packPath(before, packers[2].Stats())}, nil
}

// packPath says which path the size-aware packer's objects took while it
// was measured.
func packPath(before, after codec.Stats) string {
	pooled := after.PooledObjects - before.PooledObjects
	serial := after.SerialObjects - before.SerialObjects
	switch {
	case pooled == 0:
		return "serial"
	case serial == 0:
		return "pool"
	}
	return fmt.Sprintf("pool %.0f%%", 100*float64(pooled)/float64(pooled+serial))
}

// packParity packs vals with p into cleared buffers and checks that they
// decode to vals, byte for byte.
func packParity(p *codec.Packer, vals []any, dst [][]byte, alloc codec.Allocator) error {
	for _, d := range dst {
		clear(d)
	}
	bufs, err := p.BatchEncodeInto(vals, alloc)
	if err != nil {
		return err
	}
	got, err := codec.BatchDecodeFrom(bufs)
	if err != nil {
		return err
	}
	for i, v := range vals {
		want := v.(codec.Tensor)
		g, ok := got[i].(codec.Tensor)
		if !ok || g.DType != want.DType || !slices.Equal(g.Shape, want.Shape) || !bytes.Equal(g.Data, want.Data) {
			return fmt.Errorf("object %d decoded differently from what was packed", i)
		}
	}
	return nil
}

// packValues builds n tensors of size bytes, alternately uint8 and float32
// (when size allows), each over its own memory so copies stream from RAM as
// in production, and returns them with their byte views.
func packValues(n, size int) ([]any, [][]byte) {
	backing := make([]byte, n*size)
	for i := range min(len(backing), 4096) {
		backing[i] = byte(i*7 + i>>8 + 1)
	}
	for done := 4096; done < len(backing); done *= 2 {
		copy(backing[done:], backing[:done])
	}
	vals := make([]any, n)
	srcs := make([][]byte, n)
	for i := range vals {
		data := backing[i*size : (i+1)*size : (i+1)*size]
		srcs[i] = data
		if i%2 == 1 && size%4 == 0 {
			vals[i] = codec.Tensor{DType: codec.Float32, Shape: []int64{int64(size / 4)}, Data: data}
		} else {
			vals[i] = codec.Tensor{DType: codec.Uint8, Shape: []int64{int64(size)}, Data: data}
		}
	}
	return vals, srcs
}
