// Package redisserver starts private redis-server processes (one server, or
// a small Cluster) on free loopback ports, for tests and benchmarks that
// must not touch any Redis already running on the machine.
//
// It does not import package testing, so benchmark programs can use it;
// tests use the wrappers in internal/redistest, which skip when Redis is not
// installed.
package redisserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/tqgo/tqgo/internal/childproc"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrNoBinary is returned when redis-server (or, for a Cluster, redis-cli)
// is neither on PATH nor in /usr/bin, /usr/sbin or /usr/local/bin.
var ErrNoBinary = errors.New("redisserver: redis binary not found")

// Options configure a server. The zero value is a plain server with no
// password.
type Options struct {
	// Password, when set, is required by the server (requirepass).
	Password string
	// Args are extra redis-server arguments, appended after the defaults
	// (so they win): e.g. []string{"--maxmemory", "64mb"}.
	Args []string
	// StartTimeout bounds how long Start waits for the server to answer
	// PING (default 10s; zero means the default).
	StartTimeout time.Duration
}

// Server is one private redis-server process. Its methods are safe for
// concurrent use (a test may Kill it from one goroutine while another
// writes through a client).
type Server struct {
	bin  string
	dir  string // temp dir: the server's --dir and log file; removed by Stop
	port int
	opts Options

	mu      sync.Mutex // guards proc and stopped
	proc    *process   // nil after Kill until Restart
	stopped bool
}

// process is a running redis-server; exited delivers its Wait result once.
type process struct {
	cmd    *exec.Cmd
	exited chan error
}

// Start starts a redis-server on a free loopback port, with no persistence
// (--save "" --appendonly no) and its files in a new temp dir, and returns
// once it answers PING. Stop it with Stop.
func Start(ctx context.Context, opts Options) (*Server, error) {
	bin, err := findBinary("redis-server")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "tq-redis-")
	if err != nil {
		return nil, fmt.Errorf("redisserver: %w", err)
	}
	s := &Server{bin: bin, dir: dir, opts: opts}
	// A free port may be taken by someone else between our probe and the
	// server's bind; try a few.
	for attempt := 0; ; attempt++ {
		if s.port, err = freePort(false); err == nil {
			if err = s.start(ctx); err == nil {
				return s, nil
			}
		}
		if attempt == 4 || ctx.Err() != nil || !errors.Is(err, errAddrInUse) {
			os.RemoveAll(dir)
			return nil, err
		}
	}
}

// Addr is "127.0.0.1:port".
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Port is the server's TCP port.
func (s *Server) Port() int { return s.port }

// URL is "redis://[:password@]127.0.0.1:port/0".
func (s *Server) URL() string {
	if s.opts.Password != "" {
		return "redis://:" + s.opts.Password + "@" + s.Addr() + "/0"
	}
	return "redis://" + s.Addr() + "/0"
}

// Dir is the server's working directory (its log is redis.log there).
func (s *Server) Dir() string { return s.dir }

// Kill sends SIGKILL and waits for the process to exit: the server dies
// mid-request, as a crashed host would. Restart brings it back (empty,
// unless Options.Args turn persistence on).
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.killLocked()
}

func (s *Server) killLocked() error {
	if s.proc == nil {
		return nil
	}
	_ = s.proc.cmd.Process.Kill()
	<-s.proc.exited // "signal: killed" is the expected outcome
	s.proc = nil
	return nil
}

// Restart starts the server again on the same port, after Kill (or kills it
// first), on the same directory. It has no data unless Options.Args turn
// persistence on (--appendonly yes): then it loads what it wrote there.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return errors.New("redisserver: restart of a stopped server")
	}
	_ = s.killLocked()
	s.mu.Unlock()
	// The port is ours, but a just-killed listener may take a moment to
	// release it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := s.start(ctx)
		if err == nil || !errors.Is(err, errAddrInUse) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop kills the server and removes its directory. It is idempotent.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil
	}
	s.stopped = true
	err := s.killLocked()
	return errors.Join(err, os.RemoveAll(s.dir))
}

var errAddrInUse = errors.New("redisserver: address in use")

