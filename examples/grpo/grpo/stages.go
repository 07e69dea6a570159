package grpo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/tqgo/tqgo/tq"
)

// Fields, named as verl names them.
const (
	fInputIDs    = "input_ids"      // int64 [L]: the prompt
	fResponses   = "responses"      // int64 [L]: the sampled response
	fOldLogProbs = "old_log_probs"  // float32 [L]: log pi_old of each response token
	fAttnMask    = "attention_mask" // int64 [L]: 1 for response tokens that count
	fUID         = "uid"            // string: the group (prompt) a response belongs to
	fRewards     = "rewards"        // float32 scalar
	fAdvantages  = "advantages"     // float32 [L]: the group-normalised reward, masked

	fLogits = "logits" // float64 [L·V·V]: a policy version (WeightsPartition)
	fDone   = "done"   // int64 scalar: on the trainer's last version only
	fGrad   = "grad"   // float64 [L·V·V]: a rank's gradient sum (GradsPartition)
	fStats  = "stats"  // float64 [statsLen]: what the rank's share held
	fShare  = "share"  // string: the keys of a rank's share, comma-separated (CheckpointPartition)
)

// Tags of a sample row.
const (
	tagUID     = "uid"     // the group, for the advantage's GroupTag
	tagRound   = "round"   // the rollout round that generated it
	tagVersion = "version" // the policy version that generated it, for Staleness
	tagLength  = "length"  // its response tokens that count, for the rank split
)

// Task names, per partition.
const (
	taskReward    = "reward"
	taskAdvantage = "advantage"
	taskTrain     = "train"
	taskRollout   = "rollout" // of WeightsPartition
)

// advEps keeps a group whose rewards are all equal from dividing by zero
// (its advantages are then 0: nothing to learn from it).
const advEps = 1e-6

// rollout is the generation worker. For each round r it takes policy
// version r-1-Lag from WeightsPartition (waiting until the trainer has
// published it; version 0 is the uniform start), samples Group responses
// to each of Prompts fresh prompts and writes them, a row per response,
// to SamplesPartition. It stops when it sees the trainer's last version.
// It is WeightsPartition's only consumer of logits, and clears each
// version once no round it has still to write needs it (so a restarted
// rollout finds the version it resumes with), but the last, which the
// other roles' processes watch.
//
// A round's prompts and samples are drawn from generators seeded by the
// seed and the round alone, so a restarted rollout resumes at the round
// the queue says is next (nextRound) and writes what it would have.
func (r *runner) rollout(ctx context.Context) error {
	cfg := r.cfg
	log := r.log.With("role", RoleRollout)
	wt, err := r.c.Task(WeightsPartition, taskRollout, []string{fLogits}, append([]tq.TaskOption{tq.LeaseFor(cfg.Lease)},
		cfg.stall(presenceGroup(RoleTrainer, 0))...)...)
	if err != nil {
		return err
	}
	// The versions an earlier life of the rollout took (and did not
	// clear, as it still needed them) are delivered again.
	if err := r.reset(ctx, WeightsPartition, taskRollout); err != nil {
		return fmt.Errorf("rollout: %w", err)
	}
	next, err := r.nextRound(ctx)
	if err != nil {
		return fmt.Errorf("rollout: %w", err)
	}
	if next > 1 {
		log.Info("resumed", "round", next)
	}
	r.firstRound.Store(int64(next))
	// Backpressure and pacing: the samples partition holds a bounded
	// number of rounds (a put beyond blocks until the trainer consumes
	// one), and each round waits until the trainer has nothing older
	// than the staleness bound left to consume, so rows are held back
	// rather than generated to be dropped.
	if err := r.c.SetCapacity(ctx, SamplesPartition, cfg.capacity()); err != nil {
		return fmt.Errorf("rollout: %w", err)
	}
	vs := &versions{logits: map[int64][]float64{0: make([]float64, cfg.Length*cfg.Vocab*cfg.Vocab)}, keys: map[int64]string{}}
	pol := newPolicy(r.task)
	for round := next; ; round++ {
		need := cfg.version(round)
		// Take what the trainer published; wait only while need is not
		// among it (versions may come out of order: one leased to a
		// Wait of the rollout's earlier life comes when that lease ends).
		for first := true; first || vs.logits[need] == nil; first = false {
			var l *tq.Lease
			if vs.logits[need] == nil {
				l, err = r.wait(ctx, wt, false, 64, tq.AtLeast(1), tq.WithData(fLogits))
			} else {
				l, err = r.wait(ctx, wt, true, 64, tq.WithData(fLogits))
			}
			if err != nil {
				return fmt.Errorf("rollout: weights: %w", err)
			}
			done, err := r.takeVersions(ctx, l, vs)
			if err != nil {
				return err
			}
			if done {
				log.Info("the trainer published its last version", "rounds", r.rolledOut.Load())
				return r.dropVersions(ctx, vs, math.MaxInt64)
			}
		}
		if err := r.c.Pace(ctx, SamplesPartition, tagVersion, need, int64(cfg.Staleness), taskTrain); err != nil {
			return fmt.Errorf("rollout: round %d: pace: %w", round, err)
		}
		copy(pol.logits, vs.logits[need])
		data := rand.New(rand.NewPCG(cfg.Seed, 2*uint64(round)))  // the prompts: the dataset
		gen := rand.New(rand.NewPCG(cfg.Seed, 2*uint64(round)+1)) // the sampling
		prompts := make([][]int64, cfg.Prompts)
		for i := range prompts {
			prompts[i] = r.task.prompt(data)
		}
		if err := r.writeRound(ctx, round, need, prompts, pol, gen); err != nil {
			return fmt.Errorf("rollout: round %d: %w", round, err)
		}
		r.rolledOut.Add(1)
		log.Info("rolled out", "round", round, "version", need, "rows", cfg.rows())
		if err := r.dropVersions(ctx, vs, cfg.version(round+1)); err != nil {
			return err
		}
	}
}

