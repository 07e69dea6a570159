package grpo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tqgo/tqgo/tq"
)

// What a rank's gradient row carries beside the gradient, summed over the
// ranks: its share's rows, their rewards, its counted and clipped tokens,
// and the round (the same on every rank that had rows; max over ranks).
// Tags of the trainer's rows (GradsPartition, CheckpointPartition).
const (
	tagStep  = "step"  // the position ("s0003-e01") of a gradient; the step of a checkpoint
	tagEpoch = "epoch" // the epoch of a checkpoint
	tagRank  = "rank"  // the rank that wrote the row
)

const (
	statRows = iota
	statReward
	statTokens
	statClipped
	statRound
	statsLen
)

// trainer is data-parallel rank rank of the trainer. Each step it claims
// its share of the step's round (Ranks splits the batch, groups whole,
// balanced by response length; Staleness drops rows of a policy more
// than cfg.Staleness versions old), reads only its share's rows, and
// runs Epochs of: its share's gradient sum, an all-reduce with the other
// ranks through GradsPartition, one update with the whole batch's
// gradient, and a checkpoint of the policy. Every rank applies the same
// updates to its copy of the policy. It then acks its share and clears
// it (the trainer is the rows' last consumer); rank 0 publishes the new
// policy version to WeightsPartition, the last one marked done, and
// marks the run finished. record makes this rank the one that fills the
// Result's per-step slices.
//
// A rank starts where the checkpoints say the ranks are (resume), so a
// rank restarted after it was killed rejoins the others at the epoch
// they wait for it in, with the policy they have.
func (r *runner) trainer(ctx context.Context, rank int, record bool) error {
	cfg := r.cfg
	log := r.log.With("role", RoleTrainer, "rank", rank)
	var want atomic.Int64 // the round to train
	t, err := r.c.Task(SamplesPartition, taskTrain, []string{fAdvantages}, append([]tq.TaskOption{
		tq.LeaseFor(cfg.Lease),
		tq.Ranks(cfg.Ranks, rank, tagLength),
		tq.Staleness(tagVersion, int64(cfg.Staleness), true),
		tq.WithSampler(roundGroups(cfg.Group, &want))}, cfg.stall(presenceGroup(RoleAdvantage, -1))...)...)
	if err != nil {
		return err
	}
	var wantPos atomic.Value // the position (string) to all-reduce
	var others []string      // the other ranks, whose gradients this one waits for
	for o := range cfg.Ranks {
		if o != rank {
			others = append(others, presenceGroup(RoleTrainer, o))
		}
	}
	ar, err := r.c.Task(GradsPartition, fmt.Sprintf("allreduce-%d", rank), []string{fGrad, fStats}, append([]tq.TaskOption{
		tq.LeaseFor(cfg.Lease), tq.WithSampler(positionGroup(cfg.Ranks, &wantPos))}, cfg.stall(others...)...)...)
	if err != nil {
		return err
	}
	defer func() { r.dropped.Add(t.Stats().Dropped) }()
	st, err := r.resume(ctx, rank, ar, log)
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	from := cfg.next(st.done)
	if record {
		r.mu.Lock()
		r.res.FirstStep = from.step
		r.mu.Unlock()
	}
	pol := st.pol
	grad := make([]float64, len(pol.logits))
	before := r.timer.Spent()
	for step := from.step; step <= cfg.Steps; step++ {
		t.SetVersion(int64(step - 1))
		round := cfg.roundOf(step)
		want.Store(int64(round))
		var l *tq.Lease
		reread := step == from.step && st.share != nil
		if reread {
			log.Info("read its share again", "step", step, "rows", len(st.share))
			l, err = r.readShare(ctx, st.share)
		} else {
			l, err = r.claimShare(ctx, t, round, log)
		}
		if err != nil {
			return fmt.Errorf("train: step %d: %w", step, err)
		}
		st.share = l.Keys()
		batch, rewardSum, err := trainRows(pol, l, round)
		if err != nil {
			return fmt.Errorf("train: step %d: %w", step, err)
		}
		first := 0
		if step == from.step {
			first = from.epoch
		}
		var total []float64
		for epoch := first; epoch < cfg.Epochs; epoch++ {
			pos := position{step, epoch}
			clear(grad)
			tokens, clipped := pol.gradient(batch, cfg.ClipEps, grad)
			stats := []float64{statRows: float64(len(batch)), statReward: rewardSum, statTokens: float64(tokens), statClipped: float64(clipped), statRound: float64(round)}
			var sum []float64
			wantPos.Store(pos.String())
			if sum, total, err = r.allReduce(ctx, ar, st, pos, rank, grad, stats); err != nil {
				return fmt.Errorf("train: step %d: %w", step, err)
			}
			pol.apply(sum, cfg.LR, int(total[statRows]))
			if rank == 0 && epoch == cfg.Epochs-1 {
				// Before the checkpoint: a rank 0 killed between the two
				// redoes the step, and publishes it again.
				if err := r.publish(ctx, step, pol); err != nil {
					return fmt.Errorf("train: step %d: %w", step, err)
				}
			}
			if err := r.complete(ctx, st, rank, pos); err != nil {
				return fmt.Errorf("train: step %d: %w", step, err)
			}
		}
		// The share is cleared only now, past the checkpoint: a rank
		// killed before it trains the step again, from its rows.
		if !reread {
			if err := r.ack(ctx, l); err != nil {
				return fmt.Errorf("train: step %d: %w", step, err)
			}
		}
		if err := r.clearKeys(ctx, SamplesPartition, l.Keys()); err != nil {
			return fmt.Errorf("train: step %d: clear: %w", step, err)
		}
		if cfg.trained != nil {
			cfg.trained(rank, l.Keys())
		}
		if record {
			now := r.timer.Spent()
			reward := total[statReward] / max(total[statRows], 1)
			clipFrac := total[statClipped] / max(total[statTokens], 1)
			r.mu.Lock()
			r.res.Rewards = append(r.res.Rewards, reward)
			r.res.Rounds = append(r.res.Rounds, int(total[statRound]))
			r.res.Trained = append(r.res.Trained, int(total[statRows]))
			r.res.ClipFrac = append(r.res.ClipFrac, clipFrac)
			r.res.TQ = append(r.res.TQ, now-before)
			r.mu.Unlock()
			log.Info("step", "step", step, "round", int(total[statRound]), "rows", int(total[statRows]),
				"reward", fmt.Sprintf("%.4f", reward), "clipped", fmt.Sprintf("%.3f", clipFrac), "tq", (now - before).Round(time.Microsecond))
			before = now
		}
	}
	if record {
		r.mu.Lock()
		r.res.Policy = slices.Clone(pol.logits)
		r.mu.Unlock()
	}
	if rank == 0 {
		if err := r.finish(ctx); err != nil {
			return fmt.Errorf("train: %w", err)
		}
	}
	return nil
}