// start launches the process on s.port and waits for PING.
func (s *Server) start(ctx context.Context, extra ...string) error {
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--logfile", filepath.Join(s.dir, "redis.log"),
		"--daemonize", "no",
	}
	if s.opts.Password != "" {
		args = append(args, "--requirepass", s.opts.Password)
	}
	args = append(args, extra...)
	args = append(args, s.opts.Args...)
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	childproc.Tie(cmd) // killed with the process that started it: a test binary killed by a timeout leaves no redis-server behind
	out, err := os.Create(filepath.Join(s.dir, "stdout.log"))
	if err != nil {
		return fmt.Errorf("redisserver: %w", err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	// The kernel sends Pdeathsig when the *thread* that forked the server
	// exits, and the Go runtime may retire idle threads: fork from a locked
	// thread that lives exactly as long as the server.
	started, exited := make(chan error, 1), make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("redisserver: start %s: %w", s.bin, err)
	}

	timeout := s.opts.StartTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if err := ping(ctx, s.Addr(), s.opts.Password); err == nil {
			break
		}
		select {
		case err := <-exited:
			log := s.log()
			if strings.Contains(log, "Address already in use") {
				return fmt.Errorf("%w: port %d", errAddrInUse, s.port)
			}
			return fmt.Errorf("redisserver: redis-server on port %d exited (%v): %s", s.port, err, lastLines(log, 5))
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("redisserver: redis-server on port %d did not answer PING: %w: %s", s.port, ctx.Err(), lastLines(s.log(), 5))
		case <-time.After(10 * time.Millisecond):
		}
	}
	s.mu.Lock()
	s.proc = &process{cmd: cmd, exited: exited}
	s.mu.Unlock()
	return nil
}

// log returns the server's log files.
func (s *Server) log() string {
	a, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	b, _ := os.ReadFile(filepath.Join(s.dir, "stdout.log"))
	return string(a) + string(b)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// findBinary looks name up on PATH, then in the usual system directories
// (sbin is often not on a user's PATH).
func findBinary(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin"} {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: %s (install redis-server and redis-tools)", ErrNoBinary, name)
}

// Available reports whether redis-server and redis-cli can be found.
func Available() error {
	if _, err := findBinary("redis-server"); err != nil {
		return err
	}
	_, err := findBinary("redis-cli")
	return err
}

// freePort returns a loopback port nobody listens on; with bus set, port
// + 10000 (a Cluster node's bus port) is free too.
func freePort(bus bool) (int, error) {
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("redisserver: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !bus {
			return port, nil
		}
		if port+10000 > 65535 {
			continue
		}
		l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		if err != nil {
			continue
		}
		l2.Close()
		return port, nil
	}
	return 0, errors.New("redisserver: no free port pair found")
}

// ping sends (AUTH and) PING on a fresh connection and wants PONG.
func ping(ctx context.Context, addr, password string) error {
	var args [][]string
	if password != "" {
		args = append(args, []string{"AUTH", password})
	}
	args = append(args, []string{"PING"})
	replies, err := Do(ctx, addr, args...)
	if err != nil {
		return err
	}
	if got := replies[len(replies)-1]; got != "PONG" {
		return fmt.Errorf("redisserver: PING answered %q", got)
	}
	return nil
}

// Do sends commands on one new connection to addr and returns each reply
// as text: simple strings, bulk strings and integers as they are, arrays
// joined by newlines. An error reply becomes an error. It is a minimal
// client for setting servers up (CLUSTER INFO, CONFIG SET, DEBUG SLEEP);
// tests talk to Redis through go-redis.
func Do(ctx context.Context, addr string, cmds ...[]string) ([]string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	} else {
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	}
	var b strings.Builder
	for _, c := range cmds {
		fmt.Fprintf(&b, "*%d\r\n", len(c))
		for _, a := range c {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return nil, err
	}
	r := bufio.NewReader(conn)
	out := make([]string, 0, len(cmds))
	for range cmds {
		s, err := readReply(r)
		if err != nil {
			return out, err
		}
		out = append(out, s)
	}
	return out, nil
}

func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("redisserver: empty reply line")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("redisserver: %s", line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", err
		}
		buf := make([]byte, n+2)
		if _, err := ioReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", err
		}
		parts := make([]string, 0, max(n, 0))
		for range n {
			s, err := readReply(r)
			if err != nil {
				return "", err
			}
			parts = append(parts, s)
		}
		return strings.Join(parts, "\n"), nil
	}
	return "", fmt.Errorf("redisserver: unexpected reply %q", line)
}

func ioReadFull(r *bufio.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
