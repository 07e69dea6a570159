package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"strings"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/tq"
)

// Config is one run of the loop. DefaultConfig gives the values the flags
// default to; a zero field is invalid except where noted.
type Config struct {
	// URL is the queue to open; "" is the embedded memory engine. Ignored
	// when Engine is set.
	URL string
	// Engine, when its Data is set, is used instead of opening URL, and
	// not closed (tests pass an instrumented engine).
	Engine backends.Engine

	Steps   int     // training steps (default 30)
	Prompts int     // prompts per step (default 64)
	Group   int     // responses per prompt, the GRPO group; at least 2 (default 8)
	Length  int     // prompt and response length in tokens (default 6)
	Vocab   int     // vocabulary size; at least 2 (default 8)
	LR      float64 // learning rate (default 4)
	ClipEps float64 // PPO clip range; 0 means no clipping (default 0.2)
	Epochs  int     // gradient passes over each step's batch (default 2)
	Seed    uint64  // seeds the prompts and the sampling; 0 is a valid seed (default 1)
	Quiet   bool    // print only the summary
}

// DefaultConfig returns the configuration `go run ./examples/grpo` uses.
func DefaultConfig() Config {
	return Config{Steps: 30, Prompts: 64, Group: 8, Length: 6, Vocab: 8, LR: 4, ClipEps: 0.2, Epochs: 2, Seed: 1}
}

func (c Config) validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.Steps >= 1, "steps %d < 1", c.Steps)
	check(c.Prompts >= 1, "prompts %d < 1", c.Prompts)
	check(c.Group >= 2, "group %d < 2 (a group of one has no baseline)", c.Group)
	check(c.Length >= 1, "length %d < 1", c.Length)
	check(c.Vocab >= 2, "vocab %d < 2", c.Vocab)
	check(c.LR > 0, "lr %g <= 0", c.LR)
	check(c.ClipEps >= 0, "clip %g < 0", c.ClipEps)
	check(c.Epochs >= 1, "epochs %d < 1", c.Epochs)
	return errors.Join(errs...)
}

// Result is what a run measured.
type Result struct {
	Rewards []float64       // mean reward of each step
	TQ      []time.Duration // time inside tq calls in each step
	TQTotal time.Duration   // time inside tq calls, all steps
	Wall    time.Duration   // the whole loop
}

// First is the mean of the first k steps' rewards (fewer if there are
// fewer steps).
func (r Result) First(k int) float64 { return meanOf(r.Rewards[:min(k, len(r.Rewards))]) }

// Last is the mean of the last k steps' rewards.
func (r Result) Last(k int) float64 { return meanOf(r.Rewards[len(r.Rewards)-min(k, len(r.Rewards)):]) }

func meanOf(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(max(len(xs), 1))
}

// partitionPrefix names the loop's partitions: one per step,
// "grpo/step-0001" and so on. A partition per step keeps each List down to
// the rows of the step in flight and means rows of different steps never
// mix; the trainer clears a step's rows once it has trained on them, which
// leaves the partition empty, and an empty partition costs nothing.
const partitionPrefix = "grpo/step-"

