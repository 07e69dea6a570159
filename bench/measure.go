package main

import (
	"context"
	"fmt"
	"math"
	"time"
)

// An arm is one side of an A/B comparison. Set exactly one of op and timed.
type arm struct {
	name string
	// op performs the operation once; a sample times a loop of calls, so
	// not even the clock is read per call.
	op func() error
	// timed performs the operation once and returns how long the measured
	// part took: set-up and checks around it (writing the keys a read needs,
	// comparing what was read, deleting) are not counted.
	timed func() (time.Duration, error)
	// once: every sample is one call, and the warm-up is one call (for
	// arms that run an outside tool, which repeats internally).
	once bool
	// calls, when set, is how many calls make a sample, without
	// calibration: for arms whose untimed part (a wake-up's wait before
	// the producer writes) dwarfs the part timed, which a calibration by
	// the time measured would run thousands of times per sample.
	calls int

	iters   int       // calls per sample, found by calibrate
	samples []float64 // seconds per call, one per repetition
}

// sample runs the arm iters times and returns the measured seconds per call.
func (a *arm) sample(iters int) (float64, error) {
	if a.op != nil {
		start := time.Now()
		for range iters {
			if err := a.op(); err != nil {
				return 0, err
			}
		}
		return time.Since(start).Seconds() / float64(iters), nil
	}
	var total time.Duration
	for range iters {
		d, err := a.timed()
		if err != nil {
			return 0, err
		}
		total += d
	}
	return total.Seconds() / float64(iters), nil
}

// meter runs arms the way FlashPack PR #31 prescribes: each arm is warmed up and
// calibrated, then every repetition takes one sample of each arm in turn
// (the starting arm rotating with the repetition), so slow drifts of a
// shared machine hit every arm alike instead of whichever ran last. The
// result is the median and range of the repetitions.
type meter struct {
	reps      int
	minSample time.Duration // a sample lasts at least this long
	prog      *progress
}

// maxIters bounds a sample of a very fast op.
const maxIters = 1 << 20

// run measures arms and returns one distribution of seconds per call per
// arm, in order.
func (m *meter) run(ctx context.Context, label string, arms []*arm) ([]Dist, error) {
	for _, a := range arms {
		if err := m.calibrate(a); err != nil {
			return nil, fmt.Errorf("%s: %s: warm-up: %w", label, a.name, err)
		}
		a.samples = a.samples[:0]
		m.prog.step(label + " warm-up")
	}
	for r := range m.reps {
		for j := range arms {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			a := arms[(j+r)%len(arms)]
			sec, err := a.sample(a.iters)
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", label, a.name, err)
			}
			a.samples = append(a.samples, sec)
			m.prog.step(fmt.Sprintf("%s rep %d/%d", label, r+1, m.reps))
		}
	}
	out := make([]Dist, len(arms))
	for i, a := range arms {
		out[i] = summarize(a.samples)
	}
	return out, nil
}

// calibrate warms a up and picks how many calls make a sample of at least
// minSample: timing a 10 µs op once per sample would measure the clock.
func (m *meter) calibrate(a *arm) error {
	if _, err := a.sample(1); err != nil { // first touch: pools, caches, lazy state
		return err
	}
	if a.once || a.calls > 0 {
		a.iters = max(a.calls, 1)
		return nil
	}
	for n := 1; ; n *= 4 {
		per, err := a.sample(n)
		if err != nil {
			return err
		}
		if el := per * float64(n); el >= m.minSample.Seconds()/4 || n >= maxIters {
			a.iters = int(math.Ceil(m.minSample.Seconds() / max(per, 1e-9)))
			a.iters = min(max(a.iters, 1), maxIters)
			return nil
		}
	}
}

// planSteps is how many progress steps run makes for n arms.
func (m *meter) planSteps(n int) int { return n * (1 + m.reps) }
