//go:build linux

package grpo

import (
	"bytes"
	"fmt"
	"github.com/tqgo/tqgo/internal/childproc"
	"math/rand/v2"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tqgo/tqgo/internal/redisserver"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

// TestRestartEachRole runs the example's five processes (rollout,
// reward, advantage, trainer ranks 0 and 1) on a private redis-server
// that syncs every write to its append-only file, and SIGKILLs one of
// them mid-run, or the server, and starts it again with the same flags
// (the processes ride out the server's restart on tq's retries of what
// it refused; its append-only file keeps every write it acknowledged).
// Each run must finish within a bound, with no process left, having
// trained what a run without the fault trains: the same rewards at every
// step, and the same final policy, bit for bit (the run is deterministic:
// see the package doc).
func TestRestartEachRole(t *testing.T) {
	redistest.Available(t)
	bin := buildCommand(t)
	cfg := restartConfig()
	want := faultFree(t, cfg)
	for _, tc := range []struct {
		name   string
		victim string // a process's name, or "" for the server
	}{
		{"reward", "reward"},
		{"trainer-1", "trainer-1"},
		{"trainer-0", "trainer-0"},
		{"rollout", "rollout"},
		{"redis-server", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			restartRun(t, bin, "", cfg, want, tc.victim)
			t.Logf("%s killed and restarted: the run finished in %v", tc.name, time.Since(start).Round(time.Millisecond))
		})
	}
}

// restartConfig is the configuration of the runs restartRun faults.
func restartConfig() Config {
	cfg := smallConfig()
	cfg.Steps = 24
	return cfg
}

