package grpo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/tqgo/tqgo/internal/childproc"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tqserve"
)

// The test binary is also one role of a multi-process run: with roleEnv
// set, TestMain runs Run with the Config in configEnv (JSON) and writes
// the Result to the file resultEnv names.
const (
	roleEnv   = "GRPO_TEST_ROLE"
	configEnv = "GRPO_TEST_CONFIG"
	resultEnv = "GRPO_TEST_RESULT"
)

func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) == "" {
		os.Exit(m.Run())
	}
	var cfg Config
	if err := json.Unmarshal([]byte(os.Getenv(configEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "grpo role:", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := Run(ctx, cfg, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	b, err := json.Marshal(res)
	if err == nil {
		err = os.WriteFile(os.Getenv(resultEnv), b, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "grpo role:", err)
		os.Exit(2)
	}
	os.Exit(0)
}

// TestProcessesOverRedis runs each stage as a process of its own over a
// private redis-server, the trainer's two ranks as two processes (their
// gradients meet in the queue), started trainer first: the run learns as
// in one process, and both ranks saw the same steps.
func TestProcessesOverRedis(t *testing.T) {
	srv := redistest.Start(t)
	runProcesses(t, srv.URL()+"?prefix=grpoproc")
}

// TestProcessesOverServer is TestProcessesOverRedis with every process a
// client of a tq server over the Redis (tq://): one process runs the
// partitions' rules for all, the others' cells go straight to Redis.
func TestProcessesOverServer(t *testing.T) {
	srv := redistest.Start(t)
	s, err := tqserve.NewServer(t.Context(), srv.URL()+"?prefix=grposerve")
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("server close: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	runProcesses(t, "tq://"+lis.Addr().String())
}

// runProcesses runs the job's roles as processes of their own on url and
// checks what they learned.
func runProcesses(t *testing.T, url string) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	base := smallConfig()
	base.URL = url
	type proc struct {
		name     string
		cmd      *exec.Cmd
		out      bytes.Buffer
		result   string
		finished chan error
	}
	var procs []*proc
	dir := t.TempDir()
	for _, role := range []struct {
		name string
		role string
		rank int
	}{
		{"trainer-1", RoleTrainer, 1}, {"trainer-0", RoleTrainer, 0},
		{"advantage", RoleAdvantage, -1}, {"reward", RoleReward, -1}, {"rollout", RoleRollout, -1},
	} {
		cfg := base
		cfg.Role, cfg.Rank = role.role, role.rank
		js, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		p := &proc{name: role.name, result: filepath.Join(dir, role.name+".json"), finished: make(chan error, 1)}
		p.cmd = exec.Command(exe, "-test.run=^$")
		p.cmd.Env = append(os.Environ(), roleEnv+"="+role.role, configEnv+"="+string(js), resultEnv+"="+p.result)
		p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
		childproc.Tie(p.cmd) // killed with the test binary, should it die first
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { p.finished <- p.cmd.Wait() }()
		procs = append(procs, p)
	}
	deadline := time.After(4 * time.Minute)
	for _, p := range procs {
		select {
		case err := <-p.finished:
			if err != nil {
				t.Errorf("%s: %v\n%s", p.name, err, p.out.String())
			}
		case <-deadline:
			for _, q := range procs {
				_ = q.cmd.Process.Kill()
			}
			<-p.finished // its output is complete once Wait returned
			t.Fatalf("%s did not finish\n%s", p.name, p.out.String())
		}
	}
	if t.Failed() {
		return
	}
	read := func(name string) Result {
		var res Result
		b, err := os.ReadFile(filepath.Join(dir, name+".json"))
		if err == nil {
			err = json.Unmarshal(b, &res)
		}
		if err != nil {
			t.Fatalf("%s's result: %v", name, err)
		}
		return res
	}
	r0, r1 := read("trainer-0"), read("trainer-1")
	if len(r0.Rewards) != base.Steps || !slices.Equal(r0.Rewards, r1.Rewards) || !slices.Equal(r0.Rounds, r1.Rounds) {
		t.Errorf("ranks' steps differ:\n%v %v\n%v %v", r0.Rewards, r0.Rounds, r1.Rewards, r1.Rounds)
	}
	for s, n := range r0.Trained {
		if n != base.rows() || r0.Rounds[s] != s+1 {
			t.Errorf("step %d trained %d rows of round %d", s+1, n, r0.Rounds[s])
		}
	}
	if first, last := r0.First(3), r0.Last(3); last < first+0.4 {
		t.Errorf("reward %.3f -> %.3f over processes: did not rise by 0.4", first, last)
	}
	if ro := read("rollout"); ro.RolledOut < base.Steps {
		t.Errorf("the rollout wrote %d rounds for %d steps", ro.RolledOut, base.Steps)
	}
	t.Logf("trainer rank 0:\n%s", procs[1].out.String())
}
