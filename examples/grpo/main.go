package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
)

func main() {
	cfg := DefaultConfig()
	flag.StringVar(&cfg.URL, "url", cfg.URL, `queue URL: "" is the embedded memory engine; redis://host:port/db, yuanrong://...`)
	flag.IntVar(&cfg.Steps, "steps", cfg.Steps, "training steps")
	flag.IntVar(&cfg.Prompts, "prompts", cfg.Prompts, "prompts per step")
	flag.IntVar(&cfg.Group, "group", cfg.Group, "responses per prompt (the GRPO group)")
	flag.IntVar(&cfg.Length, "len", cfg.Length, "prompt and response length in tokens")
	flag.IntVar(&cfg.Vocab, "vocab", cfg.Vocab, "vocabulary size")
	flag.Float64Var(&cfg.LR, "lr", cfg.LR, "learning rate")
	flag.Float64Var(&cfg.ClipEps, "clip", cfg.ClipEps, "PPO clip range (0: no clipping)")
	flag.IntVar(&cfg.Epochs, "epochs", cfg.Epochs, "gradient passes over each step's batch")
	flag.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "random seed")
	flag.BoolVar(&cfg.Quiet, "quiet", cfg.Quiet, "print only the summary")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if _, err := Run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