// faultFree is the run of cfg without faults, in one process: what every
// faulty run must reproduce. It fails t unless the reward rose.
func faultFree(t *testing.T, cfg Config) Result {
	t.Helper()
	want, err := Run(t.Context(), cfg, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if first, last := want.First(3), want.Last(3); last < first+0.4 {
		t.Fatalf("reward %.3f -> %.3f without faults: did not rise by 0.4", first, last)
	}
	return want
}

// buildCommand builds the example's command, without -race (the test
// may run under it: five racy processes on two cores are slow), into a
// temp dir.
func buildCommand(t *testing.T) string { return buildBinary(t, "grpo", "..") }

// recovery matches the log lines of what a process did to recover.
var recovery = regexp.MustCompile(`msg=(resumed|"read its share again"|"skipped|"outcome unknown)`)

// stepLine is a trainer rank's log line of a step.
var stepLine = regexp.MustCompile(`msg=step role=trainer rank=(\d+) step=(\d+) round=\d+ rows=\d+ reward=([0-9.]+)`)

// restartRun is one run with one fault: victim's process (or, for "",
// the Redis server; for serveVictim, the tq serve process) is killed once
// the trainer logged step 6 (and up to a step's time more, so that runs
// kill it at different points of a step), and restarted. With tqBin set,
// the roles reach the Redis server through a tq serve process of that
// binary (tq://), restarted on the same address and engine when it is
// the victim.
func restartRun(t *testing.T, bin, tqBin string, cfg Config, want Result, victim string) {
	srv := redistest.Start(t, redisserver.Options{Args: []string{"--appendonly", "yes", "--appendfsync", "always"}})
	engine := srv.URL() + "?prefix=grpo"
	url := engine
	var server *serveProc // with tqBin
	if tqBin != "" {
		server = startServe(t, tqBin, engine, "127.0.0.1:0")
		url = "tq://" + server.addr
	} else if victim == serveVictim {
		t.Fatal("no tq serve to kill without its binary")
	}
	args := func(role string, rank int) []string {
		return []string{"-url", url, "-role", role, "-rank", strconv.Itoa(rank), "-steps", strconv.Itoa(cfg.Steps),
			"-prompts", strconv.Itoa(cfg.Prompts), "-len", strconv.Itoa(cfg.Length), "-lease", "2s"}
	}
	procs := map[string]*proc{}
	var names []string
	for _, p := range []struct {
		name, role string
		rank       int
	}{
		{"rollout", RoleRollout, -1}, {"reward", RoleReward, -1}, {"advantage", RoleAdvantage, -1},
		{"trainer-0", RoleTrainer, 0}, {"trainer-1", RoleTrainer, 1},
	} {
		procs[p.name] = startProc(t, p.name, bin, args(p.role, p.rank))
		names = append(names, p.name)
	}
	var killed []*proc // the victims' first lives, for the report
	report := func() string {
		var b strings.Builder
		for _, p := range killed {
			fmt.Fprintf(&b, "--- %s (killed):\n%s\n", p.name, p.out.String())
		}
		for _, n := range names {
			fmt.Fprintf(&b, "--- %s:\n%s\n", n, procs[n].out.String())
		}
		if server != nil {
			fmt.Fprintf(&b, "--- %s:\n%s\n", server.name, server.out.String())
		}
		return b.String()
	}
	bound := time.After(60 * time.Second)
	// The rank whose log tells the steps: one not killed.
	watch := "trainer-0"
	if victim == watch {
		watch = "trainer-1"
	}

	// The fault, once training is under way.
	for step := 0; step < 6; step = lastStep(procs[watch].out.String()) {
		select {
		case <-bound:
			stopAll(procs)
			t.Fatalf("no step 6 in time\n%s", report())
		case <-time.After(20 * time.Millisecond):
		}
	}
	time.Sleep(rand.N(25 * time.Millisecond))
	switch victim {
	case "":
		if err := srv.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := srv.Restart(t.Context()); err != nil {
			t.Fatalf("restarting redis-server: %v", err)
		}
	case serveVictim:
		server.kill()
		if ws, ok := server.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("tq serve was not killed by SIGKILL (%v): it had exited\n%s", server.cmd.ProcessState, report())
		}
		killed = append(killed, server.proc)
		server = startServe(t, tqBin, engine, server.addr)
	default:
		p := procs[victim]
		p.kill()
		killed = append(killed, p)
		procs[victim] = startProc(t, victim, bin, p.args)
	}

	// Until every process exited, or one failed: the run cannot finish
	// without it.
	var failed []string
	for running := len(names); running > 0 && len(failed) == 0; {
		select {
		case <-bound:
			stopAll(procs)
			t.Fatalf("the run did not finish in time\n%s", report())
		case <-time.After(20 * time.Millisecond):
		}
		running = 0
		for _, n := range names {
			select {
			case <-procs[n].exited:
				if err := procs[n].err; err != nil {
					out := strings.TrimSpace(procs[n].out.String())
					failed = append(failed, fmt.Sprintf("%s: %v: %s", n, err, out[strings.LastIndex(out, "\n")+1:]))
				}
			default:
				running++
			}
		}
	}
	if len(failed) > 0 {
		stopAll(procs)
		t.Fatalf("processes failed: %s\n%s", strings.Join(failed, "; "), report())
	}
	for _, n := range names {
		for _, line := range strings.Split(procs[n].out.String(), "\n") {
			if recovery.MatchString(line) {
				t.Logf("%s: %s", n, line[strings.Index(line, "msg="):])
			}
		}
		if sum := procs[n].summary(); sum != "" {
			t.Logf("%s: %s", n, sum)
		}
	}

	// Every step of the rank not killed as without the fault.
	var got []string
	for _, m := range stepLine.FindAllStringSubmatch(procs[watch].out.String(), -1) {
		got = append(got, m[2]+":"+m[3])
	}
	var exp []string
	for i, r := range want.Rewards {
		exp = append(exp, fmt.Sprintf("%d:%.4f", i+1, r))
	}
	if !slices.Equal(got, exp) {
		t.Errorf("%s's steps (step:reward)\n%v\nwithout the fault\n%v\n%s", watch, got, exp, report())
	}
	if server != nil {
		select {
		case <-server.exited:
			t.Errorf("tq serve exited during the run (%v):\n%s", server.err, server.out.String())
		default:
		}
	}
	if victim != "" && victim != serveVictim && victim != "reward" && !strings.Contains(procs[victim].out.String(), "msg=resumed") {
		t.Errorf("the restarted %s did not say where it resumed:\n%s", victim, procs[victim].out.String())
	}

	// The queue: the run is marked finished, and each rank's last
	// checkpoint is the policy of the run without the fault.
	c, err := tq.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m, err := c.List(t.Context(), RunPartition)
	if err != nil || len(m.Rows) != 1 || m.Rows[0].Tag[tagFinished] != true {
		t.Errorf("run row: %+v, %v; want it finished", m, err)
	}
	m, err = c.List(t.Context(), CheckpointPartition)
	if err != nil || len(m.Rows) != cfg.Ranks {
		t.Fatalf("checkpoints: %+v, %v; want one per rank", m, err)
	}
	last := position{cfg.Steps, cfg.Epochs - 1}.String()
	for _, row := range m.Rows {
		if !strings.HasPrefix(row.Key, last) {
			t.Errorf("checkpoint %q, want %s", row.Key, last)
			continue
		}
		b, err := c.BatchGet(t.Context(), CheckpointPartition, []string{row.Key}, fLogits)
		if err != nil {
			t.Fatal(err)
		}
		logits, err := tq.As[float64](b[fLogits])
		if err != nil || !slices.Equal(logits, want.Policy) {
			t.Errorf("checkpoint %s: the policy differs from the run without the fault (%v)", row.Key, err)
		}
	}
}

