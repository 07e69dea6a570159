// Command grpo is a small GRPO training loop whose workers hand each other
// every sample through tqgo, as verl's workers do through TransferQueue.
//
//	go run ./examples/grpo                       # embedded memory engine
//	go run ./examples/grpo -url redis://localhost:6379/0
//
// The task has a verifiable reward: a prompt is a few random tokens, and a
// response scores the fraction of positions where it answers token p with
// (p+1) mod vocab. The policy is tabular: a softmax over the vocabulary for
// each (position, prompt token), starting uniform, so the reward starts at
// chance (1/vocab) and, with the default flags, climbs past 0.9 in 30 steps.
//
// # How data moves
//
// Each step has its own partition, "grpo/step-0001" and so on, a row per
// response. Four workers take turns; each finds its work by listing the
// partition and keeping the rows whose tag has the status it consumes, reads
// the fields it needs, and writes its own fields and a new status:
//
//	rollout    writes input_ids, responses, old_log_probs, attention_mask, uid
//	           with tag {"step": s, "status": "rollout"}
//	reward     reads input_ids, responses; writes rewards        -> "rewarded"
//	advantage  reads rewards, uid, attention_mask; writes advantages,
//	           (r - group mean) / (group std + eps) per token,   -> "advantaged"
//	train      reads input_ids, responses, old_log_probs, advantages,
//	           attention_mask; updates the policy; clears the rows
//
// The trainer maximises the PPO-clip surrogate min(ratio·A, clip(ratio)·A)
// per token, ratio = pi/pi_old, over -epochs passes of each batch: the
// first pass is at ratio 1, the later ones are where old_log_probs, which
// travelled through the queue from the rollout, and the clip matter.
//
// The workers share nothing but the queue (the trainer's policy reaches the
// rollout in process, as weight sync would), so a stage run before the one
// that feeds it fails with tq.ErrNotReady naming the missing field. Each
// step prints its mean reward and the time spent inside tq calls; the run
// ends with a summary. Run is the loop; main only parses flags.
package main
