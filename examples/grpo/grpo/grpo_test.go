package main

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

// countingStore is the memory engine, counting the cells written and read
// through it, so a test can tell data really went through the backend.
type countingStore struct {
	*memory.Store
	staged, read atomic.Int64 // cells written; cells read
}

func (s *countingStore) Write(ctx context.Context, cells []backends.Cell) error {
	s.staged.Add(int64(len(cells)))
	return s.Store.Write(ctx, cells)
}

func (s *countingStore) Read(ctx context.Context, cells []backends.ReadCell) error {
	s.read.Add(int64(len(cells)))
	return s.Store.Read(ctx, cells)
}

// newCountingClient returns a client over a counting memory engine, and
// the engine, for Config.Engine: clients of it share its metadata.
func newCountingClient(t *testing.T, opts ...tq.Option) (*tq.Client, *countingStore, backends.Engine) {
	t.Helper()
	st := &countingStore{Store: memory.New()}
	eng := backends.Engine{Data: st, Meta: memory.NewMetaStore(), Local: true}
	c, err := tq.New(eng, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c, st, eng
}

// smallConfig is a short run that still learns clearly: with the default
// seed, the reward goes from about 0.15 to about 0.8 in 20 steps.
func smallConfig() Config {
	cfg := DefaultConfig()
	cfg.Steps, cfg.Prompts, cfg.Length = 20, 16, 4
	cfg.Quiet = true
	return cfg
}

func TestRunLearnsAndClears(t *testing.T) {
	ctx := context.Background()
	c, st, eng := newCountingClient(t)
	cfg := smallConfig()
	cfg.Engine = eng
	var out bytes.Buffer
	res, err := Run(ctx, cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rewards) != cfg.Steps || len(res.TQ) != cfg.Steps {
		t.Fatalf("%d rewards, %d tq times for %d steps", len(res.Rewards), len(res.TQ), cfg.Steps)
	}
	first, last := res.First(3), res.Last(3)
	t.Logf("reward %.3f -> %.3f, tq %v of %v", first, last, res.TQTotal, res.Wall)
	if chance := 1 / float64(cfg.Vocab); first > chance+0.1 {
		t.Errorf("first steps' reward %.3f, want near chance %.3f", first, chance)
	}
	if last < first+0.4 {
		t.Errorf("reward %.3f -> %.3f: did not rise by 0.4", first, last)
	}
	if res.TQTotal <= 0 || res.TQTotal > res.Wall {
		t.Errorf("tq time %v, wall %v", res.TQTotal, res.Wall)
	}
	if !strings.Contains(out.String(), "done: mean reward") || strings.Contains(out.String(), "step   1") {
		t.Errorf("quiet output:\n%s", out.String())
	}

	// Every cell went through the backend: 5 fields from the rollout and
	// one each from reward and advantage, read back 2 + 3 + 5 times.
	n := int64(cfg.Steps * cfg.Prompts * cfg.Group)
	if got := st.staged.Load(); got != 7*n {
		t.Errorf("%d cells written, want %d", got, 7*n)
	}
	if got := st.read.Load(); got != 10*n {
		t.Errorf("%d cells read, want %d", got, 10*n)
	}

	// The trainer cleared what it trained on: no rows, no bytes.
	parts, err := c.Partitions(ctx)
	if err != nil || len(parts) != 0 {
		t.Errorf("partitions left: %v, %v", parts, err)
	}
	m, err := c.List(ctx, partitionPrefix+"0001")
	if err != nil || len(m.Rows) != 0 {
		t.Errorf("step 1: %d rows left, %v", len(m.Rows), err)
	}
	if st.Len() != 0 {
		t.Errorf("%d cells left in the backend", st.Len())
	}
}

func TestRunIsReproducible(t *testing.T) {
	ctx := context.Background()
	cfg := smallConfig()
	cfg.Steps = 5
	var runs [2]Result
	for i := range runs {
		var err error
		if runs[i], err = Run(ctx, cfg, &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(runs[0].Rewards, runs[1].Rewards) {
		t.Errorf("same seed, different rewards:\n%v\n%v", runs[0].Rewards, runs[1].Rewards)
	}
	cfg.Seed++
	other, err := Run(ctx, cfg, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(runs[0].Rewards, other.Rewards) {
		t.Errorf("seeds %d and %d gave the same rewards %v", cfg.Seed-1, cfg.Seed, other.Rewards)
	}
}

// TestStagesReadTheQueue runs the workers one at a time by hand: each
// fails with ErrNotReady, naming its missing input, until the stage before
// it has written that input, and the reward worker scores what is in the
// queue, not what the rollout had in memory.
func TestStagesReadTheQueue(t *testing.T) {
	ctx := context.Background()
	timer := &callTimer{}
	c, _, _ := newCountingClient(t, tq.WithTracer(timer))
	q := &queue{Client: c, timer: timer}
	tk := task{length: 4, vocab: 8}
	pol := newPolicy(tk)
	rng := rand.New(rand.NewPCG(1, 2))
	const part, group = "grpo/test", 4
	prompts := [][]int64{tk.prompt(rng), tk.prompt(rng)}
	if err := rollout(ctx, q, part, 1, prompts, group, pol, rng); err != nil {
		t.Fatal(err)
	}
	all, err := q.List(ctx, part)
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Rows) != len(prompts)*group {
		t.Fatalf("%d rows after rollout", len(all.Rows))
	}
	for _, r := range all.Rows {
		if r.Tag["status"] != statusRollout || r.Tag["step"] != int64(1) {
			t.Fatalf("row %s tag %v", r.Key, r.Tag)
		}
	}
	wantNotReady := func(stage string, err error, field string) {
		t.Helper()
		var ke *tq.KeyError
		if !errors.Is(err, tq.ErrNotReady) || !errors.As(err, &ke) || ke.Field != field {
			t.Errorf("%s before its input: %v, want ErrNotReady on %q", stage, err, field)
		}
	}
	_, err = advantages(ctx, q, all, group)
	wantNotReady("advantage", err, fRewards)
	_, err = train(ctx, q, pol, all, hyper{lr: 1, epochs: 1})
	wantNotReady("train", err, fAdvantages)

	// Replace the responses in the queue with the right answers: the reward
	// worker must see them.
	keys := all.Keys()
	right := make([]int64, 0, len(keys)*tk.length)
	for i := range keys {
		for _, p := range prompts[i/group] {
			right = append(right, (p+1)%int64(tk.vocab))
		}
	}
	if err := c.BatchPut(ctx, part, keys, tq.Batch{fResponses: tq.Stacked(right, len(keys), tk.length)}, nil); err != nil {
		t.Fatal(err)
	}
	m, err := q.pending(ctx, part, statusRollout)
	if err != nil {
		t.Fatal(err)
	}
	if mean, err := score(ctx, q, tk, m); err != nil || mean != 1 {
		t.Fatalf("reward of right answers: %v, %v; want 1", mean, err)
	}
	if m, _ := q.pending(ctx, part, statusRollout); len(m.Rows) != 0 {
		t.Errorf("%d rows still pending reward", len(m.Rows))
	}

	// All rewards equal: every advantage is 0.
	m, _ = q.pending(ctx, part, statusReward)
	if n, err := advantages(ctx, q, m, group); err != nil || n != len(keys) {
		t.Fatalf("advantage: %d rows, %v", n, err)
	}
	b, err := c.BatchGet(ctx, part, keys, fAdvantages)
	if err != nil {
		t.Fatal(err)
	}
	adv, _ := tq.As[float32](b[fAdvantages])
	if len(adv) != len(keys)*tk.length || slices.ContainsFunc(adv, func(a float32) bool { return a != 0 }) {
		t.Errorf("advantages %v, want all 0", adv)
	}

	m, _ = q.pending(ctx, part, statusAdv)
	if _, err := train(ctx, q, pol, m, hyper{lr: 1, epochs: 1}); err != nil {
		t.Fatal(err)
	}
	if m, _ := q.List(ctx, part); len(m.Rows) != 0 {
		t.Errorf("%d rows left after train", len(m.Rows))
	}
	if q.Spent() <= 0 {
		t.Error("no time counted in tq calls")
	}
}

// TestAdvantagesWaitForFullGroups: rows of a group not yet complete are
// left pending, and the normalisation is (r - mean) / (std + eps).
func TestAdvantagesWaitForFullGroups(t *testing.T) {
	ctx := context.Background()
	timer := &callTimer{}
	c, _, _ := newCountingClient(t, tq.WithTracer(timer))
	q := &queue{Client: c, timer: timer}
	const part = "grpo/adv"
	keys := []string{"a0", "a1", "b0"}
	err := c.BatchPut(ctx, part, keys, tq.Batch{
		fRewards:  tq.Stacked([]float32{1, 0, 1}),
		fUID:      tq.ValuesOf([]string{"a", "a", "b"}),
		fAttnMask: tq.Stacked([]int64{1, 1, 1, 0, 1, 1}, 3, 2),
	}, statusTags(3, statusReward))
	if err != nil {
		t.Fatal(err)
	}
	m, _ := q.pending(ctx, part, statusReward)
	if n, err := advantages(ctx, q, m, 2); err != nil || n != 2 {
		t.Fatalf("advantage: %d rows, %v; want the 2 of group a", n, err)
	}
	b, err := c.BatchGet(ctx, part, []string{"a0", "a1"}, fAdvantages)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := tq.As[float32](b[fAdvantages])
	// mean 0.5, unbiased std sqrt(0.5); the mask zeroes a1's second token.
	want := float32(0.5 / (0.70710678 + advEps))
	if len(got) != 4 || !near(got[0], want) || !near(got[1], want) || !near(got[2], -want) || got[3] != 0 {
		t.Errorf("advantages %v, want [%v %v %v 0]", got, want, want, -want)
	}
	if m, _ := q.pending(ctx, part, statusReward); len(m.Keys()) != 1 || m.Keys()[0] != "b0" {
		t.Errorf("pending after advantage: %v, want [b0]", m.Keys())
	}
}

func near(a, b float32) bool { return a-b < 1e-5 && b-a < 1e-5 }

func TestRunRejects(t *testing.T) {
	ctx := context.Background()
	cfg := smallConfig()
	cfg.Group = 1
	if _, err := Run(ctx, cfg, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "group 1") {
		t.Errorf("group of 1: %v", err)
	}

	// A queue still holding an earlier run's partition.
	c, _, eng := newCountingClient(t)
	err := c.BatchPut(ctx, partitionPrefix+"0007", []string{"k"}, tq.Batch{fUID: tq.ValuesOf([]string{"u"})}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg = smallConfig()
	cfg.Engine = eng
	if _, err := Run(ctx, cfg, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "earlier run") {
		t.Errorf("stale partition: %v", err)
	}

	if _, err := Run(ctx, Config{URL: "nosuch://x", Steps: 1, Prompts: 1, Group: 2, Length: 1, Vocab: 2, LR: 1, Epochs: 1}, &bytes.Buffer{}); err == nil {
		t.Error("unknown scheme: no error")
	}
}

func TestPolicyUpdateFollowsAdvantage(t *testing.T) {
	tk := task{length: 1, vocab: 3}
	pol := newPolicy(tk)
	logp := float32(-1.0986123) // log(1/3)
	batch := []trainRow{
		{prompt: []int64{0}, response: []int64{1}, oldLogp: []float32{logp}, adv: []float32{1}, mask: []int64{1}},
		{prompt: []int64{0}, response: []int64{2}, oldLogp: []float32{logp}, adv: []float32{-1}, mask: []int64{1}},
		{prompt: []int64{1}, response: []int64{2}, oldLogp: []float32{logp}, adv: []float32{5}, mask: []int64{0}},
	}
	pol.update(batch, 1, 0.2, 1)
	pr := pol.probs(0, 0, make([]float64, 3))
	if !(pr[1] > 1.0/3 && pr[2] < 1.0/3) {
		t.Errorf("probs after update %v: want token 1 up, token 2 down", pr)
	}
	if row := pol.row(0, 1); slices.ContainsFunc(row, func(z float64) bool { return z != 0 }) {
		t.Errorf("a masked token moved the logits: %v", row)
	}

	// Many epochs on one positive sample: the clip stops the ratio from
	// running far past 1+eps.
	pol = newPolicy(tk)
	clipped := pol.update(batch[:1], 1, 0.2, 20)
	if clipped != 1 {
		t.Errorf("clipped fraction %v after 20 epochs, want 1", clipped)
	}
	if p := pol.probs(0, 0, make([]float64, 3))[1]; p > 1.0/3*1.2*1.5 {
		t.Errorf("p(1) = %v: clip did not hold the update", p)
	}

	// Clip 0 is no clipping (-clip 0), not a clip of every token whose
	// ratio the float32 old log-prob rounds off 1.
	pol = newPolicy(tk)
	if clipped := pol.update(batch, 1, 0, 20); clipped != 0 {
		t.Errorf("clip 0 clipped %v of the tokens, want none", clipped)
	}
	if p := pol.probs(0, 0, make([]float64, 3))[1]; p <= 1.0/3*1.2*1.5 {
		t.Errorf("p(1) = %v after 20 unclipped epochs: want it past where the clip holds it", p)
	}
}

// The example runs on Redis through -url, as the README shows, learns there
// as on the embedded engine, and leaves no key of its prefix behind but the
// global index counter (indexes stay unique for the life of the prefix).
func TestRunOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	cfg := smallConfig()
	cfg.URL = srv.URL() + "?prefix=grpo"
	res, err := Run(t.Context(), cfg, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if first, last := res.First(3), res.Last(3); last < first+0.4 {
		t.Errorf("reward %.3f -> %.3f on Redis: did not rise by 0.4", first, last)
	}
	raw := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer raw.Close()
	left, err := raw.Keys(t.Context(), "*grpo*").Result()
	if err == nil {
		left, err = redistest.Persistent(t.Context(), raw, left)
	}
	left = slices.DeleteFunc(left, func(k string) bool { return strings.HasSuffix(k, "}:next") })
	if err != nil || len(left) != 0 {
		t.Errorf("keys left on the server: %q, %v", left, err)
	}
}
