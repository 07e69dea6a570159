//go:build linux

package grpo

import (
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

// serveVictim names the tq serve process, as a process of a run and as
// restartRun's victim.
const serveVictim = "tq-serve"

// serveProc is a "tq serve" process and the address it listens at.
type serveProc struct {
	*proc
	addr string
}

// servingLine is what tq serve writes once it serves, with its address.
var servingLine = regexp.MustCompile(`tq serve: serving .* on (\S+) \(pid \d+\)`)

// startServe starts "bin serve -engine engine -listen listen" (listen may
// have port 0) and returns once it says it serves, within 20 s; it is
// killed when t ends.
func startServe(t *testing.T, bin, engine, listen string) *serveProc {
	t.Helper()
	p := startProc(t, serveVictim, bin, []string{"serve", "-engine", engine, "-listen", listen})
	deadline := time.After(20 * time.Second)
	for {
		if m := servingLine.FindStringSubmatch(p.out.String()); m != nil {
			return &serveProc{p, m[1]}
		}
		select {
		case <-p.exited:
			if m := servingLine.FindStringSubmatch(p.out.String()); m != nil {
				return &serveProc{p, m[1]}
			}
			t.Fatalf("tq serve %s exited before serving (%v):\n%s", listen, p.err, p.out.String())
		case <-deadline:
			t.Fatalf("tq serve %s did not say it serves within 20 s:\n%s", listen, p.out.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestProcessesOverServeCommand is TestProcessesOverServer with the server
// a process of the tq command ("tq serve -engine redis://…?prefix=…
// -listen 127.0.0.1:0", as its users run it) on a private redis-server:
// the roles' processes on tq://ADDR complete every step, both ranks saw
// the same steps, each step trained a whole round, and the reward rose.
// The server served the engine it was given (the run's row, finished, is
// in the Redis under its prefix), served throughout, and exits 0 on
// SIGTERM once the run is over.
func TestProcessesOverServeCommand(t *testing.T) {
	srv := redistest.Start(t) // skips without redis-server, unless TQ_REQUIRE_REDIS=1
	engine := srv.URL() + "?prefix=grposervecmd"
	server := startServe(t, buildTQ(t), engine, "127.0.0.1:0")
	runProcesses(t, "tq://"+server.addr)
	select {
	case <-server.exited:
		t.Fatalf("tq serve exited during the run (%v):\n%s", server.err, server.out.String())
	default:
	}
	if t.Failed() {
		return
	}

	c, err := tq.Open(t.Context(), engine)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if m, err := c.List(t.Context(), RunPartition); err != nil || len(m.Rows) != 1 || m.Rows[0].Tag[tagFinished] != true {
		t.Errorf("the run's row in the served engine: %+v, %v; want one, finished", m, err)
	}

	if err := server.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-server.exited:
		if server.err != nil {
			t.Errorf("tq serve after SIGTERM: %v, want exit status 0:\n%s", server.err, server.out.String())
		}
	case <-time.After(15 * time.Second):
		t.Errorf("tq serve did not exit within 15 s of SIGTERM:\n%s", server.out.String())
	}
}

// TestRestartServeCommand is TestRestartEachRole's run with the roles'
// processes on tq://ADDR, a tq serve process of the tq command on a
// private redis-server, and the tq serve process the one killed (SIGKILL)
// mid-run and started again on the same address and engine: the roles
// carry on by themselves, and the run finishes within the bound, every
// step's reward and the final policy as without the fault.
func TestRestartServeCommand(t *testing.T) {
	redistest.Available(t)
	bin, tqBin := buildCommand(t), buildTQ(t)
	cfg := restartConfig()
	want := faultFree(t, cfg)
	start := time.Now()
	restartRun(t, bin, tqBin, cfg, want, serveVictim)
	t.Logf("tq serve killed and restarted: the run finished in %v", time.Since(start).Round(time.Millisecond))
}
