package grpo

import (
	"bytes"
	"encoding/json"
	"errors"
	"github.com/tqgo/tqgo/internal/childproc"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tqgo/tqgo/internal/redistest"
)

// buildTQ builds the tq command, without -race, into a temp dir.
func buildTQ(t *testing.T) string { return buildBinary(t, "tq", "github.com/tqgo/tqgo/cmd/tq") }

// tqResult is one run of the tq command.
type tqResult struct {
	code           int
	stdout, stderr string
}

// runTQ runs the tq command bin with TQ_URL set to url.
func runTQ(t *testing.T, bin, url string, args ...string) tqResult {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), bin, args...)
	childproc.Tie(cmd)
	cmd.Env = append(os.Environ(), "TQ_URL="+url)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	r := tqResult{0, out.String(), errOut.String()}
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("tq %v: %v", args, err)
	}
	return r
}

// tqStatus is tq -json status's document.
type tqStatus struct {
	Partition string
	Rows      int
	Fields    map[string]int
	Tasks     map[string]struct {
		Ready, Waiting, Leased, Acked, Dead, Dropped int
		Exact                                        bool
	}
}

func tqStatusOf(t *testing.T, bin, url string, args ...string) tqStatus {
	t.Helper()
	r := runTQ(t, bin, url, append([]string{"-json", "status"}, args...)...)
	var doc tqStatus
	if err := json.Unmarshal([]byte(r.stdout), &doc); r.code != 0 || err != nil {
		t.Fatalf("status %v: %+v: %v", args, r, err)
	}
	return doc
}

