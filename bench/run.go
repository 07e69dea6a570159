package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"
)

// Run measures the suites of cfg and writes the report to stdout as
// Markdown (and to cfg.CSV and cfg.PNG when set). It returns the report;
// a failed parity check is an error, and nothing is printed then.
func Run(ctx context.Context, cfg Config, stdout io.Writer) (*Report, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	rep := &Report{}
	var targets []*target
	if cfg.has("kv") || cfg.has("limit") || cfg.has("redis") || cfg.has("queue") {
		var err error
		if targets, err = resolveTargets(ctx, cfg, rep); err != nil {
			return nil, err
		}
		defer stopTargets(targets)
	}

	prog := newProgress(cfg.Progress, 2*time.Second)
	defer prog.finish()
	m := &meter{reps: cfg.Reps, minSample: cfg.MinSample, prog: prog}
	if cfg.has("pack") {
		prog.add(packSteps(cfg, m))
	}
	if cfg.has("kv") {
		prog.add(kvSteps(targets, m))
	}
	if cfg.has("limit") {
		prog.add(limitSteps(cfg, targets, cfg.has("pack") && len(cfg.Sizes) > 0, m))
	}
	if cfg.has("redis") {
		prog.add(redisSteps(cfg, m))
	}
	if cfg.has("queue") {
		prog.add(queueSteps(cfg, targets, m))
	}

	rep.Machine = machineLines(cfg, time.Now())
	for _, t := range targets {
		if t.isRedis() {
			how := "given by -urls"
			if t.isServed() {
				how = fmt.Sprintf("served by tq serve (pid %d) at %s", t.serve.pid(), t.url)
				if t.private {
					how += ", in front of a private redis-server started for this run"
				}
			} else if t.private {
				how = "private, started for this run"
			}
			rep.Machine = append(rep.Machine, fmt.Sprintf("Redis (%s): %s, %s", t.name, serverVersion(ctx, t.redisOpts), how))
		}
	}

	if cfg.has("pack") {
		if err := runPack(ctx, cfg, m, rep); err != nil {
			return nil, fmt.Errorf("pack: %w", err)
		}
	}
	if cfg.has("kv") {
		if err := runKV(ctx, cfg, m, targets, rep); err != nil {
			return nil, fmt.Errorf("kv: %w", err)
		}
	}
	if cfg.has("limit") {
		if err := runLimit(ctx, cfg, m, targets, rep); err != nil {
			return nil, fmt.Errorf("limit: %w", err)
		}
	}
	if cfg.has("redis") {
		if err := runRedis(ctx, cfg, m, targets, rep); err != nil {
			return nil, fmt.Errorf("redis: %w", err)
		}
	}
	if cfg.has("queue") {
		if err := runQueue(ctx, cfg, m, targets, rep); err != nil {
			return nil, fmt.Errorf("queue: %w", err)
		}
	}
	prog.finish()

	if err := rep.WriteMarkdown(stdout); err != nil {
		return rep, err
	}
	if cfg.CSV != "" {
		if err := writeFile(cfg.CSV, rep.WriteCSV); err != nil {
			return rep, fmt.Errorf("-csv: %w", err)
		}
	}
	if cfg.PNG != "" {
		if err := writePlot(cfg.PNG, rep.SizeSweep); err != nil {
			return rep, fmt.Errorf("-png: %w", err)
		}
	}
	return rep, nil
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