// versions are the policy versions the rollout took and may still need:
// their logits, and the keys of their rows in WeightsPartition.
type versions struct {
	logits map[int64][]float64
	keys   map[int64]string
}

// nextRound is the round the rollout writes next: 1 in a new run; in a
// run it rejoins, the one after the last round the queue holds, in
// SamplesPartition or, trained and cleared since, in the trainer's
// checkpoints (a round is cleared only once a checkpoint is past it).
func (r *runner) nextRound(ctx context.Context) (int, error) {
	m, err := r.c.List(ctx, SamplesPartition)
	if err != nil {
		return 0, err
	}
	last := 0
	for _, row := range m.Rows {
		if rd, ok := tagInt(row.Tag[tagRound]); ok {
			last = max(last, int(rd))
		}
	}
	pos, _, err := r.lastCheckpoint(ctx, false)
	if err != nil {
		return 0, err
	}
	if pos.step > 0 {
		last = max(last, r.cfg.roundOf(pos.step))
	}
	return last + 1, nil
}

// takeVersions stores the policy versions l leased in vs and acks them;
// done reports the trainer's last version among them.
func (r *runner) takeVersions(ctx context.Context, l *tq.Lease, vs *versions) (done bool, err error) {
	if l.Len() == 0 {
		return false, nil
	}
	logits, err := tq.RowsAs[float64](l.Data[fLogits])
	if err != nil {
		return false, fmt.Errorf("rollout: %s: %w", fLogits, err)
	}
	for i, row := range l.Meta.Rows {
		v, ok := tagInt(row.Tag[tagVersion])
		if !ok || len(logits[i]) != r.cfg.Length*r.cfg.Vocab*r.cfg.Vocab {
			return false, fmt.Errorf("rollout: weights row %q: version %v, %d logits", row.Key, row.Tag[tagVersion], len(logits[i]))
		}
		if _, last := row.Fields[fDone]; last {
			done = true
			continue
		}
		vs.logits[v] = logits[i]
		vs.keys[v] = row.Key
	}
	if err := r.ack(ctx, l); err != nil {
		return false, fmt.Errorf("rollout: %w", err)
	}
	return done, nil
}

// dropVersions forgets the versions below below and clears their rows.
func (r *runner) dropVersions(ctx context.Context, vs *versions, below int64) error {
	var spent []string
	for v := range vs.logits {
		if v < below {
			if k, ok := vs.keys[v]; ok {
				spent = append(spent, k)
			}
			delete(vs.logits, v)
			delete(vs.keys, v)
		}
	}
	if len(spent) > 0 {
		if err := r.clearKeys(ctx, WeightsPartition, spent); err != nil {
			return fmt.Errorf("rollout: clear weights: %w", err)
		}
	}
	return nil
}

