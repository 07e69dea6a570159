package grpo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/memory"
	_ "github.com/tqgo/tqgo/backends/redis"
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

// recorder collects what each trainer rank trained, per step.
type recorder struct {
	mu    sync.Mutex
	steps [][][]string // rank -> step -> keys
}

func (r *recorder) hook(ranks int) func(rank int, keys []string) {
	r.steps = make([][][]string, ranks)
	return func(rank int, keys []string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.steps[rank] = append(r.steps[rank], slices.Clone(keys))
	}
}

// TestRunLearnsAndClears runs every stage concurrently with two trainer
// ranks and staleness 1: the reward rises, each step trains one whole
// round split between the ranks, nothing is stale, and the run leaves
// nothing behind.
func TestRunLearnsAndClears(t *testing.T) {
	ctx := context.Background()
	c, st, eng := newCountingClient(t)
	cfg := smallConfig()
	cfg.Engine = eng
	var rec recorder
	cfg.trained = rec.hook(cfg.Ranks)
	var out bytes.Buffer
	res, err := Run(ctx, cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rewards) != cfg.Steps || len(res.TQ) != cfg.Steps {
		t.Fatalf("%d rewards, %d tq times for %d steps", len(res.Rewards), len(res.TQ), cfg.Steps)
	}
	first, last := res.First(3), res.Last(3)
	t.Logf("reward %.3f -> %.3f, tq %v in %v", first, last, res.TQTotal, res.Wall)
	if chance := 1 / float64(cfg.Vocab); first > chance+0.1 {
		t.Errorf("first steps' reward %.3f, want near chance %.3f", first, chance)
	}
	if last < first+0.4 {
		t.Errorf("reward %.3f -> %.3f: did not rise by 0.4", first, last)
	}
	n := cfg.rows()
	for s := range cfg.Steps {
		if res.Rounds[s] != s+1 || res.Trained[s] != n {
			t.Errorf("step %d trained %d rows of round %d, want %d of round %d", s+1, res.Trained[s], res.Rounds[s], n, s+1)
		}
	}
	if res.Dropped != 0 || res.Redelivered != 0 || res.RolledOut < cfg.Steps {
		t.Errorf("dropped %d, redelivered %d, %d rounds rolled out", res.Dropped, res.Redelivered, res.RolledOut)
	}
	if !strings.Contains(out.String(), "done: trainer: 20 steps trained (1-20)") || strings.Contains(out.String(), "msg=step") {
		t.Errorf("quiet output:\n%s", out.String())
	}

	// The ranks split every step: disjoint shares of whole groups, both
	// non-empty and equal (every response has the same length), covering
	// the round.
	for s := range cfg.Steps {
		a, b := rec.steps[0][s], rec.steps[1][s]
		all := append(slices.Clone(a), b...)
		slices.Sort(all)
		if len(a) != n/2 || len(b) != n/2 || len(slices.Compact(all)) != n {
			t.Fatalf("step %d: shares of %d and %d rows, %d distinct, want %d each of %d", s+1, len(a), len(b), len(all), n/2, n)
		}
		for _, k := range all {
			if !strings.HasPrefix(k, roundPrefix(s+1)) {
				t.Fatalf("step %d trained %q", s+1, k)
			}
		}
		groupsOf := func(keys []string) map[string]int {
			g := map[string]int{}
			for _, k := range keys {
				g[k[:strings.LastIndex(k, "-")]]++
			}
			return g
		}
		ga, gb := groupsOf(a), groupsOf(b)
		for g, m := range ga {
			if m != cfg.Group || gb[g] != 0 {
				t.Fatalf("step %d: group %s split: %d rows on rank 0, %d on rank 1", s+1, g, m, gb[g])
			}
		}
	}

	// Every cell went through the backend: at least 5 fields from the
	// rollout and one each from reward and advantage for every trained
	// row, and the trainer's 6 read back.
	trained := int64(cfg.Steps * n)
	if got := st.staged.Load(); got < 7*trained {
		t.Errorf("%d cells written, want at least %d", got, 7*trained)
	}
	if got := st.read.Load(); got < 10*trained {
		t.Errorf("%d cells read, want at least %d", got, 10*trained)
	}
	// The run cleared what it made: no rows, no bytes.
	parts, err := c.Partitions(ctx)
	if err != nil || len(parts) != 0 {
		t.Errorf("partitions left: %v, %v", parts, err)
	}
	if st.Len() != 0 {
		t.Errorf("%d cells left in the backend", st.Len())
	}
}

