package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tqgo/tqgo/tq"
)

// A child process running "tq serve" (this test binary re-executed).
func init() {
	if os.Getenv("TQ_SERVE_CHILD") == "1" {
		args := strings.Split(os.Getenv("TQ_SERVE_ARGS"), "\x1f")
		os.Exit(run(context.Background(), args, os.Stdout, os.Stderr))
	}
}

// serveChild starts "tq serve" with args as a process of its own and
// waits until it says it is serving.
func serveChild(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	return serveChildUntil(t, "serving", args...)
}

// serveChildUntil starts "tq serve" with args and waits for a line of its
// stderr holding want.
func serveChildUntil(t *testing.T, want string, args ...string) *exec.Cmd {
	t.Helper()
	cmd, lines := childProc(t, "TQ_SERVE_CHILD", append([]string{"serve"}, args...))
	waitLine(t, lines, want)
	go func() {
		for range lines {
		}
	}()
	return cmd
}

// childProc starts this test binary as a child that runs the tq command
// with args (env=1 says how: see the init functions), killed at the
// test's end, and returns it with the lines of its stderr.
func childProc(t *testing.T, env string, args []string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"=1", "TQ_SERVE_ARGS="+strings.Join(args, "\x1f"))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return cmd, lines
}

// waitLine waits up to 20s for a line of lines holding want.
func waitLine(t *testing.T, lines <-chan string, want string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("tq exited before saying %q", want)
			}
			if strings.Contains(l, want) {
				return
			}
		case <-deadline:
			t.Fatalf("tq did not say %q within 20s", want)
		}
	}
}

// terminate stops a tq serve child with SIGTERM and checks it exits 0
// within 15s.
func terminate(t *testing.T, srv *exec.Cmd) {
	t.Helper()
	if err := srv.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitExit(t, srv, 15*time.Second)
}

// waitExit checks that a tq serve child exits 0 within limit.
func waitExit(t *testing.T, srv *exec.Cmd, limit time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("tq serve after SIGTERM: %v, want exit status 0", err)
		}
	case <-time.After(limit):
		t.Fatalf("tq serve did not exit within %v of SIGTERM", limit)
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// tq serve as its users run it: a process serving a directory, clients
// in this one; killed with SIGKILL and started again, its clients go on
// by themselves (no call of theirs fails), nothing acknowledged comes
// back, what was not is delivered again; stopped with SIGTERM, it exits 0.
func TestServeKillRestart(t *testing.T) {
	dir, addr := t.TempDir(), freePort(t)
	args := []string{"-engine", "file://" + dir, "-listen", addr}
	srv := serveChild(t, args...)
	ctx := t.Context()
	c, err := tq.Open(ctx, "tq://"+addr, tq.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 6 {
		if err := c.Put(ctx, "p", fmt.Sprintf("k%d", i), map[string]any{"x": int64(i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	task, err := c.Task("p", "work", []string{"x"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := task.Claim(ctx, 2)
	if err != nil || l == nil {
		t.Fatalf("claim: %v, %v", l, err)
	}
	acked := l.Keys()
	if err := l.Ack(ctx); err != nil {
		t.Fatal(err)
	}

	if err := srv.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = srv.Wait()
	restarted := make(chan *exec.Cmd, 1)
	go func() {
		time.Sleep(300 * time.Millisecond) // calls meanwhile find no server
		restarted <- serveChild(t, args...)
	}()
	// Served again by the restarted process, through the same client.
	got := map[string]bool{}
	for len(got) < 4 {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		l, err := task.Wait(wctx, 4)
		cancel()
		if err != nil {
			t.Fatalf("wait across the restart: %v", err)
		}
		for _, k := range l.Keys() {
			if got[k] {
				t.Fatalf("%s delivered twice", k)
			}
			got[k] = true
		}
		if err := l.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range acked {
		if got[k] {
			t.Fatalf("acknowledged %s delivered again after the restart", k)
		}
	}
	srv = <-restarted
	terminate(t, srv)
}

// Two servers for one directory: the second stands by and serves once the
// first is killed; a client naming both goes on by itself.
func TestServeStandby(t *testing.T) {
	dir, a1, a2 := t.TempDir(), freePort(t), freePort(t)
	first := serveChild(t, "-engine", "file://"+dir, "-listen", a1)
	serveChildUntil(t, "standing by", "-engine", "file://"+dir, "-listen", a2)
	ctx := t.Context()
	c, err := tq.Open(ctx, "tq://"+a1+","+a2, tq.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Put(ctx, "p", "k0", map[string]any{"x": int64(0)}, nil); err != nil {
		t.Fatal(err)
	}
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	start := time.Now()
	if err := c.Put(ctx, "p", "k1", map[string]any{"x": int64(1)}, nil); err != nil {
		t.Fatalf("put after the first server was killed: %v", err)
	}
	rows, err := c.List(ctx, "p")
	if err != nil || len(rows.Rows) != 2 {
		t.Fatalf("after the takeover: %v, %v; want both rows", rows, err)
	}
	t.Logf("standby served the directory %v after the kill", time.Since(start))
}

// tq serve -cpuprofile: once the server stops on SIGTERM, the file holds
// a CPU profile (gzipped, as pprof writes it).
func TestServeCPUProfile(t *testing.T) {
	dir := t.TempDir()
	prof := dir + "/cpu.prof"
	addr := freePort(t)
	srv := serveChild(t, "-engine", "memory://", "-listen", addr, "-cpuprofile", prof)
	c, err := tq.Open(t.Context(), "tq://"+addr, tq.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Put(t.Context(), "p", "k", map[string]any{"x": int64(1)}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	terminate(t, srv)
	b, err := os.ReadFile(prof)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("-cpuprofile wrote %d bytes that are not a gzipped profile", len(b))
	}
}
