//go:build linux

package childproc_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tqgo/tqgo/internal/childproc"
)

const roleEnv = "CHILDPROC_TEST_ROLE"

// TestMain runs the launcher and the child this package's test starts:
// the launcher starts a child tied to it, prints its pid and sleeps; the
// child sleeps.
func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "launcher":
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), roleEnv+"=child")
		childproc.Tie(cmd)
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Println(cmd.Process.Pid)
		time.Sleep(time.Minute)
		os.Exit(0)
	case "child":
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// alive reports whether pid runs (a zombie, dead but not yet reaped by
// whoever inherited it, does not).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ...: the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// A launcher killed with SIGKILL takes the child it tied down with it.
func TestChildDiesWithKilledLauncher(t *testing.T) {
	launcher := exec.Command(os.Args[0])
	launcher.Env = append(os.Environ(), roleEnv+"=launcher")
	launcher.Stderr = os.Stderr
	out, err := launcher.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	childproc.Tie(launcher) // should this test die first
	if err := launcher.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = launcher.Process.Kill()
		_ = launcher.Wait()
		t.Fatalf("reading the child's pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(pid, syscall.SIGKILL) }() // should the test fail
	if !alive(pid) {
		t.Fatalf("the child %d is not running before its launcher was killed", pid)
	}
	if err := launcher.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = launcher.Wait()
	// The kernel signals the child as the launcher exits; reaping it may
	// take its new parent a moment, on a loaded machine longer.
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the child %d still runs 10 s after its launcher was killed", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