// TestQueueCommandsOnGRPO runs the example (every stage, a few steps,
// Keep) on a private redis-server the tq command then inspects: the
// status of what the run left, a row's dump, a reset, and the status
// showing it.
func TestQueueCommandsOnGRPO(t *testing.T) {
	srv := redistest.Start(t)
	bin := buildTQ(t)
	url := srv.URL() + "?prefix=grpocli"
	cfg := DefaultConfig()
	cfg.URL, cfg.Steps, cfg.Prompts, cfg.Group, cfg.Length, cfg.Vocab = url, 3, 4, 2, 2, 3
	cfg.Keep, cfg.Quiet = true, true
	if _, err := Run(t.Context(), cfg, &strings.Builder{}); err != nil {
		t.Fatal(err)
	}
	r := runTQ(t, bin, url, "partitions")
	for _, p := range []string{GradsPartition, WeightsPartition} {
		if !strings.Contains(r.stdout, p+"\n") {
			t.Errorf("partitions lack %s:\n%s", p, r.stdout)
		}
	}
	// The samples partition holds a round the rollout made past the last
	// step only if it took the last version it trained on before the
	// trainer's final one (the example's timing): otherwise every sample
	// was trained and cleared, and the partition is gone.
	samples := strings.Contains(r.stdout, SamplesPartition+"\n")

	// The trainer's last policy version is all the weights partition
	// holds: the rollout took it (and stopped) and acked it.
	w := tqStatusOf(t, bin, url, WeightsPartition)
	if w.Rows != 1 || w.Fields["logits"] != 1 || w.Fields["done"] != 1 {
		t.Fatalf("weights: %+v, want one row with logits and done", w)
	}
	if ro := w.Tasks["rollout"]; ro.Acked != 1 || ro.Ready+ro.Leased+ro.Dead+ro.Dropped != 0 || ro.Exact {
		t.Fatalf("weights' rollout task: %+v, want 1 acked", ro)
	}
	// The table: the fields, then the tasks.
	r = runTQ(t, bin, url, "status", WeightsPartition)
	for _, want := range []string{`partition "grpo/weights": 1 rows`, "FIELD", "logits  1", "TASK", "ACKED", "rollout"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("status table lacks %q: %+v", want, r)
		}
	}
	// Every rank all-reduced the last epoch's gradients: both rows acked
	// by both ranks' tasks.
	g := tqStatusOf(t, bin, url, GradsPartition)
	for _, task := range []string{"allreduce-0", "allreduce-1"} {
		if g.Rows != 2 || g.Tasks[task].Acked != 2 {
			t.Errorf("grads: %d rows, %s %+v; want 2 rows acked", g.Rows, task, g.Tasks[task])
		}
	}
	// The samples the rollout made past the last step: every task's
	// states add up to the rows, and nothing was stale.
	if samples {
		smp := tqStatusOf(t, bin, url, SamplesPartition)
		for name, ts := range smp.Tasks {
			if n := ts.Ready + ts.Waiting + ts.Leased + ts.Acked + ts.Dead + ts.Dropped; n != smp.Rows {
				t.Errorf("samples' task %s: %+v adds up to %d of %d rows", name, ts, n, smp.Rows)
			}
		}
		if smp.Tasks["train"].Dropped != 0 {
			t.Errorf("train dropped %d rows", smp.Tasks["train"].Dropped)
		}
	} else if r := runTQ(t, bin, url, "status", SamplesPartition); r.code == 0 || !strings.Contains(r.stderr, "no partition") {
		t.Errorf("status of a partition partitions does not list: %+v", r)
	}

	r = runTQ(t, bin, url, "dump", "-n", "3", WeightsPartition, "v000003", "logits")
	if r.code != 0 || !strings.Contains(r.stdout, "logits  float64  [18]") || !strings.Contains(r.stdout, "(3 of 18)") {
		t.Fatalf("dump of the last version: %+v", r)
	}

	// Reset the rollout's consumption: the version is ready for it again.
	if r := runTQ(t, bin, url, "reset", WeightsPartition, "rollout"); r.code != 2 || !strings.Contains(r.stderr, "-yes") {
		t.Fatalf("reset without -yes: %+v", r)
	}
	r = runTQ(t, bin, url, "reset", "-yes", WeightsPartition, "rollout")
	if r.code != 0 || !strings.Contains(r.stdout, "every row ready again") {
		t.Fatalf("reset: %+v", r)
	}
	w = tqStatusOf(t, bin, url, "-task", "rollout", "-fields", "logits", WeightsPartition)
	if ro := w.Tasks["rollout"]; ro.Ready != 1 || ro.Acked != 0 || !ro.Exact {
		t.Fatalf("rollout after the reset: %+v, want 1 ready, counted exactly", ro)
	}
	// One key of another task: the rest of its consumption stays.
	r = runTQ(t, bin, url, "reset", "-yes", GradsPartition, "allreduce-0", "s0003-e01-r00")
	if r.code != 0 || !strings.Contains(r.stdout, "1 rows ready again") {
		t.Fatalf("reset of a key: %+v", r)
	}
	g = tqStatusOf(t, bin, url, GradsPartition)
	if a0, a1 := g.Tasks["allreduce-0"], g.Tasks["allreduce-1"]; a0.Acked != 1 || a0.Ready != 1 || a1.Acked != 2 {
		t.Errorf("after resetting one key of allreduce-0: %+v, %+v", a0, a1)
	}
	// A task that has not consumed yet is counted exactly too.
	w = tqStatusOf(t, bin, url, "-task", "critic", "-fields", "done", WeightsPartition)
	if cr := w.Tasks["critic"]; cr.Ready != 1 || !cr.Exact {
		t.Errorf("a task that has not consumed: %+v", cr)
	}
	// A field no row has is a mistake (it would count every row
	// Waiting): the error names the fields there are.
	r = runTQ(t, bin, url, "status", "-task", "critic", "-fields", "values", WeightsPartition)
	if r.code != 1 || !strings.Contains(r.stderr, `no field "values" in partition "grpo/weights" (fields: done, logits)`) {
		t.Errorf("status -fields with a field no row has: %+v", r)
	}
}

// buildBinary builds the command of package pkg as name, without -race,
// into a temp dir.
func buildBinary(t *testing.T, name, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	start := time.Now()
	out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	t.Logf("built %s in %v", pkg, time.Since(start).Round(time.Millisecond))
	return bin
}