// proc is one process of the run.
type proc struct {
	name   string
	args   []string
	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan struct{} // closed once it exited
	err    error         // its Wait's error, once exited
}

func startProc(t *testing.T, name, bin string, args []string) *proc {
	t.Helper()
	p := &proc{name: name, args: args, out: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	// Killed with the test binary, should it die first.
	childproc.Tie(p.cmd)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(p.kill)
	return p
}

// kill sends SIGKILL (unless it exited) and waits for the process to
// exit.
func (p *proc) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// summary is the process's last line, "done: ...".
func (p *proc) summary() string {
	out := strings.TrimSpace(p.out.String())
	if i := strings.LastIndex(out, "\ndone: "); i >= 0 {
		return out[i+1:]
	}
	return ""
}

func stopAll(procs map[string]*proc) {
	for _, p := range procs {
		p.kill()
	}
}

// lastStep is the last step a trainer rank logged in out.
func lastStep(out string) int {
	ms := stepLine.FindAllStringSubmatch(out, -1)
	if len(ms) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(ms[len(ms)-1][2])
	return n
}

// syncBuffer is a bytes.Buffer safe for a process's output and the
// test's reads at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A role whose peer is gone for good (killed, never restarted) says what
// it waited for and exits non-zero once the stall bound passes with no
// process of the feeding role alive, and the roles that wait on it follow:
// no process is left alive and silent.
func TestPeerGoneExits(t *testing.T) {
	redistest.Available(t)
	bin := buildCommand(t)
	cfg := smallConfig()
	cfg.Steps = 200 // far more than the run gets to
	srv := redistest.Start(t)
	url := srv.URL() + "?prefix=grpo"
	procs := map[string]*proc{}
	for _, p := range []struct {
		name, role string
		rank       int
	}{
		{"rollout", RoleRollout, -1}, {"reward", RoleReward, -1}, {"advantage", RoleAdvantage, -1},
		{"trainer-0", RoleTrainer, 0}, {"trainer-1", RoleTrainer, 1},
	} {
		procs[p.name] = startProc(t, p.name, bin, []string{"-url", url, "-role", p.role, "-rank", strconv.Itoa(p.rank),
			"-steps", strconv.Itoa(cfg.Steps), "-prompts", strconv.Itoa(cfg.Prompts), "-len", strconv.Itoa(cfg.Length),
			"-lease", "2s", "-stall", "3s"})
	}
	bound := time.After(60 * time.Second)
	for step := 0; step < 3; step = lastStep(procs["trainer-0"].out.String()) {
		select {
		case <-bound:
			stopAll(procs)
			t.Fatal("no step 3 in time")
		case <-time.After(20 * time.Millisecond):
		}
	}
	start := time.Now()
	procs["advantage"].kill()
	for _, n := range []string{"trainer-0", "trainer-1", "rollout", "reward"} {
		p := procs[n]
		select {
		case <-p.exited:
		case <-bound:
			stopAll(procs)
			t.Fatalf("%s still running %v after its peer was killed:\n%s", n, time.Since(start), p.out.String())
		}
		out := p.out.String()
		if p.err == nil || !strings.Contains(out, "wait stalled") || !strings.Contains(out, "no member alive in grpo-") {
			t.Errorf("%s exited with %v, want an error saying which peer is gone:\n%s", n, p.err, out)
		}
	}
	t.Logf("every process exited %v after the advantage worker was killed", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(procs["trainer-0"].out.String(), "rows lacking advantages") {
		t.Errorf("the trainer did not say it waited for advantages:\n%s", procs["trainer-0"].out.String())
	}
}
