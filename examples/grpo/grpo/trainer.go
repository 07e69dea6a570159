package grpo

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/tqgo/tqgo/tq"
)

// What a rank's gradient row carries beside the gradient, summed over the
// ranks: its share's rows, their rewards, its counted and clipped tokens,
// and the round (the same on every rank that had rows; max over ranks).
const (
	statRows = iota
	statReward
	statTokens
	statClipped
	statRound
	statsLen
)

// trainer is data-parallel rank rank of the trainer. Each step it claims
// its share of the oldest ready round (Ranks splits the batch, groups
// whole, balanced by response length; Staleness drops rows of a policy
// more than cfg.Staleness versions old), reads only its share's rows, and
// runs Epochs of: its share's gradient sum, an all-reduce with the other
// ranks through GradsPartition, one update with the whole batch's
// gradient. Every rank applies the same updates to its copy of the
// policy. It then acks its share and clears it (the trainer is the rows'
// last consumer); rank 0 publishes the new policy version to
// WeightsPartition, the last one marked done. record makes this rank the
// one that fills the Result's per-step slices.
func (r *runner) trainer(ctx context.Context, rank int, record bool) error {
	cfg := r.cfg
	var want atomic.Int64 // the round to train
	t, err := r.c.Task(SamplesPartition, taskTrain, []string{fAdvantages},
		tq.Ranks(cfg.Ranks, rank, tagLength),
		tq.Staleness(tagVersion, int64(cfg.Staleness), true),
		tq.WithSampler(roundGroups(cfg.Group, &want)))
	if err != nil {
		return err
	}
	ar, err := r.c.Task(GradsPartition, fmt.Sprintf("allreduce-%d", rank), []string{fGrad, fStats},
		tq.WithGroups(tq.GroupTag("step"), cfg.Ranks))
	if err != nil {
		return err
	}
	defer func() { r.dropped.Add(t.Stats().Dropped) }()
	pol := newPolicy(r.task)
	grad := make([]float64, len(pol.logits))
	var mine string // this rank's last gradient row
	before := r.timer.Spent()
	round := 0 // the last round trained
	for step := 1; step <= cfg.Steps; step++ {
		v := int64(step - 1)
		t.SetVersion(v)
		// The next round, but for those the rollout generated with a
		// policy too old for this version: Staleness drops their rows as
		// they become ready.
		round++
		for cfg.version(round) < v-int64(cfg.Staleness) {
			round++
		}
		want.Store(int64(round))
		l, err := t.Wait(ctx, cfg.rows(), tq.AtLeast(cfg.rows()), tq.WithData(fInputIDs, fResponses, fOldLogProbs, fAdvantages, fAttnMask, fRewards))
		if err != nil {
			return fmt.Errorf("train: step %d: %w", step, err)
		}
		batch, rewardSum, err := trainRows(pol, l, round)
		if err != nil {
			return fmt.Errorf("train: step %d: %w", step, err)
		}
		var total []float64
		for epoch := range cfg.Epochs {
			clear(grad)
			tokens, clipped := pol.gradient(batch, cfg.ClipEps, grad)
			stats := []float64{statRows: float64(len(batch)), statReward: rewardSum, statTokens: float64(tokens), statClipped: float64(clipped), statRound: float64(round)}
			var sum []float64
			if sum, total, err = r.allReduce(ctx, ar, step, epoch, rank, grad, stats, &mine); err != nil {
				return fmt.Errorf("train: step %d: %w", step, err)
			}
			pol.apply(sum, cfg.LR, int(total[statRows]))
		}
		if err := r.ack(ctx, l); err != nil {
			return fmt.Errorf("train: step %d: %w", step, err)
		}
		if l.Len() > 0 {
			if err := r.c.Clear(ctx, SamplesPartition, l.Keys()); err != nil {
				return fmt.Errorf("train: step %d: clear: %w", step, err)
			}
		}
		if cfg.trained != nil {
			cfg.trained(rank, l.Keys())
		}
		if rank == 0 {
			if err := r.publish(ctx, step, pol); err != nil {
				return fmt.Errorf("train: step %d: %w", step, err)
			}
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
			if !cfg.Quiet {
				fmt.Fprintf(r.out, "step %3d  round %3d  reward %.3f  clipped %.3f  tq %v\n", step, int(total[statRound]), reward, clipFrac, (now - before).Round(time.Microsecond))
			}
			before = now
		}
	}
	return nil
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
// each rank writes its row of (step, epoch), tagged with both, and claims
// the complete group of them (ar groups by the step-and-epoch tag, one row
// per rank), which it reads and acks. The sums are taken in rank order,
// so every rank computes the same ones. A rank then clears its row of the
// round before: every other rank has read it, or it could not have
// written its row of this one.
func (r *runner) allReduce(ctx context.Context, ar *tq.Task, step, epoch, rank int, grad, stats []float64, mine *string) (sum, total []float64, err error) {
	round := fmt.Sprintf("s%04d-e%02d", step, epoch)
	key := fmt.Sprintf("%s-r%02d", round, rank)
	err = r.c.BatchPut(ctx, GradsPartition, []string{key}, tq.Batch{
		fGrad:  tq.Stacked(grad, 1, len(grad)),
		fStats: tq.Stacked(stats, 1, len(stats)),
	}, []tq.Tag{{"step": round, "rank": int64(rank)}})
	if err != nil {
		return nil, nil, fmt.Errorf("all-reduce: %w", err)
	}
	l, err := ar.Wait(ctx, r.cfg.Ranks, tq.AtLeast(r.cfg.Ranks), tq.WithData(fGrad, fStats))
	if err != nil {
		return nil, nil, fmt.Errorf("all-reduce: %w", err)
	}
	for _, row := range l.Meta.Rows {
		if row.Tag["step"] != round {
			return nil, nil, fmt.Errorf("all-reduce %s: got row %q of %v", round, row.Key, row.Tag["step"])
		}
	}
	grads, err1 := tq.RowsAs[float64](l.Data[fGrad])
	sts, err2 := tq.RowsAs[float64](l.Data[fStats])
	if err1 != nil || err2 != nil {
		return nil, nil, fmt.Errorf("all-reduce %s: %w", round, errors.Join(err1, err2))
	}
	sum = make([]float64, len(grad))
	total = make([]float64, statsLen)
	for _, p := range sortedByRank(l) {
		if len(grads[p]) != len(grad) || len(sts[p]) != statsLen {
			return nil, nil, fmt.Errorf("all-reduce %s: row %q: %d gradients, %d stats", round, l.Meta.Rows[p].Key, len(grads[p]), len(sts[p]))
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
	if *mine != "" {
		if err := r.c.Clear(ctx, GradsPartition, []string{*mine}); err != nil {
			return nil, nil, fmt.Errorf("all-reduce: clear: %w", err)
		}
	}
	*mine = key
	return sum, total, nil
}

// publish writes policy version step to WeightsPartition, marked done when
// it is the last: what weight sync does between a trainer and its
// rollout.
func (r *runner) publish(ctx context.Context, step int, pol *policy) error {
	b := tq.Batch{fLogits: tq.Stacked(append([]float64(nil), pol.logits...), 1, len(pol.logits))}
	if step == r.cfg.Steps {
		b[fDone] = tq.Stacked([]int64{1})
	}
	err := r.c.BatchPut(ctx, WeightsPartition, []string{fmt.Sprintf("v%06d", step)}, b, []tq.Tag{{tagVersion: int64(step)}})
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