// writeRound samples Group responses to each prompt with pol (version
// version) and writes them: keys "r0001-p003-g05" (round, prompt,
// response), tags uid, round, version and length.
func (r *runner) writeRound(ctx context.Context, round int, version int64, prompts [][]int64, pol *policy, rng *rand.Rand) error {
	group := r.cfg.Group
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
		uid := fmt.Sprintf("r%04d-p%03d", round, i)
		for g := range group {
			k := len(keys)
			pol.sample(rng, p, resp[k*l:(k+1)*l], logp[k*l:(k+1)*l])
			keys = append(keys, fmt.Sprintf("%s-g%02d", uid, g))
			uids = append(uids, uid)
			tags = append(tags, tq.Tag{tagUID: uid, tagRound: int64(round), tagVersion: version, tagLength: int64(l)})
			ids = append(ids, p...)
		}
	}
	for i := range mask {
		mask[i] = 1 // fixed-length responses: every token counts
	}
	return r.put(ctx, SamplesPartition, keys, tq.Batch{
		fInputIDs:    tq.Stacked(ids, n, l),
		fResponses:   tq.Stacked(resp, n, l),
		fOldLogProbs: tq.Stacked(logp, n, l),
		fAttnMask:    tq.Stacked(mask, n, l),
		fUID:         tq.ValuesOf(uids),
	}, tags)
}

// reward is a reward worker: it claims rows ready in the rollout's
// fields, checks each response, writes rewards, and acks.
func (r *runner) reward(ctx context.Context, worker int) error {
	t, err := r.c.Task(SamplesPartition, taskReward, []string{fInputIDs, fResponses}, append([]tq.TaskOption{tq.LeaseFor(r.cfg.Lease)},
		r.cfg.stall(presenceGroup(RoleRollout, -1))...)...)
	if err != nil {
		return err
	}
	log := r.log.With("role", RoleReward, "worker", worker)
	for {
		l, err := r.wait(ctx, t, false, r.cfg.rows(), tq.AtLeast(1), tq.WithData(fInputIDs, fResponses))
		if err != nil {
			return fmt.Errorf("reward: %w", err)
		}
		r.redelivered.Add(int64(redelivered(l)))
		if r.cfg.abandon != nil && r.cfg.abandon(worker, l) {
			return nil // killed: the lease ends unsettled
		}
		if d := r.cfg.rewardDelay; d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		rewards, err := score(r.task, l.Keys(), l.Data)
		if err != nil {
			return fmt.Errorf("reward: %w", err)
		}
		if err := r.update(ctx, SamplesPartition, l.Keys(), tq.Batch{fRewards: tq.Stacked(rewards)}, nil); err != nil {
			return fmt.Errorf("reward: %w", err)
		}
		if err := r.ack(ctx, l); err != nil {
			return fmt.Errorf("reward: %w", err)
		}
		total := r.scored.Add(int64(l.Len()))
		log.Info("scored", "rows", l.Len(), "redelivered", redelivered(l), "total", total)
	}
}

// score checks each response of b against its prompt.
func score(t task, keys []string, b tq.Batch) ([]float32, error) {
	ids, err := tq.RowsAs[int64](b[fInputIDs])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", fInputIDs, err)
	}
	resp, err := tq.RowsAs[int64](b[fResponses])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", fResponses, err)
	}
	rewards := make([]float32, len(ids))
	for i := range ids {
		if len(resp[i]) != len(ids[i]) {
			return nil, fmt.Errorf("row %q: %d response tokens for a prompt of %d", keys[i], len(resp[i]), len(ids[i]))
		}
		rewards[i] = float32(t.reward(ids[i], resp[i]))
	}
	return rewards, nil
}

// advantage is the advantage worker: it claims complete GRPO groups (the
// Group rows of one uid) ready in rewards, writes each row's advantage,
// and acks.
func (r *runner) advantage(ctx context.Context) error {
	t, err := r.c.Task(SamplesPartition, taskAdvantage, []string{fRewards}, append([]tq.TaskOption{
		tq.LeaseFor(r.cfg.Lease), tq.WithGroups(tq.GroupTag(tagUID), r.cfg.Group)},
		r.cfg.stall(presenceGroup(RoleReward, -1))...)...)
	if err != nil {
		return err
	}
	log := r.log.With("role", RoleAdvantage)
	for {
		l, err := r.wait(ctx, t, false, r.cfg.rows(), tq.AtLeast(r.cfg.Group), tq.WithData(fRewards, fUID, fAttnMask))
		if err != nil {
			return fmt.Errorf("advantage: %w", err)
		}
		r.redelivered.Add(int64(redelivered(l)))
		adv, err := advantages(l.Keys(), l.Data, r.cfg.Group)
		if err != nil {
			return fmt.Errorf("advantage: %w", err)
		}
		if err := r.update(ctx, SamplesPartition, l.Keys(), tq.Batch{fAdvantages: tq.JaggedOf(adv)}, nil); err != nil {
			return fmt.Errorf("advantage: %w", err)
		}
		if err := r.ack(ctx, l); err != nil {
			return fmt.Errorf("advantage: %w", err)
		}
		total := r.advantaged.Add(int64(l.Len()))
		log.Info("advantages", "rows", l.Len(), "groups", l.Len()/r.cfg.Group, "redelivered", redelivered(l), "total", total)
	}
}

