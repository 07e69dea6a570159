package grpo

import (
	"math"
	"math/rand/v2"
)

// task is the toy problem with a verifiable reward. A prompt is Length
// random tokens over a vocabulary of Vocab; a response is Length tokens, and
// position j is correct when it equals (prompt[j] + 1) mod Vocab. The
// reward is the fraction of correct positions: a uniform policy scores
// 1/Vocab, a perfect one 1.
type task struct {
	length, vocab int
}

// prompt draws a fresh prompt.
func (t task) prompt(rng *rand.Rand) []int64 {
	p := make([]int64, t.length)
	for j := range p {
		p[j] = int64(rng.IntN(t.vocab))
	}
	return p
}

// valid says whether tok is in the vocabulary.
func (t task) valid(tok int64) bool { return tok >= 0 && tok < int64(t.vocab) }

// reward scores a response against its prompt. It is what a rule-based
// reward worker computes: no model, just a check.
func (t task) reward(prompt, response []int64) float64 {
	hit := 0
	for j, p := range prompt {
		if response[j] == (p+1)%int64(t.vocab) {
			hit++
		}
	}
	return float64(hit) / float64(len(prompt))
}

// policy is a tabular softmax policy: for each response position j and the
// prompt token p at that position, a row of Vocab logits over the response
// token. It starts uniform (all logits 0). Not safe for concurrent use.
type policy struct {
	task
	logits []float64 // [length][vocab (prompt token)][vocab (response token)]
}

func newPolicy(t task) *policy {
	return &policy{task: t, logits: make([]float64, t.length*t.vocab*t.vocab)}
}

// row returns the logits of position j given prompt token p (aliased).
func (pl *policy) row(j int, p int64) []float64 {
	off := (j*pl.vocab + int(p)) * pl.vocab
	return pl.logits[off : off+pl.vocab]
}

// probs writes softmax(row(j, p)) into dst and returns it.
func (pl *policy) probs(j int, p int64, dst []float64) []float64 {
	row := pl.row(j, p)
	hi := math.Inf(-1)
	for _, z := range row {
		hi = max(hi, z)
	}
	var sum float64
	for i, z := range row {
		dst[i] = math.Exp(z - hi)
		sum += dst[i]
	}
	for i := range dst {
		dst[i] /= sum
	}
	return dst
}

// sample draws a response to prompt into resp and the log-probability of
// each token under the current policy into logp.
func (pl *policy) sample(rng *rand.Rand, prompt, resp []int64, logp []float32) {
	pr := make([]float64, pl.vocab)
	for j, p := range prompt {
		pl.probs(j, p, pr)
		u := rng.Float64()
		a := pl.vocab - 1 // if rounding leaves u above the last cumulative sum
		for i, q := range pr {
			if u < q {
				a = i
				break
			}
			u -= q
		}
		resp[j] = int64(a)
		logp[j] = float32(math.Log(pr[a]))
	}
}

// trainRow is one response of a training batch, as the trainer read it back
// from the queue.
type trainRow struct {
	prompt, response []int64
	oldLogp          []float32
	adv              []float32 // per token, zero where the mask is 0
	mask             []int64
}

// gradient adds to grad (len(logits)) the gradient of the GRPO (PPO-clip)
// surrogate over batch, summed over tokens and responses, token by token:
//
//	ratio = exp(log pi(a) - old_log_prob)
//	obj   = min(ratio·A, clip(ratio, 1-eps, 1+eps)·A)
//
// The gradient of obj with respect to the logits of the row that produced a
// is A·ratio·(onehot(a) - pi) unless the clip is active, where it is 0
// (eps 0 turns the clip off: float32 rounding alone moves ratio off 1).
// It returns how many tokens counted and how many of them the clip held.
// A data-parallel rank calls it on its share of the batch; the ranks' sums
// add up to the gradient of the whole batch.
func (pl *policy) gradient(batch []trainRow, clipEps float64, grad []float64) (tokens, clipped int) {
	pr := make([]float64, pl.vocab)
	for _, s := range batch {
		for j, p := range s.prompt {
			if s.mask[j] == 0 {
				continue
			}
			tokens++
			a, adv := s.response[j], float64(s.adv[j])
			pl.probs(j, p, pr)
			ratio := math.Exp(math.Log(pr[a]) - float64(s.oldLogp[j]))
			if clipEps > 0 && (adv > 0 && ratio > 1+clipEps || adv < 0 && ratio < 1-clipEps) {
				clipped++
				continue
			}
			g := grad[(j*pl.vocab+int(p))*pl.vocab:][:pl.vocab]
			coef := adv * ratio
			for i, q := range pr {
				g[i] -= coef * q
			}
			g[a] += coef
		}
	}
	return tokens, clipped
}

// apply takes a gradient-ascent step of lr on grad, a gradient summed over
// responses responses: the step is averaged over them.
func (pl *policy) apply(grad []float64, lr float64, responses int) {
	step := lr / float64(max(responses, 1))
	for i, g := range grad {
		pl.logits[i] += step * g
	}
}

// update runs epochs of full-batch gradient ascent on the surrogate (see
// gradient) in one process. It returns the fraction of tokens clipped in
// the last epoch. In the first epoch the policy is the one that sampled,
// so ratio = 1 (up to the float32 rounding of old_log_probs) and this is
// plain REINFORCE with group baselines; later epochs are where
// old_log_probs and the clip matter. The trainer's ranks do the same, each
// epoch's gradient summed over their shares (see trainer).
func (pl *policy) update(batch []trainRow, lr, clipEps float64, epochs int) (clipFrac float64) {
	grad := make([]float64, len(pl.logits))
	for range epochs {
		clear(grad)
		tokens, clipped := pl.gradient(batch, clipEps, grad)
		pl.apply(grad, lr, len(batch))
		clipFrac = float64(clipped) / float64(max(tokens, 1))
	}
	return clipFrac
}
