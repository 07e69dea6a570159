package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "github.com/tqgo/tqgo/tqserve" // "tq://": clients of a tq server
)

// A served target is a Redis server behind a tq server that runs as an
// OS process of its own (`tq serve`), so that its CPU time can be read
// from /proc: the bench's clients open tq://HOST:PORT, write and read
// cells on the Redis server themselves, and make their metadata calls to
// the tq server. The Redis limits (Streams, lists) run on the same Redis
// server, and the queue suite's consumer sweep sets the tq server's
// clients beside tq on the redis:// engine directly.

// privateServeURL is the -urls entry that means "a redis-server of this
// run's, served by a tq server of this run's"; servePrefix+URL serves the
// Redis server at URL instead.
const (
	privateServeURL = "tq+redis"
	servePrefix     = "tq+"
)

// serveProc is a running `tq serve`.
type serveProc struct {
	cmd    *exec.Cmd
	url    string // tq://127.0.0.1:PORT
	addr   string // 127.0.0.1:PORT: where it listens, and the address it gives as its own
	engine string // the redis:// URL it serves
	exited chan error
	dir    string // the binary's build directory, when built for this run
}

// pid is the server process's id.
func (p *serveProc) pid() int { return p.cmd.Process.Pid }

// stop sends SIGTERM (a graceful stop, which also completes a CPU
// profile), waits for the process to exit, and kills it after 30 s.
func (p *serveProc) stop() error {
	var err error
	if p.cmd.Process.Signal(syscall.SIGTERM) == nil {
		select {
		case err = <-p.exited:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			err = fmt.Errorf("tq serve (pid %d) did not stop within 30 s of SIGTERM, killed", p.pid())
			<-p.exited
		}
	}
	if p.dir != "" {
		err = errors.Join(err, os.RemoveAll(p.dir))
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return fmt.Errorf("tq serve: %w", err)
	}
	return err
}

// tqBinary builds cmd/tq into a new temporary directory (go build in the
// workspace of the working directory) unless bin names one, and returns
// its path and the directory to remove ("" when bin was given).
func tqBinary(ctx context.Context, bin string) (path, dir string, err error) {
	if bin != "" {
		return bin, "", nil
	}
	dir, err = os.MkdirTemp("", "tqbench-serve-")
	if err != nil {
		return "", "", err
	}
	path = filepath.Join(dir, "tq")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", path, "github.com/tqgo/tqgo/cmd/tq")
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return "", "", fmt.Errorf("building tq (go build github.com/tqgo/tqgo/cmd/tq, which needs the workspace: run from the repository; or pass -serve-bin): %w\n%s", err, out)
	}
	return path, dir, nil
}

// startServe runs `tq serve -engine engine -listen 127.0.0.1:PORT` (with
// -cpuprofile profile when set) on a free port and returns once it
// serves.
func startServe(ctx context.Context, bin, engine, profile string) (*serveProc, error) {
	path, dir, err := tqBinary(ctx, bin)
	if err != nil {
		return nil, err
	}
	p, err := startServePath(ctx, path, engine, profile)
	if err != nil {
		if dir != "" {
			_ = os.RemoveAll(dir)
		}
		return nil, err
	}
	p.dir = dir
	return p, nil
}

// startServePath runs the tq binary at path as startServe does, with the
// flags of extra after its own: a free port is picked before the server
// binds it, so a start that lost the port to another process is tried
// again (five times in all).
func startServePath(ctx context.Context, path, engine, profile string, extra ...string) (*serveProc, error) {
	for attempt := 0; ; attempt++ {
		p, err := startServeOnce(ctx, path, engine, profile, extra)
		if err == nil || attempt == 4 || ctx.Err() != nil {
			return p, err
		}
	}
}

func startServeOnce(ctx context.Context, path, engine, profile string, extra []string) (*serveProc, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		return nil, err
	}
	args := []string{"serve", "-engine", engine, "-listen", addr}
	if profile != "" {
		args = append(args, "-cpuprofile", profile)
	}
	args = append(args, extra...)
	cmd := exec.Command(path, args...)
	// The server dies with the bench, whatever ends it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("tq serve: %w", err)
	}
	p := &serveProc{cmd: cmd, url: "tq://" + addr, addr: addr, engine: engine, exited: make(chan error, 1)}
	serving := make(chan struct{})
	var said strings.Builder // what it wrote before serving, for an error
	go func() {
		sc := bufio.NewScanner(stderr)
		up := false
		for sc.Scan() {
			if !up {
				said.WriteString(sc.Text() + "\n")
				if strings.Contains(sc.Text(), "tq serve: serving") {
					up = true
					close(serving)
				}
			}
		}
		p.exited <- cmd.Wait()
	}()
	select {
	case <-serving:
		return p, nil
	case err := <-p.exited:
		return nil, fmt.Errorf("tq serve exited before serving (%v): %s", err, strings.TrimSpace(said.String()))
	case <-time.After(60 * time.Second):
	case <-ctx.Done():
	}
	_ = cmd.Process.Kill()
	<-p.exited
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("tq serve did not serve within 60 s")
}

// clockTicks is the unit of /proc/PID/stat's times (USER_HZ, 100 on
// every Linux ABI).
const clockTicks = 100

// procCPU is the user + system CPU seconds process pid has used (0 for
// this process).
func procCPU(pid int) (float64, error) {
	name := "/proc/self/stat"
	if pid != 0 {
		name = "/proc/" + strconv.Itoa(pid) + "/stat"
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return 0, err
	}
	// pid (comm) state ppid ...: comm may hold spaces, so count from
	// its closing parenthesis; utime and stime are fields 14 and 15.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("%s: no command name", name)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("%s: %d fields", name, len(f))
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return (ut + st) / clockTicks, nil
}
