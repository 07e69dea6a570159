// Command grpo is a small GRPO training loop whose workers hand each other
// every sample through tqgo, as verl's workers do through TransferQueue.
//
//	go run ./examples/grpo                       # every stage, embedded memory engine
//	go run ./examples/grpo -url redis://localhost:6390/0
//
// With -url naming a shared queue, each stage can be a process of its own
// (started in any order; the trainer's ranks too):
//
//	go run ./examples/grpo -url $Q -role rollout
//	go run ./examples/grpo -url $Q -role reward
//	go run ./examples/grpo -url $Q -role advantage
//	go run ./examples/grpo -url $Q -role trainer -rank 0
//	go run ./examples/grpo -url $Q -role trainer -rank 1
//
// Any of them can be killed and started again with the same flags: it
// rejoins the run where the queue says it is (-lease bounds how long the
// rows a killed process held wait for it).
//
// The loop is package github.com/tqgo/tqgo/examples/grpo/grpo (its doc
// describes how data moves, and how each stage restarts); main only
// parses flags.
package main
