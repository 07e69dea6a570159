package main

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// A child process running the tq command as its main does (main's own
// signal handling included), not run alone as serveChild's does.
func init() {
	if os.Getenv("TQ_MAIN_CHILD") == "1" {
		os.Args = append([]string{"tq"}, strings.Split(os.Getenv("TQ_SERVE_ARGS"), "\x1f")...)
		main()
	}
}

// tq serve's second interrupt (Ctrl-C) kills at once, main's own signal
// handling included: the first starts the graceful stop, which a health
// Watch left open would hold for GracefulFor.
func TestServeSecondInterruptKills(t *testing.T) {
	addr := freePort(t)
	cmd, lines := childProc(t, "TQ_MAIN_CHILD", []string{"serve", "-engine", "memory://", "-listen", addr})
	waitLine(t, lines, "serving")
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	watch, err := healthpb.NewHealthClient(cc).Watch(t.Context(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	waitLine(t, lines, "stopping")
	time.Sleep(100 * time.Millisecond)
	sent := time.Now()
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for range lines {
		}
		done <- cmd.Wait()
	}()
	select {
	case err := <-done:
		if took := time.Since(sent); took > 2*time.Second {
			t.Fatalf("tq serve exited %v after the second interrupt (%v), want at once", took.Round(time.Millisecond), err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("tq serve did not exit within 15s of the second interrupt")
	}
}