// Run trains a fresh policy for cfg.Steps steps. Every step, four workers
// take turns, each reading its inputs from the queue and writing its
// outputs to it: rollout, reward, advantage, train (see the package doc).
// Progress goes to out, a line per step unless cfg.Quiet, then a summary.
func Run(ctx context.Context, cfg Config, out io.Writer) (res Result, err error) {
	if err := cfg.validate(); err != nil {
		return Result{}, fmt.Errorf("grpo: %w", err)
	}
	timer := &callTimer{}
	var c *tq.Client
	if cfg.Engine.Data != nil {
		c, err = tq.New(cfg.Engine, tq.WithTracer(timer))
	} else {
		c, err = tq.Open(ctx, cfg.URL, tq.WithTracer(timer))
	}
	if err != nil {
		return Result{}, fmt.Errorf("grpo: %w", err)
	}
	defer func() { err = errors.Join(err, c.Close()) }()
	q := &queue{Client: c, timer: timer}
	if err := checkFresh(ctx, q); err != nil {
		return Result{}, err
	}

	t := task{length: cfg.Length, vocab: cfg.Vocab}
	pol := newPolicy(t)
	data := rand.New(rand.NewPCG(cfg.Seed, 1)) // the prompts: the dataset
	gen := rand.New(rand.NewPCG(cfg.Seed, 2))  // the rollout's sampling
	h := hyper{lr: cfg.LR, clipEps: cfg.ClipEps, epochs: cfg.Epochs}
	n := cfg.Prompts * cfg.Group

	fmt.Fprintf(out, "grpo on %s: %d steps, %d prompts x %d responses, length %d, vocab %d (random reward %.3f), lr %g, clip %g, epochs %d, seed %d\n",
		engineName(cfg), cfg.Steps, cfg.Prompts, cfg.Group, cfg.Length, cfg.Vocab, 1/float64(cfg.Vocab), cfg.LR, cfg.ClipEps, cfg.Epochs, cfg.Seed)
	start := time.Now()
	for s := 1; s <= cfg.Steps; s++ {
		before := q.Spent()
		part := fmt.Sprintf("%s%04d", partitionPrefix, s)
		prompts := make([][]int64, cfg.Prompts)
		for i := range prompts {
			prompts[i] = t.prompt(data)
		}
		if err := rollout(ctx, q, part, s, prompts, cfg.Group, pol, gen); err != nil {
			return res, fmt.Errorf("grpo: step %d: rollout: %w", s, err)
		}
		m, err := worklist(ctx, q, part, statusRollout, n)
		if err != nil {
			return res, fmt.Errorf("grpo: step %d: reward: %w", s, err)
		}
		reward, err := score(ctx, q, t, m)
		if err != nil {
			return res, fmt.Errorf("grpo: step %d: %w", s, err)
		}
		if m, err = worklist(ctx, q, part, statusReward, n); err != nil {
			return res, fmt.Errorf("grpo: step %d: advantage: %w", s, err)
		}
		if done, err := advantages(ctx, q, m, cfg.Group); err != nil {
			return res, fmt.Errorf("grpo: step %d: %w", s, err)
		} else if done != n {
			return res, fmt.Errorf("grpo: step %d: advantage: %d of %d rows in complete groups", s, done, n)
		}
		if m, err = worklist(ctx, q, part, statusAdv, n); err != nil {
			return res, fmt.Errorf("grpo: step %d: train: %w", s, err)
		}
		clipFrac, err := train(ctx, q, pol, m, h)
		if err != nil {
			return res, fmt.Errorf("grpo: step %d: %w", s, err)
		}
		spent := q.Spent() - before
		res.Rewards = append(res.Rewards, reward)
		res.TQ = append(res.TQ, spent)
		if !cfg.Quiet {
			fmt.Fprintf(out, "step %3d  reward %.3f  clipped %.3f  tq %v\n", s, reward, clipFrac, spent.Round(time.Microsecond))
		}
	}
	res.Wall = time.Since(start)
	res.TQTotal = q.Spent()
	k := min(3, cfg.Steps)
	fmt.Fprintf(out, "done: mean reward %.3f (first %d steps) -> %.3f (last %d); %d samples through the queue; tq calls %v of %v (%.0f%%)\n",
		res.First(k), k, res.Last(k), k, n*cfg.Steps, res.TQTotal.Round(time.Microsecond), res.Wall.Round(time.Microsecond),
		100*res.TQTotal.Seconds()/max(res.Wall.Seconds(), 1e-9))
	return res, nil
}

// worklist is what a worker consuming status finds in partition. In this
// loop the stages take turns, so it must be the whole step.
func worklist(ctx context.Context, q *queue, partition, status string, want int) (*tq.BatchMeta, error) {
	m, err := q.pending(ctx, partition, status)
	if err != nil {
		return nil, err
	}
	if len(m.Rows) != want {
		return nil, fmt.Errorf("%d rows with status %q in %s, want %d", len(m.Rows), status, partition, want)
	}
	return m, nil
}

// checkFresh refuses a queue that still holds the loop's partitions (a
// shared engine after an interrupted run): their rows would be mistaken
// for this run's.
func checkFresh(ctx context.Context, q *queue) error {
	parts, err := q.Partitions(ctx)
	if err != nil {
		return fmt.Errorf("grpo: %w", err)
	}
	var stale []string
	for _, p := range parts {
		if strings.HasPrefix(p, partitionPrefix) {
			stale = append(stale, p)
		}
	}
	if len(stale) > 0 {
		return fmt.Errorf("grpo: the queue holds %d partitions of an earlier run (%s ...): clear them or use another queue", len(stale), stale[0])
	}
	return nil
}

// engineName describes the queue without a password in the URL.
func engineName(cfg Config) string {
	switch {
	case cfg.Engine.Data != nil:
		return "a caller's engine"
	case cfg.URL == "":
		return "memory (embedded)"
	}
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return "?"
	}
	if u.User == nil {
		return cfg.URL // Redacted would print "memory:" for "memory://"
	}
	return u.Redacted()
}