// position is a point of the trainer's progress: epoch epoch of step
// step. The trainer starts having completed {0, Epochs-1}.
type position struct{ step, epoch int }

func (p position) before(q position) bool {
	return p.step < q.step || p.step == q.step && p.epoch < q.epoch
}

// String names the position in row keys and tags: "s0003-e01".
func (p position) String() string { return fmt.Sprintf("s%04d-e%02d", p.step, p.epoch) }

// next is the position after p.
func (c Config) next(p position) position {
	if p.epoch+1 < c.Epochs {
		return position{p.step, p.epoch + 1}
	}
	return position{p.step + 1, 0}
}

// roundOf is the rollout round step trains: the round after the step
// before's, but for the rounds the rollout generated with a policy too
// old for the step's version, whose rows Staleness drops as they become
// ready.
func (c Config) roundOf(step int) int {
	round := 0
	for s := 1; s <= step; s++ {
		round++
		for c.version(round) < int64(s-1-c.Staleness) {
			round++
		}
	}
	return round
}

// rankState is what a trainer rank keeps between its steps: the last
// position it completed, its policy then, and its rows in GradsPartition
// and CheckpointPartition, to clear once no rank needs them.
type rankState struct {
	done         position
	pol          *policy
	grads, ckpts []string
	// share is the keys of the rank's share of the step under way, which
	// the checkpoints of its epochs but the last keep: a rank restarted
	// within a step reads them again, as the other ranks may have
	// finished the step and cleared theirs (then no claim could offer it
	// the round's batch again).
	share []string
}