// advantages computes, for rows of whole groups (group rows of each uid),
// each row's advantage (r - group mean) / (group std + eps), broadcast
// over its response tokens and masked. A group of another size is an
// error: the claim leases whole groups.
func advantages(keys []string, b tq.Batch, group int) ([][]float32, error) {
	rewards, err := tq.As[float32](b[fRewards])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", fRewards, err)
	}
	masks, err := tq.RowsAs[int64](b[fAttnMask])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", fAttnMask, err)
	}
	uids, err := tq.ValuesAs[string](b[fUID])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", fUID, err)
	}
	groups := map[string][]int{} // uid -> row numbers
	for i, uid := range uids {
		groups[uid] = append(groups[uid], i)
	}
	adv := make([][]float32, len(keys))
	for uid, rows := range groups {
		if len(rows) != group {
			return nil, fmt.Errorf("group %q has %d rows, want %d", uid, len(rows), group)
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
			adv[i] = tok
		}
	}
	return adv, nil
}

// ack acknowledges every row of l. A row whose lease ended and went to
// another worker is not an error: delivery is at least once, and what
// this worker wrote for it is what the other writes again.
func (r *runner) ack(ctx context.Context, l *tq.Lease) error {
	err := r.again(ctx, "ack", func() error { return l.Ack(ctx) })
	var lost *tq.LeaseLostError
	if errors.As(err, &lost) {
		r.leaseLost.Add(int64(len(lost.Keys)))
		return nil
	}
	return err
}

// redelivered counts the rows of l delivered before.
func redelivered(l *tq.Lease) int {
	n := 0
	for _, d := range l.Deliveries {
		if d > 1 {
			n++
		}
	}
	return n
}

// watchDone, in a reward or advantage process, calls stop once the
// trainer published its last policy version: the run is over. The
// processes of a role share a task, "done-<role>", and each gives the
// row back (Nack) once it saw it, so that the next one sees it too, a
// restarted process included: the task is one per role, not one per
// process. (A watcher killed while waiting may be handed the row after
// its death: it comes back when the lease, Config.Lease, ends.)
func (r *runner) watchDone(ctx context.Context, role string, stop func()) error {
	t, err := r.c.Task(WeightsPartition, "done-"+role, []string{fDone}, tq.LeaseFor(r.cfg.Lease))
	if err != nil {
		return err
	}
	l, err := r.wait(ctx, t, false, 1)
	if err != nil {
		return fmt.Errorf("%s: waiting for the end: %w", role, err)
	}
	stop()
	r.log.Info("the trainer published its last version", "role", role)
	err = r.again(ctx, "nack", func() error { return l.Nack(ctx, 0) })
	if err != nil && !errors.Is(err, tq.ErrLeaseLost) {
		return fmt.Errorf("%s: %w", role, err)
	}
	return nil
}

// roundGroups is the trainer's sampler: the complete groups of round
// *want among the ready rows, so that a step trains one round whole, once
// every group of it is ready, and the rounds in order however late one of
// them is (a worker that died holding its rows).
func roundGroups(group int, want *atomic.Int64) tq.Sampler {
	return tq.SamplerFunc(func(ready []tq.Candidate, n int) ([][]int, []int) {
		round := float64(want.Load())
		byUID := map[string][]int{}
		var order []string
		for i, c := range ready {
			if v, ok := c.Number(tagRound); !ok || v != round {
				continue
			}
			uid, _ := c.Tag(tagUID)
			s, _ := uid.(string)
			if _, seen := byUID[s]; !seen {
				order = append(order, s)
			}
			byUID[s] = append(byUID[s], i)
		}
		var units [][]int
		for _, uid := range order {
			if len(byUID[uid]) == group {
				units = append(units, byUID[uid])
			}
		}
		return units, nil
	})
}

// sortedByRank returns the positions of l's rows by their "rank" tag.
func sortedByRank(l *tq.Lease) []int {
	pos := make([]int, l.Len())
	for i := range pos {
		pos[i] = i
	}
	slices.SortFunc(pos, func(a, b int) int {
		ra, _ := tagInt(l.Meta.Rows[a].Tag[tagRank])
		rb, _ := tagInt(l.Meta.Rows[b].Tag[tagRank])
		return cmp.Compare(ra, rb)
	})
	return pos
}
