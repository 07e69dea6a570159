package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tqgo/tqgo/internal/childproc"
	"github.com/tqgo/tqgo/tq"
)

// holdDirEnv names the directory TestHoldDirChild holds.
const holdDirEnv = "TQ_CLI_HOLD_DIR"

// TestHoldDirChild is the child of TestFileInUse: it opens the directory,
// puts rows k0..k2 in partition "p", claims one under task "train" and
// acks it, prints "ready" and holds the directory until its stdin closes.
func TestHoldDirChild(t *testing.T) {
	dir := os.Getenv(holdDirEnv)
	if dir == "" {
		t.Skip("the child of TestFileInUse")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // never outlives a lost parent long
	defer cancel()
	fail := func(err error) {
		fmt.Println("error", err)
		os.Exit(1)
	}
	c, err := tq.Open(ctx, "file://"+dir, tq.Quiet())
	if err != nil {
		fail(err)
	}
	if err := c.BatchPut(ctx, "p", []string{"k0", "k1", "k2"}, tq.Batch{"a": tq.Stacked([]int64{1, 2, 3}, 3, 1)}, nil); err != nil {
		fail(err)
	}
	task, err := c.Task("p", "train", []string{"a"})
	if err != nil {
		fail(err)
	}
	l, err := task.Claim(ctx, 1)
	if err != nil || l.Len() != 1 {
		fail(fmt.Errorf("claim: %v", err))
	}
	if err := l.Ack(ctx); err != nil {
		fail(err)
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = c.Close()
	os.Exit(0)
}

// TestFileInUse: on a file:// directory another process holds, the
// commands that read run on a read-only view, saying so and how fresh
// it is, and those that write fail naming the holder.
func TestFileInUse(t *testing.T) {
	if os.Getenv(holdDirEnv) != "" {
		t.Skip("in the child")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHoldDirChild$")
	cmd.Env = append(os.Environ(), holdDirEnv+"="+dir)
	childproc.Tie(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	}()
	sc := bufio.NewScanner(out)
	if !sc.Scan() || sc.Text() != "ready" {
		t.Fatalf("child: %q %v", sc.Text(), sc.Err())
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	pid := "pid " + strconv.Itoa(cmd.Process.Pid)
	host, _ := os.Hostname()
	u := "file://" + dir

	r := runTQ(t, u, "status", "p")
	t.Logf("tq status on the held directory:\n%s%s", r.stderr, r.stdout)
	if r.code != 0 || !strings.Contains(r.stdout, "train") {
		t.Fatalf("status: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"read-only view", pid, host, " as of ", "log position wal-"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("status's stderr %q does not say %q", r.stderr, want)
		}
	}
	r = runTQ(t, u, "-json", "status", "p")
	var st statusJSON
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &st) != nil {
		t.Fatalf("status -json: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if st.Rows != 3 || len(st.Tasks) != 1 || st.Tasks["train"].Acked != 1 || st.Tasks["train"].Ready != 2 {
		t.Errorf("status -json on the view: %s", r.stdout)
	}
	r = runTQ(t, u, "rows", "p")
	if r.code != 0 || !strings.Contains(r.stdout, "k0") || !strings.Contains(r.stdout, "k2") {
		t.Errorf("rows: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, args := range [][]string{{"partitions"}, {"dump", "p", "k1"}, {"dead", "p", "train"}, {"capacity", "p"}} {
		if r := runTQ(t, u, args...); r.code != 0 || !strings.Contains(r.stderr, "read-only view") {
			t.Errorf("%v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
	}
	// Asked for, the view is said to be one too.
	if r := runTQ(t, u+"?mode=ro", "status", "p"); r.code != 0 || !strings.Contains(r.stderr, "read-only view") {
		t.Errorf("status with mode=ro: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	for _, args := range [][]string{
		{"clear", "-yes", "p"},
		{"reset", "-yes", "p", "train"},
		{"retry", "p", "train", "k0"},
		{"drop", "-yes", "p", "train", "k1"},
		{"capacity", "-rows", "10", "p"},
	} {
		r := runTQ(t, u, args...)
		if r.code != 1 || !strings.Contains(r.stderr, pid) || !strings.Contains(r.stderr, host) || !strings.Contains(r.stderr, "in use") {
			t.Errorf("%v on the held directory: exit %d, stderr %q; want 1 and the holder named", args, r.code, r.stderr)
		}
	}
	// Nothing changed.
	r = runTQ(t, u, "-json", "status", "p")
	st = statusJSON{}
	if json.Unmarshal([]byte(r.stdout), &st) != nil || st.Rows != 3 || st.Tasks["train"].Acked != 1 {
		t.Errorf("status after the refused writes: %s", r.stdout)
	}
}
