// Package grpo is a small GRPO training loop whose workers hand each other
// every sample through tqgo's queue, as verl's workers do through
// TransferQueue: concurrent stages, each consuming through a tq.Task of
// its own, a data-parallel trainer, and a rollout that runs a policy
// version ahead of the trainer. Command examples/grpo runs it.
//
// The task has a verifiable reward: a prompt is a few random tokens, and a
// response scores the fraction of positions where it answers token p with
// (p+1) mod vocab. The policy is tabular: a softmax over the vocabulary for
// each (position, prompt token), starting uniform, so the reward starts at
// chance (1/vocab) and, with the default configuration, climbs past 0.9 in
// 30 steps.
//
// # How data moves
//
// The workers share nothing but the queue, and none of them lists a
// partition to find its work: each claims with Task.Wait, which returns
// once rows are ready for it (every field it names committed, not yet
// acknowledged by it, not leased to another of its workers), processes
// them, writes its own fields and acknowledges (Lease.Ack):
//
//	rollout    round r: Prompts x Group rows, keys "r0001-p003-g05", with
//	           input_ids, responses, old_log_probs, attention_mask, uid
//	           and tags uid, round, version (of the policy that sampled),
//	           length (response tokens)
//	reward     task "reward", ready in {input_ids, responses}: writes rewards
//	advantage  task "advantage", ready in {rewards}, WithGroups(GroupTag
//	           ("uid"), Group): whole GRPO groups; writes advantages,
//	           (r - group mean) / (group std + eps) per token
//	trainer    task "train", ready in {advantages}, Ranks(Ranks, rank,
//	           "length"), Staleness("version", Staleness, drop): each rank
//	           claims its share of one whole round (its sampler offers the
//	           complete groups of the round it trains next, so rounds are
//	           trained in order however late one is), reads only its share,
//	           and acks and clears it once trained
//
// A worker that dies holding a lease loses nothing: when the lease ends
// (Config.Lease) its rows are ready again and another worker of the task
// claims them; delivery is at least once, and the stages' writes are
// idempotent.
//
// The trainer ranks each compute the gradient sum of the PPO-clip
// surrogate min(ratio·A, clip(ratio)·A), ratio = pi/pi_old, over their
// share, and all-reduce it through the queue: each rank writes its sum to
// partition "grpo/grads", tagged with the step and epoch, and claims the
// rows of every rank of that step and epoch once all are there (a
// sampler of its own). Every rank applies the same update, the sum over
// the whole batch divided by its rows, to its copy of the policy, for
// -epochs passes of each batch, and checkpoints the policy after each
// one to "grpo/checkpoint". Rank 0 then publishes the new policy version
// to "grpo/weights", which is how the rollout gets it (weight sync).
//
// # Overlap and staleness
//
// The rollout of round r uses policy version r-1-Lag (version v is the
// policy after v steps): with the default Lag 1, the rollout of round s+1
// uses the version the trainer had before step s, so it runs while step s
// trains. Each row carries its version; the trainer, at version s-1 for
// step s (Task.SetVersion), drops rows more than Staleness versions older
// (default 1). With Lag <= Staleness nothing is stale; a larger Lag makes
// the trainer drop the rounds it cannot use (the summary counts them) and
// train the next (it skips the rounds whose version, r-1-Lag, is too old:
// processes of one run must agree on Lag and Staleness). Because the
// rollout uses exactly version r-1-Lag, draws each round's prompts and
// samples from generators seeded by the seed and the round, and each step
// trains one whole round, a run is reproducible from its seed however the
// workers are scheduled, and however often they are killed and restarted.
//
// # Backpressure and pacing
//
// The samples partition has a tq.Capacity of Capacity rounds (default
// Lag+3), its rows cleared as the trainer acknowledges or drops them: a
// rollout that gets ahead of a slow stage blocks in its put instead of
// filling the engine. Before each round the rollout calls tq.Pace with
// its version and Staleness, waiting while the trainer still has rows
// older than the bound to consume: the staleness bound holds the
// producer back rather than dropping what it made.
//
// # Partitions
//
// The samples of the whole run share one partition, "grpo/samples".
// Consumption is per (partition, task): one partition lets every stage
// hold one Task for the run and wait on it, where a partition per step
// would make each worker find out which step partitions exist and open a
// task on each; rows of different rounds still never mix, as the tags and
// samplers keep them apart. The partition stays small: the trainer clears
// the rows it trained, so it holds the rounds in flight (about Lag+2 of
// them), and the rounds the trainer dropped as stale until the run ends
// (a claim tells how many rows it dropped, not which). The rollout clears
// each policy version once no round it has still to write needs it. Each
// rank keeps one checkpoint row, and its gradient rows of the epoch under
// way and the one before. "grpo/run" holds one row: the run's
// configuration, and whether it finished.
//
// # Processes
//
// RoleAll runs every stage as goroutines of one process; each other role
// runs one stage, for processes sharing a queue (-url redis://...) and
// given the same configuration (steps, sizes, seed, ranks, lag and
// staleness). The first process of a run writes the run row; a process
// started with the same configuration joins the run, one with another is
// refused, and so is any process on a finished run (its partitions are
// leftovers to clear: `tq clear -yes grpo/run` and so on). The trainer
// marks its last policy version done: the rollout stops when it sees it,
// and a reward or advantage process waits for it (the processes of a role
// share a task "done-<role>" on "grpo/weights") and stops. RoleAll clears
// the run's partitions at the end, unless Config.Keep; separate processes
// leave the run row, marked finished, the last version and checkpoints,
// the rounds the rollout made ahead and the last gradient rows.
//
// # Restarts
//
// Every process can be killed (SIGKILL) and started again with the same
// flags: it joins the live run and resumes its stage where the queue says
// the run is.
//
//   - A reward or advantage worker needs nothing: the rows its earlier
//     life held come back when their lease ends (Config.Lease).
//   - The rollout resumes at the round after the last one the queue
//     holds (in "grpo/samples", or past the trainer's checkpoints), with
//     the policy versions it had not cleared, which its task's consumption,
//     reset, delivers again.
//   - A trainer rank resumes after the furthest step and epoch any rank
//     checkpointed, with the policy of that checkpoint: the step and epoch
//     the other ranks wait for it in. It reads the gradients of the epoch
//     again, rewrites its own (the same values), and, within a step, reads
//     the rows of its share again (its checkpoint names them). A rank
//     clears its gradient rows only once every rank wrote a later one, and
//     its checkpoints only once it wrote a later one, so what a restarted
//     rank needs is there, and no update is applied twice.
//
// A killed process may leave a Wait registered in the queue (for up to 30
// s) that is handed rows after its death; they come back when their lease
// ends, so a restart costs up to a lease.
//
// Every call of unknown outcome (tq.ErrOutcomeUnknown) is made again: the
// stages' writes may be made twice. A put is made again only where it did
// not apply, as the rows tell (a put is whole or absent): a put of new
// rows of which any is there applied; a put of fields to leased rows (a
// reward's, an advantage's) is made again to the rows still there, the
// others having been cleared by the roles after, so that the roles'
// progress meanwhile never fails it or brings a cleared row back.
//
// Each process logs a line per round, lease and step, with its role (and
// rank), and ends with a summary of what it did.
package grpo
