package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/tqgo/tqgo/tq"
)

// Fields, named as verl names them.
const (
	fInputIDs     = "input_ids"      // int64 [L]: the prompt
	fResponses    = "responses"      // int64 [L]: the sampled response
	fOldLogProbs  = "old_log_probs"  // float32 [L]: log pi_old of each response token
	fAttnMask     = "attention_mask" // int64 [L]: 1 for response tokens that count
	fUID          = "uid"            // string: the group (prompt) a response belongs to
	fRewards      = "rewards"        // float32 scalar
	fAdvantages   = "advantages"     // float32 [L]: the group-normalised reward, masked
	statusRollout = "rollout"
	statusReward  = "rewarded"
	statusAdv     = "advantaged"
)

// advEps keeps a group whose rewards are all equal from dividing by zero
// (its advantages are then 0: nothing to learn from it).
const advEps = 1e-6

// rollout samples group responses to each prompt and writes them, one row
// per response, tagged {"step": step, "status": "rollout"}. It is the
// generation worker.
func rollout(ctx context.Context, q *queue, partition string, step int, prompts [][]int64, group int, pol *policy, rng *rand.Rand) error {
	n, l := len(prompts)*group, pol.length
	var (
		keys = make([]string, 0, n)
		uids = make([]string, 0, n)
		tags = make([]tq.Tag, 0, n)
		ids  = make([]int64, 0, n*l)
		resp = make([]int64, n*l)
		logp = make([]float32, n*l)
		mask = make([]int64, n*l)
	)
	for i, p := range prompts {
		uid := fmt.Sprintf("s%04d-p%03d", step, i)
		for g := range group {
			r := len(keys)
			pol.sample(rng, p, resp[r*l:(r+1)*l], logp[r*l:(r+1)*l])
			keys = append(keys, fmt.Sprintf("%s-r%02d", uid, g))
			uids = append(uids, uid)
			tags = append(tags, tq.Tag{"step": int64(step), "status": statusRollout})
			ids = append(ids, p...)
		}
	}
	for i := range mask {
		mask[i] = 1 // fixed-length responses: every token counts
	}
	return q.BatchPut(ctx, partition, keys, tq.Batch{
		fInputIDs:    tq.Stacked(ids, n, l),
		fResponses:   tq.Stacked(resp, n, l),
		fOldLogProbs: tq.Stacked(logp, n, l),
		fAttnMask:    tq.Stacked(mask, n, l),
		fUID:         tq.ValuesOf(uids),
	}, tags)
}

// score is the reward worker: it reads the prompts and responses of m's
// rows, checks each response, and writes rewards with status "rewarded".
// It returns the mean reward.
func score(ctx context.Context, q *queue, t task, m *tq.BatchMeta) (mean float64, err error) {
	b, err := q.BatchGetByMeta(ctx, m, fInputIDs, fResponses)
	if err != nil {
		return 0, fmt.Errorf("reward: %w", err)
	}
	ids, err := tq.RowsAs[int64](b[fInputIDs])
	if err != nil {
		return 0, fmt.Errorf("reward: %s: %w", fInputIDs, err)
	}
	resp, err := tq.RowsAs[int64](b[fResponses])
	if err != nil {
		return 0, fmt.Errorf("reward: %s: %w", fResponses, err)
	}
	rewards := make([]float32, len(ids))
	for i := range ids {
		if len(resp[i]) != len(ids[i]) {
			return 0, fmt.Errorf("reward: row %q: %d response tokens for a prompt of %d", m.Rows[i].Key, len(resp[i]), len(ids[i]))
		}
		r := t.reward(ids[i], resp[i])
		rewards[i] = float32(r)
		mean += r
	}
	err = q.BatchPut(ctx, m.Partition, m.Keys(), tq.Batch{fRewards: tq.Stacked(rewards)}, statusTags(len(rewards), statusReward))
	if err != nil {
		return 0, fmt.Errorf("reward: %w", err)
	}
	return mean / float64(max(len(rewards), 1)), nil
}

