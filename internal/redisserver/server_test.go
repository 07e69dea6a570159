package redisserver

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// skipWithout skips when Redis is not installed, unless TQ_REQUIRE_REDIS=1.
// (internal/redistest does this for other packages; it imports this one.)
func skipWithout(t *testing.T) {
	t.Helper()
	if err := Available(); err != nil {
		if os.Getenv("TQ_REQUIRE_REDIS") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

func TestServerLifecycle(t *testing.T) {
	skipWithout(t)
	ctx := t.Context()
	s, err := Start(ctx, Options{Password: "sesame"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if !strings.HasPrefix(s.URL(), "redis://:sesame@127.0.0.1:") {
		t.Errorf("URL %q", s.URL())
	}
	if _, err := Do(ctx, s.Addr(), []string{"SET", "k", "v"}); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("SET without AUTH: %v, want NOAUTH", err)
	}
	r, err := Do(ctx, s.Addr(), []string{"AUTH", "sesame"}, []string{"SET", "k", "v"}, []string{"GET", "k"}, []string{"CONFIG", "GET", "save"})
	if err != nil || r[2] != "v" || r[3] != "save\n" {
		t.Fatalf("replies %q, %v", r, err)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := Do(ctx, s.Addr(), []string{"PING"}); err == nil {
		t.Fatal("PING after Kill succeeded")
	}
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	r, err = Do(ctx, s.Addr(), []string{"AUTH", "sesame"}, []string{"EXISTS", "k"})
	if err != nil || r[1] != "0" {
		t.Fatalf("after Restart: %q, %v (want an empty server)", r, err)
	}
	dir := s.Dir()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dir %s left after Stop: %v", dir, err)
	}
	if err := s.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func TestStartTimeout(t *testing.T) {
	skipWithout(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Nanosecond)
	defer cancel()
	time.Sleep(time.Millisecond)
	if _, err := Start(ctx, Options{}); err == nil {
		t.Fatal("Start with an expired context succeeded")
	}
}

func TestBadArgs(t *testing.T) {
	skipWithout(t)
	_, err := Start(t.Context(), Options{Args: []string{"--no-such-option", "1"}})
	if err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("Start with a bad option: %v", err)
	}
}

func TestCluster(t *testing.T) {
	skipWithout(t)
	ctx := t.Context()
	c, err := StartCluster(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	if len(c.Addrs()) != 3 || !strings.HasPrefix(c.URL(), "redis+cluster://127.0.0.1:") {
		t.Fatalf("addrs %q url %q", c.Addrs(), c.URL())
	}
	for _, a := range c.Addrs() {
		r, err := Do(ctx, a, []string{"CLUSTER", "INFO"})
		if err != nil || !strings.Contains(r[0], "cluster_known_nodes:3") {
			t.Errorf("%s: %q %v", a, r, err)
		}
	}
	if _, err := StartCluster(ctx, 2); err == nil {
		t.Error("a 2-node cluster started")
	}
}
