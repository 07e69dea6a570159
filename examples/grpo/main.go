package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/tqgo/tqgo/examples/grpo/grpo"
	"github.com/tqgo/tqgo/tqprom"
)

func main() {
	cfg := grpo.DefaultConfig()
	flag.StringVar(&cfg.URL, "url", cfg.URL, `queue URL: "" is the embedded memory engine; file:///dir (embedded, durable), redis://host:port/db, yuanrong://...`)
	flag.StringVar(&cfg.Role, "role", grpo.RoleAll, "the stage this process runs: "+strings.Join(grpo.Roles, ", ")+" (the others as processes of their own on -url)")
	flag.IntVar(&cfg.Rank, "rank", cfg.Rank, "with -role trainer: the one trainer rank to run (-1: every rank)")
	flag.IntVar(&cfg.Steps, "steps", cfg.Steps, "training steps")
	flag.IntVar(&cfg.Prompts, "prompts", cfg.Prompts, "prompts per step")
	flag.IntVar(&cfg.Group, "group", cfg.Group, "responses per prompt (the GRPO group)")
	flag.IntVar(&cfg.Length, "len", cfg.Length, "prompt and response length in tokens")
	flag.IntVar(&cfg.Vocab, "vocab", cfg.Vocab, "vocabulary size")
	flag.Float64Var(&cfg.LR, "lr", cfg.LR, "learning rate")
	flag.Float64Var(&cfg.ClipEps, "clip", cfg.ClipEps, "PPO clip range (0: no clipping)")
	flag.IntVar(&cfg.Epochs, "epochs", cfg.Epochs, "gradient passes over each step's batch")
	flag.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "random seed")
	flag.IntVar(&cfg.Ranks, "ranks", cfg.Ranks, "trainer data-parallel ranks")
	flag.IntVar(&cfg.Staleness, "staleness", cfg.Staleness, "the trainer drops rows of a policy more than this many versions old")
	flag.IntVar(&cfg.Lag, "lag", cfg.Lag, "the rollout of round r uses policy version r-1-lag")
	flag.IntVar(&cfg.Capacity, "capacity", cfg.Capacity, "rounds the samples partition holds at most; the rollout blocks beyond (0: lag+3)")
	flag.IntVar(&cfg.RewardWorkers, "reward-workers", cfg.RewardWorkers, "reward workers")
	flag.DurationVar(&cfg.Lease, "lease", cfg.Lease, "every worker's lease: how soon the rows a killed worker held go to another, or to it restarted")
	flag.BoolVar(&cfg.Keep, "keep", cfg.Keep, "leave the run's partitions in the queue at the end (for tq status)")
	flag.BoolVar(&cfg.Quiet, "quiet", cfg.Quiet, "print only the header and the summary, not a log line per round, lease and step")
	flag.DurationVar(&cfg.Stall, "stall", cfg.Stall, "with -role: exit with an error when what a role waits on makes no progress this long and no process of the role feeding it is alive (0: wait for ever)")
	metrics := flag.String("metrics", "", `serve Prometheus metrics of the queue at http://ADDR/metrics (":9100", say)`)
	flag.Parse()
	if *metrics != "" {
		col, err := tqprom.New()
		if err == nil {
			err = col.Register(prometheus.DefaultRegisterer)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		cfg.Metrics = col
		ln, err := net.Listen("tcp", *metrics)
		if err != nil {
			fmt.Fprintln(os.Stderr, "metrics:", err)
			os.Exit(1)
		}
		http.Handle("/metrics", promhttp.Handler())
		go func() { _ = http.Serve(ln, nil) }()
		fmt.Fprintf(os.Stderr, "metrics at http://%s/metrics\n", ln.Addr())
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if _, err := grpo.Run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
