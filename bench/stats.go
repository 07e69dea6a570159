package main

import (
	"fmt"
	"math"
	"slices"
)

// Dist summarises repeated samples of one quantity: the median and the
// range, as FlashPack PR #31 reports them.
type Dist struct {
	Median, Min, Max float64
	N                int
}

func summarize(xs []float64) Dist {
	if len(xs) == 0 {
		return Dist{Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Dist{Median: med, Min: s[0], Max: s[len(s)-1], N: len(s)}
}

// timeUnit is the unit that keeps sec between 1 and 1000.
func timeUnit(sec float64) (scale float64, name string) {
	switch {
	case sec < 1e-6:
		return 1e9, "ns"
	case sec < 1e-3:
		return 1e6, "µs"
	case sec < 1:
		return 1e3, "ms"
	}
	return 1, "s"
}

// fmtTime is a time distribution as "median [min–max]", the range in the
// median's unit: "1.23 ms [1.20–1.31]".
func fmtTime(d Dist) string {
	if d.N == 0 || math.IsNaN(d.Median) {
		return "n/a"
	}
	scale, unit := timeUnit(d.Median)
	return fmt.Sprintf("%s %s [%s–%s]", sig3(d.Median*scale), unit, sig3(d.Min*scale), sig3(d.Max*scale))
}

// rateUnit is MB/s or GB/s (decimal, as redis-benchmark and the machine
// limits report them).
func rateUnit(bps float64) (scale float64, name string) {
	if bps >= 1e9 {
		return 1e-9, "GB/s"
	}
	return 1e-6, "MB/s"
}

// fmtRate prints bytes per second.
func fmtRate(bps float64) string {
	if math.IsNaN(bps) || math.IsInf(bps, 0) {
		return "n/a"
	}
	scale, unit := rateUnit(bps)
	return sig3(bps*scale) + " " + unit
}

// fmtRateDist is the throughput of moving bytes in the times of d, as
// "median [slowest–fastest]" in the median's unit.
func fmtRateDist(bytes float64, d Dist) string {
	if d.N == 0 || math.IsNaN(d.Median) {
		return "n/a"
	}
	med := bytes / d.Median
	scale, unit := rateUnit(med)
	return fmt.Sprintf("%s %s [%s–%s]", sig3(med*scale), unit, sig3(bytes/d.Max*scale), sig3(bytes/d.Min*scale))
}

// fmtRatio prints a/b as "1.23x".
func fmtRatio(r float64) string {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return "n/a"
	}
	return sig3(r) + "x"
}

func sig3(x float64) string {
	switch ax := math.Abs(x); {
	case ax >= 100:
		return fmt.Sprintf("%.0f", x)
	case ax >= 10:
		return fmt.Sprintf("%.1f", x)
	}
	return fmt.Sprintf("%.2f", x)
}

// fmtSize prints a byte count the way the sweep flags take it.
func fmtSize(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// fmtPercent prints a fraction as a percentage.
func fmtPercent(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "n/a"
	}
	switch p := 100 * f; {
	case p < 1:
		return fmt.Sprintf("%.2f%%", p)
	case p < 10:
		return fmt.Sprintf("%.1f%%", p)
	default:
		return fmt.Sprintf("%.0f%%", p)
	}
}
