package redis_test

import (
	"errors"
	"github.com/tqgo/tqgo/internal/childproc"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

// helperEnv carries the queue URL to the helper process; its presence is
// what makes TestHelperProcess act.
const helperEnv = "TQ_REDIS_HELPER_URL"

// TestTwoProcesses shares one queue between this process and a child
// process with its own client: the child reads what the parent wrote, adds
// a column, and the parent reads it.
func TestTwoProcesses(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	url := srv.URL() + "?prefix=shared"
	c := openTQ(t, url)
	keys := keyRange("s", 20)
	if err := c.BatchPut(ctx, "rollout", keys, rollout(keys, 7), nil); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	childproc.Tie(cmd)
	cmd.Env = append(os.Environ(), helperEnv+"="+url)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("helper process: %v\n%s", err, out)
	}
	b, err := c.BatchGet(ctx, "rollout", keys, "rewards")
	if err != nil {
		t.Fatalf("reading the child's column: %v", err)
	}
	got, _ := tq.As[float32](b["rewards"])
	want := make([]float32, len(keys))
	for i := range want {
		want[i] = float32(i) / 2
	}
	if !slices.Equal(got, want) {
		t.Errorf("rewards from the child %v, want %v", got, want)
	}
	m, err := c.List(ctx, "rollout")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range m.Rows {
		if r.Tag["by"] != "child" || r.Tag["pid"] == int64(os.Getpid()) {
			t.Errorf("row %q tag %v, want the child's", r.Key, r.Tag)
		}
	}
}

// TestHelperProcess is the child of TestTwoProcesses; run directly it does
// nothing.
func TestHelperProcess(t *testing.T) {
	url := os.Getenv(helperEnv)
	if url == "" {
		t.Skip("helper process for TestTwoProcesses")
	}
	ctx := t.Context()
	c := openTQ(t, url)
	keys := keyRange("s", 20)
	b, err := c.BatchGet(ctx, "rollout", keys)
	if err != nil {
		t.Fatal(err)
	}
	all := make([]int, len(keys))
	for i := range all {
		all[i] = i
	}
	checkRollout(t, b, keys, 7, all)
	rewards := make([]float32, len(keys))
	tags := make([]tq.Tag, len(keys))
	for i := range rewards {
		rewards[i] = float32(i) / 2
		tags[i] = tq.Tag{"by": "child", "pid": int64(os.Getpid())}
	}
	if err := c.BatchPut(ctx, "rollout", keys, tq.Batch{"rewards": tq.Stacked(rewards)}, tags); err != nil {
		t.Fatal(err)
	}
	if _, err := c.BatchGet(ctx, "rollout", []string{"nope"}); !errors.Is(err, tq.ErrNotFound) {
		t.Fatal(err)
	}
}