// resume returns where rank starts: at the start of the run, or, in a run
// the queue holds checkpoints of, after the furthest position any rank
// completed (see complete), with the policy then. It forgets what an
// earlier life of the rank consumed of GradsPartition, so that it reads
// the gradients of the position it resumes at again, and clears the
// samples of the rounds the checkpoints are past that the earlier life
// left (its share of the last round it trained, if killed before it
// cleared it). Rank 0 publishes the checkpoint's policy version again, in
// case it was killed between a checkpoint of another rank's and its own
// publish.
func (r *runner) resume(ctx context.Context, rank int, ar *tq.Task, log *slog.Logger) (*rankState, error) {
	cfg := r.cfg
	st := &rankState{done: position{0, cfg.Epochs - 1}, pol: newPolicy(r.task)}
	pos, logits, err := r.lastCheckpoint(ctx, true)
	if err != nil {
		return nil, err
	}
	if logits != nil {
		st.done = pos
		copy(st.pol.logits, logits)
	}
	for _, own := range []struct {
		partition string
		keys      *[]string
	}{{GradsPartition, &st.grads}, {CheckpointPartition, &st.ckpts}} {
		m, err := r.c.List(ctx, own.partition)
		if err != nil {
			return nil, err
		}
		for _, row := range m.Rows {
			if k, ok := tagInt(row.Tag[tagRank]); ok && int(k) == rank {
				*own.keys = append(*own.keys, row.Key)
			}
		}
	}
	next := cfg.next(st.done)
	if mine := fmt.Sprintf("%s-r%02d", st.done, rank); next.epoch > 0 && slices.Contains(st.ckpts, mine) {
		b, err := r.c.BatchGet(ctx, CheckpointPartition, []string{mine}, fShare)
		if err != nil {
			return nil, fmt.Errorf("checkpoint %s: %w", mine, err)
		}
		keys, err := tq.ValuesAs[string](b[fShare])
		if err != nil {
			return nil, fmt.Errorf("checkpoint %s: %w", mine, err)
		}
		st.share = strings.Split(keys[0], ",")
	}
	if err := r.reset(ctx, GradsPartition, ar.Name()); err != nil {
		return nil, err
	}
	if st.done.step == 0 {
		return st, nil
	}
	trained := cfg.roundOf(st.done.step - 1) // the rounds of the steps completed
	if st.done.epoch == cfg.Epochs-1 {
		trained = cfg.roundOf(st.done.step)
	}
	m, err := r.c.List(ctx, SamplesPartition)
	if err != nil {
		return nil, err
	}
	var spent []string
	for _, row := range m.Rows {
		if rd, ok := tagInt(row.Tag[tagRound]); ok && int(rd) <= trained {
			spent = append(spent, row.Key)
		}
	}
	if len(spent) > 0 {
		if err := r.clearKeys(ctx, SamplesPartition, spent); err != nil {
			return nil, fmt.Errorf("clear the samples of round %d and before: %w", trained, err)
		}
	}
	log.Info("resumed", "step", next.step, "epoch", next.epoch, "checkpoint", st.done.String(), "cleared", len(spent))
	if rank == 0 && st.done.epoch == cfg.Epochs-1 {
		if err := r.publish(ctx, st.done.step, st.pol); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// claimShare waits for this rank's share of round. A claim may return a
// share of a batch that a restarted rank opened for a round this rank
// has trained (the restarted rank's claim came after the batch of that
// round had lapsed, so it opened another, which the other ranks' next
// claims take shares of): such a share is empty (this rank cleared its
// rows) or of an earlier round, and is skipped.
func (r *runner) claimShare(ctx context.Context, t *tq.Task, round int, log *slog.Logger) (*tq.Lease, error) {
	for {
		l, err := r.wait(ctx, t, false, r.cfg.rows(), tq.AtLeast(r.cfg.rows()), tq.WithData(fInputIDs, fResponses, fOldLogProbs, fAdvantages, fAttnMask, fRewards))
		if errors.Is(err, tq.ErrNotFound) && ctx.Err() == nil {
			// The rows of such a share, cleared between the claim and
			// the read.
			log.Info("skipped a share whose rows were cleared", "round", round)
			continue
		}
		if err != nil {
			return nil, err
		}
		rd := -1
		for _, row := range l.Meta.Rows {
			if v, ok := tagInt(row.Tag[tagRound]); ok && (rd == -1 || int(v) == rd) {
				rd = int(v)
			} else {
				rd = -2 // rows of different rounds: trainRows says which
				break
			}
		}
		if rd == round || rd == -2 || rd > round {
			return l, nil
		}
		log.Info("skipped a share of a batch of a round trained", "round", round, "share_round", rd, "rows", l.Len())
		if l.Len() > 0 {
			if err := r.ack(ctx, l); err != nil {
				return nil, err
			}
			if err := r.clearKeys(ctx, SamplesPartition, l.Keys()); err != nil {
				return nil, err
			}
		}
	}
}

// trainRows checks the rows of a trainer's share, of round round, and
// returns them and their rewards' sum.
func trainRows(pol *policy, l *tq.Lease, round int) (batch []trainRow, rewardSum float64, err error) {
	if l.Len() == 0 {
		return nil, 0, nil
	}
	b := l.Data
	ids, err1 := tq.RowsAs[int64](b[fInputIDs])
	resp, err2 := tq.RowsAs[int64](b[fResponses])
	logp, err3 := tq.RowsAs[float32](b[fOldLogProbs])
	adv, err4 := tq.RowsAs[float32](b[fAdvantages])
	mask, err5 := tq.RowsAs[int64](b[fAttnMask])
	rewards, err6 := tq.As[float32](b[fRewards])
	for _, err := range []error{err1, err2, err3, err4, err5, err6} {
		if err != nil {
			return nil, 0, err
		}
	}
	batch = make([]trainRow, len(ids))
	for i, row := range l.Meta.Rows {
		if rd, ok := tagInt(row.Tag[tagRound]); !ok || int(rd) != round {
			return nil, 0, fmt.Errorf("row %q: round %v in a batch of round %d", row.Key, row.Tag[tagRound], round)
		}
		n := len(ids[i])
		if len(resp[i]) != n || len(logp[i]) != n || len(adv[i]) != n || len(mask[i]) != n {
			return nil, 0, fmt.Errorf("row %q: fields of different lengths", row.Key)
		}
		if n != pol.length {
			return nil, 0, fmt.Errorf("row %q: length %d, policy has %d", row.Key, n, pol.length)
		}
		for j := range n {
			if !pol.valid(ids[i][j]) || !pol.valid(resp[i][j]) {
				return nil, 0, fmt.Errorf("row %q: token out of the vocabulary", row.Key)
			}
		}
		batch[i] = trainRow{prompt: ids[i], response: resp[i], oldLogp: logp[i], adv: adv[i], mask: mask[i]}
		rewardSum += float64(rewards[i])
	}
	return batch, rewardSum, nil
}

// allReduce sums grad and stats over the ranks through GradsPartition:
// each rank writes its row of position pos, tagged with it, and claims
// the rows of every rank at pos (ar's sampler, positionGroup, offers
// them once all are there), which it reads and acks. The sums are taken
// in rank order, so every rank computes the same ones.
func (r *runner) allReduce(ctx context.Context, ar *tq.Task, st *rankState, pos position, rank int, grad, stats []float64) (sum, total []float64, err error) {
	key := fmt.Sprintf("%s-r%02d", pos, rank)
	err = r.put(ctx, GradsPartition, []string{key}, tq.Batch{
		fGrad:  tq.Stacked(grad, 1, len(grad)),
		fStats: tq.Stacked(stats, 1, len(stats)),
	}, []tq.Tag{{tagStep: pos.String(), tagRank: int64(rank)}})
	if err != nil {
		return nil, nil, fmt.Errorf("all-reduce: %w", err)
	}
	if !slices.Contains(st.grads, key) {
		st.grads = append(st.grads, key)
	}
	l, err := r.wait(ctx, ar, false, r.cfg.Ranks, tq.AtLeast(r.cfg.Ranks), tq.WithData(fGrad, fStats))
	if err != nil {
		return nil, nil, fmt.Errorf("all-reduce: %w", err)
	}
	for _, row := range l.Meta.Rows {
		if row.Tag[tagStep] != pos.String() {
			return nil, nil, fmt.Errorf("all-reduce %s: got row %q of %v", pos, row.Key, row.Tag[tagStep])
		}
	}
	grads, err1 := tq.RowsAs[float64](l.Data[fGrad])
	sts, err2 := tq.RowsAs[float64](l.Data[fStats])
	if err1 != nil || err2 != nil {
		return nil, nil, fmt.Errorf("all-reduce %s: %w", pos, errors.Join(err1, err2))
	}
	sum = make([]float64, len(grad))
	total = make([]float64, statsLen)
	for _, p := range sortedByRank(l) {
		if len(grads[p]) != len(grad) || len(sts[p]) != statsLen {
			return nil, nil, fmt.Errorf("all-reduce %s: row %q: %d gradients, %d stats", pos, l.Meta.Rows[p].Key, len(grads[p]), len(sts[p]))
		}
		for i, g := range grads[p] {
			sum[i] += g
		}
		for i, s := range sts[p] {
			if i == statRound {
				total[i] = max(total[i], s)
			} else {
				total[i] += s
			}
		}
	}
	if err := r.ack(ctx, l); err != nil {
		return nil, nil, fmt.Errorf("all-reduce: %w", err)
	}
	return sum, total, nil
}

// positionGroup is the all-reduce's sampler: the rows of the position
// *want names, once every rank's is ready (older positions' rows, read
// again after a restart's reset, are passed over).
func positionGroup(ranks int, want *atomic.Value) tq.Sampler {
	return tq.SamplerFunc(func(ready []tq.Candidate, n int) ([][]int, []int) {
		pos, _ := want.Load().(string)
		var unit []int
		for i, c := range ready {
			if v, ok := c.Tag(tagStep); ok && v == pos {
				unit = append(unit, i)
			}
		}
		if len(unit) != ranks {
			return nil, nil
		}
		return [][]int{unit}, nil
	})
}

// complete checkpoints rank's policy after pos, as a row of
// CheckpointPartition keyed and tagged by pos, and clears the rank's
// rows no rank needs any more: its checkpoints before, and its gradients
// of the positions before pos. Every live rank has read those (it wrote
// its row of pos, so it completed the position before), and a restarted
// rank resumes from the furthest checkpoint, never before a position it
// wrote a row of, so neither needs a row of a position the others
// completed past. Rows are written once and never replaced, so a rank
// reading a checkpoint reads the policy of the position its key names.
func (r *runner) complete(ctx context.Context, st *rankState, rank int, pos position) error {
	key := fmt.Sprintf("%s-r%02d", pos, rank)
	b := tq.Batch{fLogits: tq.Stacked(slices.Clone(st.pol.logits), 1, len(st.pol.logits))}
	if pos.epoch < r.cfg.Epochs-1 {
		b[fShare] = tq.ValuesOf([]string{strings.Join(st.share, ",")})
	}
	err := r.put(ctx, CheckpointPartition, []string{key}, b,
		[]tq.Tag{{tagStep: int64(pos.step), tagEpoch: int64(pos.epoch), tagRank: int64(rank)}})
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", pos, err)
	}
	st.done = pos
	ckpts := slices.DeleteFunc(st.ckpts, func(k string) bool { return k == key })
	grads := slices.DeleteFunc(st.grads, func(k string) bool { return k == key })
	st.ckpts, st.grads = []string{key}, []string{key}
	if len(ckpts) > 0 {
		if err := r.clearKeys(ctx, CheckpointPartition, ckpts); err != nil {
			return fmt.Errorf("clear checkpoints: %w", err)
		}
	}
	if len(grads) > 0 {
		if err := r.clearKeys(ctx, GradsPartition, grads); err != nil {
			return fmt.Errorf("all-reduce: clear: %w", err)
		}
	}
	return nil
}

// readShare reads the rows of keys, a share this rank claimed in an
// earlier life, as a Lease without Deliveries (nothing to settle: the
// earlier life's lease lapses).
func (r *runner) readShare(ctx context.Context, keys []string) (*tq.Lease, error) {
	m, err := r.c.Lookup(ctx, SamplesPartition, keys)
	if err != nil {
		return nil, fmt.Errorf("read the share again: %w", err)
	}
	b, err := r.c.BatchGetByMeta(ctx, m, fInputIDs, fResponses, fOldLogProbs, fAdvantages, fAttnMask, fRewards)
	if err != nil {
		return nil, fmt.Errorf("read the share again: %w", err)
	}
	return &tq.Lease{Meta: m, Data: b}, nil
}

// lastCheckpoint returns the furthest position any rank checkpointed,
// {0, Epochs-1} if none did, and with policy the logits then (nil if
// none). A checkpoint cleared between the listing and the read (its rank
// went past it) makes it look again.
func (r *runner) lastCheckpoint(ctx context.Context, policy bool) (position, []float64, error) {
	for {
		m, err := r.c.List(ctx, CheckpointPartition)
		if err != nil {
			return position{}, nil, err
		}
		best, key := position{0, r.cfg.Epochs - 1}, ""
		for _, row := range m.Rows {
			s, ok1 := tagInt(row.Tag[tagStep])
			e, ok2 := tagInt(row.Tag[tagEpoch])
			if p := (position{int(s), int(e)}); ok1 && ok2 && best.before(p) {
				best, key = p, row.Key
			}
		}
		if key == "" || !policy {
			return best, nil, nil
		}
		b, err := r.c.BatchGet(ctx, CheckpointPartition, []string{key}, fLogits)
		if errors.Is(err, tq.ErrNotFound) {
			continue
		}
		if err != nil {
			return position{}, nil, err
		}
		logits, err := tq.As[float64](b[fLogits])
		if err != nil || len(logits) != r.cfg.Length*r.cfg.Vocab*r.cfg.Vocab {
			return position{}, nil, fmt.Errorf("checkpoint %s: %d logits: %v", key, len(logits), err)
		}
		return best, logits, nil
	}
}

// publish writes policy version step to WeightsPartition, marked done when
// it is the last: what weight sync does between a trainer and its
// rollout.
func (r *runner) publish(ctx context.Context, step int, pol *policy) error {
	b := tq.Batch{fLogits: tq.Stacked(append([]float64(nil), pol.logits...), 1, len(pol.logits))}
	if step == r.cfg.Steps {
		b[fDone] = tq.Stacked([]int64{1})
	}
	err := r.put(ctx, WeightsPartition, []string{fmt.Sprintf("v%06d", step)}, b, []tq.Tag{{tagVersion: int64(step)}})
	if err != nil {
		return fmt.Errorf("publish version %d: %w", step, err)
	}
	return nil
}

// tagInt reads a whole-number tag value as an engine returns it.
func tagInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case uint64:
		return int64(x), true
	case float64:
		return int64(x), x == float64(int64(x))
	}
	return 0, false
}