// advantages is the advantage worker: it reads the rewards, group ids and
// masks of m's rows and, for every complete group (group rows with one
// uid), writes each row's advantage (r - mean) / (std + eps) broadcast over
// its response tokens, with status "advantaged". Rows of incomplete groups
// are left for a later call. It returns how many rows it wrote.
func advantages(ctx context.Context, q *queue, m *tq.BatchMeta, group int) (int, error) {
	b, err := q.BatchGetByMeta(ctx, m, fRewards, fUID, fAttnMask)
	if err != nil {
		return 0, fmt.Errorf("advantage: %w", err)
	}
	rewards, err := tq.As[float32](b[fRewards])
	if err != nil {
		return 0, fmt.Errorf("advantage: %s: %w", fRewards, err)
	}
	masks, err := tq.RowsAs[int64](b[fAttnMask])
	if err != nil {
		return 0, fmt.Errorf("advantage: %s: %w", fAttnMask, err)
	}
	uids, err := tq.ValuesAs[string](b[fUID])
	if err != nil {
		return 0, fmt.Errorf("advantage: %s: %w", fUID, err)
	}
	groups := map[string][]int{} // uid -> row numbers in m
	var order []string
	for i, uid := range uids {
		if _, seen := groups[uid]; !seen {
			order = append(order, uid)
		}
		groups[uid] = append(groups[uid], i)
	}
	var keys []string
	var adv [][]float32
	for _, uid := range order {
		rows := groups[uid]
		if len(rows) < group {
			continue
		}
		var mean float64
		for _, i := range rows {
			mean += float64(rewards[i])
		}
		mean /= float64(len(rows))
		var ss float64
		for _, i := range rows {
			d := float64(rewards[i]) - mean
			ss += d * d
		}
		std := math.Sqrt(ss / float64(len(rows)-1)) // unbiased, as torch.std
		for _, i := range rows {
			a := (float64(rewards[i]) - mean) / (std + advEps)
			tok := make([]float32, len(masks[i]))
			for j, mk := range masks[i] {
				tok[j] = float32(a) * float32(mk)
			}
			keys = append(keys, m.Rows[i].Key)
			adv = append(adv, tok)
		}
	}
	if len(keys) == 0 {
		return 0, nil
	}
	err = q.BatchPut(ctx, m.Partition, keys, tq.Batch{fAdvantages: tq.JaggedOf(adv)}, statusTags(len(keys), statusAdv))
	if err != nil {
		return 0, fmt.Errorf("advantage: %w", err)
	}
	return len(keys), nil
}

// hyper are the trainer's hyperparameters.
type hyper struct {
	lr, clipEps float64
	epochs      int
}

// train is the trainer: it reads everything the update needs for m's
// rows, updates the policy, and clears the rows, which it alone consumes.
// It returns the fraction of tokens the PPO clip held back.
func train(ctx context.Context, q *queue, pol *policy, m *tq.BatchMeta, h hyper) (clipFrac float64, err error) {
	b, err := q.BatchGetByMeta(ctx, m, fInputIDs, fResponses, fOldLogProbs, fAdvantages, fAttnMask)
	if err != nil {
		return 0, fmt.Errorf("train: %w", err)
	}
	ids, err1 := tq.RowsAs[int64](b[fInputIDs])
	resp, err2 := tq.RowsAs[int64](b[fResponses])
	logp, err3 := tq.RowsAs[float32](b[fOldLogProbs])
	adv, err4 := tq.RowsAs[float32](b[fAdvantages])
	mask, err5 := tq.RowsAs[int64](b[fAttnMask])
	for _, err := range []error{err1, err2, err3, err4, err5} {
		if err != nil {
			return 0, fmt.Errorf("train: %w", err)
		}
	}
	batch := make([]trainRow, len(ids))
	for i := range batch {
		l := len(ids[i])
		if len(resp[i]) != l || len(logp[i]) != l || len(adv[i]) != l || len(mask[i]) != l {
			return 0, fmt.Errorf("train: row %q: fields of different lengths", m.Rows[i].Key)
		}
		if l != pol.length {
			return 0, fmt.Errorf("train: row %q: length %d, policy has %d", m.Rows[i].Key, l, pol.length)
		}
		for j := range l {
			if !pol.valid(ids[i][j]) || !pol.valid(resp[i][j]) {
				return 0, fmt.Errorf("train: row %q: token out of the vocabulary", m.Rows[i].Key)
			}
		}
		batch[i] = trainRow{prompt: ids[i], response: resp[i], oldLogp: logp[i], adv: adv[i], mask: mask[i]}
	}
	clipFrac = pol.update(batch, h.lr, h.clipEps, h.epochs)
	if err := q.Clear(ctx, m.Partition, m.Keys()); err != nil {
		return 0, fmt.Errorf("train: clear: %w", err)
	}
	return clipFrac, nil
}

// statusTags is n tags setting status; BatchPut merges them into the rows'
// tags, so "step" stays as the rollout set it.
func statusTags(n int, status string) []tq.Tag {
	tags := make([]tq.Tag, n)
	for i := range tags {
		tags[i] = tq.Tag{"status": status}
	}
	return tags
}