func roundPrefix(round int) string { return fmt.Sprintf("r%04d-", round) }

// TestDefaultLearns: `go run ./examples/grpo` climbs from chance past 0.9.
func TestDefaultLearns(t *testing.T) {
	if testing.Short() {
		t.Skip("the full default run")
	}
	cfg := DefaultConfig()
	cfg.Quiet = true
	res, err := Run(context.Background(), cfg, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if first, last := res.First(3), res.Last(3); first > 0.2 || last < 0.9 {
		t.Errorf("reward %.3f -> %.3f, want from about 0.14 to above 0.9", first, last)
	}
}

// The rollout uses exactly policy version r-1-Lag and each step trains a
// whole round, so however the workers are scheduled a seed gives one run.
func TestRunIsReproducible(t *testing.T) {
	ctx := context.Background()
	cfg := smallConfig()
	cfg.Steps = 6
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

// A rollout running two versions ahead of a trainer with staleness 1:
// round 3 (version 0, ready when the trainer is at version 2) is stale and
// dropped whole, the trainer trains round 4 instead, and the run still
// trains cfg.Steps whole rounds.
func TestStaleRoundDropped(t *testing.T) {
	cfg := smallConfig()
	cfg.Steps, cfg.Lag = 6, 2
	var out bytes.Buffer
	res, err := Run(context.Background(), cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{1, 2, 4, 5, 6, 7}; !slices.Equal(res.Rounds, want) {
		t.Errorf("rounds trained %v, want %v", res.Rounds, want)
	}
	if res.Dropped != int64(cfg.rows()) {
		t.Errorf("%d rows dropped, want the %d of round 3", res.Dropped, cfg.rows())
	}
	for s, n := range res.Trained {
		if n != cfg.rows() {
			t.Errorf("step %d trained %d rows", s+1, n)
		}
	}
	if !strings.Contains(out.String(), fmt.Sprintf("%d stale rows dropped", cfg.rows())) {
		t.Errorf("summary lacks the drops:\n%s", out.String())
	}
}

// TestDeadRewardWorker: one of two reward workers claims rows and dies
// holding them (no ack, no nack). When its short lease ends the rows are
// delivered to the other worker, and every row of every round is still
// trained, the dead worker's included.
func TestDeadRewardWorker(t *testing.T) {
	cfg := smallConfig()
	cfg.Steps, cfg.RewardWorkers, cfg.Lease = 6, 2, time.Second
	var (
		mu        sync.Mutex
		abandoned []string
		killed    atomic.Bool
	)
	cfg.abandon = func(worker int, l *tq.Lease) bool {
		if !killed.CompareAndSwap(false, true) {
			return false
		}
		mu.Lock()
		abandoned = l.Keys()
		mu.Unlock()
		return true
	}
	var rec recorder
	cfg.trained = rec.hook(cfg.Ranks)
	res, err := Run(context.Background(), cfg, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if len(abandoned) == 0 {
		t.Fatal("no reward worker died holding rows")
	}
	trained := map[string]int{}
	for _, steps := range rec.steps {
		for _, keys := range steps {
			for _, k := range keys {
				trained[k]++
			}
		}
	}
	for s := range cfg.Steps {
		if res.Rounds[s] != s+1 || res.Trained[s] != cfg.rows() {
			t.Errorf("step %d trained %d rows of round %d", s+1, res.Trained[s], res.Rounds[s])
		}
		for p := range cfg.Prompts {
			for g := range cfg.Group {
				k := fmt.Sprintf("r%04d-p%03d-g%02d", s+1, p, g)
				if trained[k] != 1 {
					t.Fatalf("row %s trained %d times", k, trained[k])
				}
			}
		}
	}
	for _, k := range abandoned {
		if trained[k] != 1 {
			t.Errorf("abandoned row %s trained %d times", k, trained[k])
		}
	}
	if res.Redelivered < int64(len(abandoned)) {
		t.Errorf("%d rows redelivered, want at least the %d abandoned", res.Redelivered, len(abandoned))
	}
}

// TestScoreReadsTheQueue: the reward worker scores what the queue holds,
// not what the rollout had in memory: right answers written over the
// rollout's responses score 1.
func TestScoreReadsTheQueue(t *testing.T) {
	ctx := context.Background()
	c, _, _ := newCountingClient(t)
	tk := task{length: 3, vocab: 5}
	prompts := [][]int64{{0, 1, 4}, {2, 3, 3}}
	keys := []string{"a", "b"}
	wrong := []int64{0, 0, 0, 0, 0, 0}
	if err := c.BatchPut(ctx, "p", keys, tq.Batch{fInputIDs: tq.Stacked(slices.Concat(prompts...), 2, 3), fResponses: tq.Stacked(wrong, 2, 3)}, nil); err != nil {
		t.Fatal(err)
	}
	right := []int64{1, 2, 0, 3, 4, 4}
	if err := c.BatchPut(ctx, "p", keys, tq.Batch{fResponses: tq.Stacked(right, 2, 3)}, nil); err != nil {
		t.Fatal(err)
	}
	task, err := c.Task("p", taskReward, []string{fInputIDs, fResponses})
	if err != nil {
		t.Fatal(err)
	}
	l, err := task.Claim(ctx, 10, tq.WithData(fInputIDs, fResponses))
	if err != nil || l.Len() != 2 {
		t.Fatalf("claim: %v, %v", l, err)
	}
	rewards, err := score(tk, l.Keys(), l.Data)
	if err != nil || !slices.Equal(rewards, []float32{1, 1}) {
		t.Errorf("rewards of right answers: %v, %v; want 1, 1", rewards, err)
	}
}

// TestAdvantages: (r - mean) / (std + eps) per group, masked; a group of
// the wrong size is an error.
func TestAdvantages(t *testing.T) {
	b := tq.Batch{
		fRewards:  tq.Stacked([]float32{1, 0, 1, 1}),
		fUID:      tq.ValuesOf([]string{"a", "a", "b", "b"}),
		fAttnMask: tq.Stacked([]int64{1, 1, 1, 0, 1, 1, 1, 1}, 4, 2),
	}
	adv, err := advantages([]string{"a0", "a1", "b0", "b1"}, b, 2)
	if err != nil {
		t.Fatal(err)
	}
	// Group a: mean 0.5, unbiased std sqrt(0.5); the mask zeroes a1's
	// second token. Group b: equal rewards, advantages 0.
	want := float32(0.5 / (0.70710678 + advEps))
	if !near(adv[0][0], want) || !near(adv[0][1], want) || !near(adv[1][0], -want) || adv[1][1] != 0 {
		t.Errorf("group a: %v, want [[%v %v] [%v 0]]", adv[:2], want, want, -want)
	}
	if slices.ContainsFunc(slices.Concat(adv[2:]...), func(a float32) bool { return a != 0 }) {
		t.Errorf("group b: %v, want zeros", adv[2:])
	}
	if _, err := advantages([]string{"a0", "a1", "b0", "b1"}, b, 4); err == nil {
		t.Error("groups of 2 taken for groups of 4")
	}
}

func near(a, b float32) bool { return a-b < 1e-5 && b-a < 1e-5 }

// TestRanksGradientAddsUp: the ranks' gradient sums over their shares add
// up to the whole batch's, so the all-reduced update is the update of the
// batch in one process.
func TestRanksGradientAddsUp(t *testing.T) {
	tk := task{length: 2, vocab: 3}
	pol := newPolicy(tk)
	pol.logits[1], pol.logits[5] = 0.3, -0.2
	logp := float32(math.Log(1.0 / 3))
	batch := []trainRow{
		{prompt: []int64{0, 1}, response: []int64{1, 2}, oldLogp: []float32{logp, logp}, adv: []float32{1, 1}, mask: []int64{1, 1}},
		{prompt: []int64{0, 2}, response: []int64{2, 0}, oldLogp: []float32{logp, logp}, adv: []float32{-1, -1}, mask: []int64{1, 1}},
		{prompt: []int64{1, 1}, response: []int64{0, 0}, oldLogp: []float32{logp, logp}, adv: []float32{0.5, 0.5}, mask: []int64{1, 0}},
	}
	whole := make([]float64, len(pol.logits))
	pol.gradient(batch, 0.2, whole)
	a, b := make([]float64, len(pol.logits)), make([]float64, len(pol.logits))
	pol.gradient(batch[:1], 0.2, a)
	pol.gradient(batch[1:], 0.2, b)
	for i := range whole {
		if math.Abs(a[i]+b[i]-whole[i]) > 1e-12 {
			t.Fatalf("logit %d: shares %v + %v, whole batch %v", i, a[i], b[i], whole[i])
		}
	}
	if !slices.ContainsFunc(whole, func(g float64) bool { return g != 0 }) {
		t.Fatal("a zero gradient proves nothing")
	}
}

func TestRunRejects(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Group = 1 }, "group 1"},
		{func(c *Config) { c.Role = "critic" }, `role "critic"`},
		{func(c *Config) { c.Rank = 2 }, "rank 2"},
		{func(c *Config) { c.Lease = 0 }, "lease"},
	} {
		cfg := smallConfig()
		tc.edit(&cfg)
		if _, err := Run(ctx, cfg, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.want, err)
		}
	}

	// A queue still holding an earlier run's partition.
	c, _, eng := newCountingClient(t)
	err := c.BatchPut(ctx, SamplesPartition, []string{"k"}, tq.Batch{fUID: tq.ValuesOf([]string{"u"})}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := smallConfig()
	cfg.Engine = eng
	if _, err := Run(ctx, cfg, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "earlier run") {
		t.Errorf("stale partition: %v", err)
	}

	cfg = smallConfig()
	cfg.URL = "nosuch://x"
	if _, err := Run(ctx, cfg, &bytes.Buffer{}); err == nil {
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

// TestRunState: the run row tells a live run from a finished one. A
// process with the run's configuration joins a live run; one with
// another is refused, told which flags differ; any process is refused on
// a finished run's leftovers, told to clear them.
func TestRunState(t *testing.T) {
	ctx := t.Context()
	c, _, _ := newCountingClient(t)
	join := func(cfg Config) error {
		r := &runner{cfg: cfg, c: c, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		return r.join(ctx)
	}
	cfg := smallConfig()
	cfg.Role = RoleReward
	if err := join(cfg); err != nil {
		t.Fatalf("the first process: %v", err)
	}
	cfg.Role, cfg.Rank, cfg.Lease = RoleTrainer, 1, time.Second // neither is the run's
	if err := join(cfg); err != nil {
		t.Fatalf("a process of the run: %v", err)
	}
	other := cfg
	other.Steps, other.Seed = 21, 7
	if err := join(other); err == nil || !strings.Contains(err.Error(), "another configuration: -steps 20 (this process: 21), -seed 1 (this process: 7)") {
		t.Errorf("another configuration: %v", err)
	}

	// A finished run, kept: its leftovers refuse the next run.
	c2, _, eng2 := newCountingClient(t)
	cfg = smallConfig()
	cfg.Steps, cfg.Engine, cfg.Keep = 2, eng2, true
	if _, err := Run(ctx, cfg, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(ctx, cfg, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "which finished") || !strings.Contains(err.Error(), "tq clear -yes grpo/run") {
		t.Errorf("a finished run: %v", err)
	}
	if parts, err := c2.Partitions(ctx); err != nil || !slices.Contains(parts, CheckpointPartition) || !slices.Contains(parts, RunPartition) {
		t.Errorf("a kept run's partitions: %v, %v", parts, err)
	}
}

// TestCapacityHoldsRollout: with a slow reward stage, a rollout allowed to
// run 3 rounds ahead by its weights is held by the samples partition's
// capacity (one round): the partition never holds more, no round is
// dropped as stale, and every step trains a whole round.
func TestCapacityHoldsRollout(t *testing.T) {
	ctx := context.Background()
	c, _, eng := newCountingClient(t)
	cfg := smallConfig()
	cfg.Engine = eng
	cfg.Steps, cfg.Lag, cfg.Staleness, cfg.Capacity = 8, 3, 3, 1
	cfg.rewardDelay = 20 * time.Millisecond
	stop, polled := make(chan struct{}), make(chan struct{})
	var maxRows int64
	var polls int
	go func() {
		defer close(polled)
		for {
			st, err := c.Status(ctx, SamplesPartition)
			if err == nil {
				maxRows = max(maxRows, st.Used.Rows, int64(st.Rows))
				polls++
			}
			select {
			case <-time.After(2 * time.Millisecond):
			case <-stop:
				return
			}
		}
	}()
	res, err := Run(ctx, cfg, &bytes.Buffer{})
	close(stop)
	<-polled
	if err != nil {
		t.Fatal(err)
	}
	if maxRows == 0 || maxRows > int64(cfg.rows()) {
		t.Errorf("the samples partition held up to %d rows over %d polls, capacity %d", maxRows, polls, cfg.rows())
	}
	if res.Dropped != 0 {
		t.Errorf("%d rows dropped as stale", res.Dropped)
	}
	for s, n := range res.Trained {
		if n != cfg.rows() {
			t.Errorf("step %d trained %d rows, want %d", s+1, n, cfg.rows())
		}
	}
}
