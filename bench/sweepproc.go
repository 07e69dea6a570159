package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tqgo/tqgo/tq"
)

// The sweep's process arm: C consumers that are OS processes of their own
// (the bench binary run again as a child), each a tq:// client looping
// Claim with the ack of its previous lease, as the goroutine arm's
// consumers do: what C worker processes of a job cost the server, each
// with its own runtime, connection and scheduler.

// sweepProcMax is the largest consumer count the process arm runs at.
const sweepProcMax = 64

// childEnv names the environment a child of the bench reads its orders
// from.
const (
	childEnv          = "TQ_BENCH_CHILD" // "sweep": run as a sweep consumer; "relay": as the gRPC relay (relay.go)
	childURLEnv       = "TQ_BENCH_CHILD_URL"
	childPartitionEnv = "TQ_BENCH_CHILD_PARTITION"
)

// childResult is what a sweep child reports when its loop ends.
type childResult struct {
	Latencies []float64 `json:"lat"` // seconds of each claim (with its ack) that returned rows
	CPU       float64   `json:"cpu"` // its CPU seconds from the start signal to the end
	Err       string    `json:"err,omitempty"`
}

// runChild runs this process as a child of the bench (a sweep consumer,
// or the gRPC relay) when its environment says so, and reports whether it
// did, and its exit code.
func runChild() (bool, int) {
	switch os.Getenv(childEnv) {
	case "sweep":
		res := sweepChild(os.Stdin, os.Stdout)
		if err := json.NewEncoder(os.Stdout).Encode(res); err != nil || res.Err != "" {
			return true, 1
		}
		return true, 0
	case "relay":
		if err := relayChild(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "bench: gRPC relay:", err)
			return true, 1
		}
		return true, 0
	}
	return false, 0
}

// sweepChild opens its client and task, says "ready", waits for the start
// line (the loop's end, in Unix nanoseconds), then claims until then or
// until a claim returns no rows.
func sweepChild(in io.Reader, out io.Writer) childResult {
	ctx := context.Background()
	c, err := tq.Open(ctx, os.Getenv(childURLEnv), tq.Quiet())
	if err != nil {
		return childResult{Err: err.Error()}
	}
	defer c.Close()
	task, err := c.Task(os.Getenv(childPartitionEnv), "sweep", []string{"id"})
	if err != nil {
		return childResult{Err: err.Error()}
	}
	if _, err := fmt.Fprintln(out, "ready"); err != nil {
		return childResult{Err: err.Error()}
	}
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil {
		return childResult{Err: "start line: " + err.Error()}
	}
	end, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
	if err != nil {
		return childResult{Err: "start line: " + err.Error()}
	}
	deadline := time.Unix(0, end)
	cpu0 := selfCPU()
	var res childResult
	var prev *tq.Lease
	for {
		t0 := time.Now()
		l, err := task.Claim(ctx, queueBatch, tq.Acking(prev))
		t1 := time.Now()
		if err != nil {
			res.Err = err.Error()
			break
		}
		prev = l
		if l.Len() == 0 {
			break
		}
		res.Latencies = append(res.Latencies, t1.Sub(t0).Seconds())
		if t1.After(deadline) {
			if err := l.Ack(ctx); err != nil {
				res.Err = err.Error()
			}
			break
		}
	}
	res.CPU = selfCPU() - cpu0
	return res
}

// selfCPU is this process's user and system CPU seconds so far.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// sweepChildProc is one running child.
type sweepChildProc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

// procRun is one sample of k consumer processes of the served target.
func (s *sweepArm) procRun(ctx context.Context, cfg Config, rig *queueRig, k, pid int) (time.Duration, error) {
	if err := queueRows(ctx, rig.clients[0], sweepPartition, s.sweepRows(cfg, k)); err != nil {
		return 0, err
	}
	exe, err := os.Executable()
	if err != nil {
		return 0, err
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel() // a child still running when this returns is killed
	kids := make([]*sweepChildProc, k)
	defer func() {
		for _, c := range kids {
			if c != nil {
				c.in.Close()
				_ = c.cmd.Wait()
			}
		}
	}()
	for i := range kids {
		cmd := exec.CommandContext(cctx, exe)
		cmd.Env = append(os.Environ(), childEnv+"=sweep", childURLEnv+"="+rig.t.url, childPartitionEnv+"="+sweepPartition)
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			return 0, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return 0, err
		}
		if err := cmd.Start(); err != nil {
			return 0, fmt.Errorf("start consumer process %d: %w", i, err)
		}
		kids[i] = &sweepChildProc{cmd: cmd, in: in, out: bufio.NewReader(out)}
	}
	for i, c := range kids {
		line, err := c.out.ReadString('\n')
		if strings.TrimSpace(line) != "ready" {
			var res childResult
			if json.Unmarshal([]byte(line), &res) == nil && res.Err != "" {
				err = errors.New(res.Err)
			}
			return 0, fmt.Errorf("consumer process %d did not start: %q, %v", i, line, err)
		}
	}
	before, err := readSweepCPU(ctx, rig, pid)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	end := strconv.FormatInt(start.Add(cfg.SweepTime).UnixNano(), 10) + "\n"
	for _, c := range kids {
		if _, err := io.WriteString(c.in, end); err != nil {
			return 0, err
		}
	}
	var lats []float64
	var cpu float64
	var errs []error
	for i, c := range kids {
		var res childResult
		line, err := c.out.ReadString('\n')
		if err == nil {
			err = json.Unmarshal([]byte(line), &res)
		}
		if err == nil && res.Err != "" {
			err = errors.New(res.Err)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("consumer process %d: %w", i, err))
		}
		lats = append(lats, res.Latencies...)
		cpu += res.CPU
	}
	wall := time.Since(start)
	after, err := readSweepCPU(ctx, rig, pid)
	if err := errors.Join(append(errs, err)...); err != nil {
		return 0, err
	}
	if len(lats) == 0 {
		return 0, fmt.Errorf("%d consumer processes claimed no rows", k)
	}
	slices.Sort(lats)
	n := float64(len(lats))
	s.runs = append(s.runs, sweepSample{claims: len(lats), wall: wall.Seconds(), latency: summarize(lats).Median,
		serverCPU: (after.server - before.server) / n, redisCPU: (after.redis - before.redis) / n, benchCPU: cpu / n,
		redisOut: (after.redisOut - before.redisOut) / n})
	s.rate = n / wall.Seconds()
	return wall / time.Duration(len(lats)), nil
}
