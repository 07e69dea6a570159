package file_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends/file"
	"github.com/tqgo/tqgo/tq"
)

// The child of TestKillAtEachCall: TQ_FILE_KILLAT_DIR names the
// directory, _N the call to die at (0: none; the child then prints every
// call's kind), _SYNC the policy.
const (
	killAtDirEnv  = "TQ_FILE_KILLAT_DIR"
	killAtNEnv    = "TQ_FILE_KILLAT_N"
	killAtSyncEnv = "TQ_FILE_KILLAT_SYNC"
	killAtAllEnv  = "TQ_FILE_KILLAT_ALL" // 1: kill at every call, not a sample of the writes and fsyncs
)

// TestKillAtEachCallChild runs a short workload of puts, claims, acks and
// clears with checkpoints, printing each only once it returned nil, and
// dies by SIGKILL at its N-th file-system call that changes a file.
func TestKillAtEachCallChild(t *testing.T) {
	dir := os.Getenv(killAtDirEnv)
	if dir == "" {
		t.Skip("the child of TestKillAtEachCall")
	}
	n, _ := strconv.Atoi(os.Getenv(killAtNEnv))
	rec := file.Record(n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := tq.Open(ctx, "file://"+dir+"?sync="+os.Getenv(killAtSyncEnv)+"&checkpoint=1KiB")
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	task, err := c.Task("p", "train", killFields, tq.LeaseFor(time.Hour))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	var acked []string
	for i := range 100 {
		keys := []string{fmt.Sprintf("r%03d-0", i), fmt.Sprintf("r%03d-1", i)}
		if err := c.BatchPut(ctx, "p", keys, killBatch(keys), nil); err == nil {
			fmt.Println("put", strings.Join(keys, " "))
		}
		l, err := task.Claim(ctx, 2)
		if err != nil || l.Len() == 0 {
			continue
		}
		if err := l.Ack(ctx); err != nil {
			continue
		}
		fmt.Println("ack", strings.Join(l.Keys(), " "))
		// Rows kept for the first half, then cleared: segments long, then
		// short, so that a segment in a recycled file ends before the
		// file's former frames when the next one begins.
		acked = append(acked, l.Keys()...)
		if i >= 50 && i%8 != 0 {
			if err := c.Clear(ctx, "p", acked); err == nil {
				fmt.Println("clear", strings.Join(acked, " "))
			}
			acked = acked[:0]
		}
	}
	if err := c.Close(); err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	if n == 0 {
		fmt.Println("calls", strings.Join(rec.CallKinds(), " "))
	}
}

// Whatever file-system call a kill -9 interrupts, the directory reopens
// with every acknowledged write: the child is killed at each call its
// workload makes that changes a file (every open for writing, cut,
// rename, remove and directory fsync, the call before each, and a sample
// of the writes and fsyncs of batches; all of them with
// TQ_FILE_KILLAT_ALL=1), on a fresh directory each time, and then the
// directory opens, every row it said it put is there and whole unless it
// said it cleared it, no row it said it cleared is listed, and no row it
// said it acked can be claimed.
func TestKillAtEachCall(t *testing.T) {
	t.Parallel() // its children run in directories of their own
	if os.Getenv(killAtDirEnv) != "" {
		t.Skip("in the child")
	}
	if testing.Short() {
		t.Skip("-short")
	}
	total := 0
	for _, policy := range []string{"always", "everysec", "never"} {
		out := runKillAt(t, t.TempDir(), policy, 0)
		var kinds []string
		for _, l := range strings.Split(out, "\n") {
			if rest, ok := strings.CutPrefix(l, "calls "); ok {
				kinds = strings.Fields(rest)
			}
		}
		if len(kinds) == 0 {
			t.Fatalf("sync=%s: the child listed no calls: %s", policy, out)
		}
		var ns []int
		for i := range kinds {
			n := i + 1
			// Every call but the writes and fsyncs of batches, and the call
			// before each of those (a batch's write or fsync just before a
			// segment changes hands).
			near := false
			for j := i; j <= min(i+1, len(kinds)-1); j++ {
				near = near || (kinds[j] != "write" && kinds[j] != "fsync")
			}
			if os.Getenv(killAtAllEnv) == "1" || near || n%50 == 0 {
				ns = append(ns, n)
			}
		}
		for _, n := range ns {
			dir := t.TempDir()
			out := runKillAt(t, dir, policy, n)
			if err := checkKilled(dir, out); err != nil {
				t.Errorf("sync=%s, killed at call %d of %d (%s): %v", policy, n, len(kinds), kinds[n-1], err)
			}
		}
		t.Logf("sync=%s: %d calls, killed at %d of them", policy, len(kinds), len(ns))
		total += len(ns)
	}
	t.Logf("%d kills, each at a file-system call", total)
}

// runKillAt runs the child on dir, killed at call n (0: never), and
// returns what it printed.
func runKillAt(t *testing.T, dir, policy string, n int) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillAtEachCallChild$")
	cmd.Env = append(os.Environ(), killAtDirEnv+"="+dir, killAtNEnv+"="+strconv.Itoa(n), killAtSyncEnv+"="+policy)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case n == 0 && err != nil:
		t.Fatalf("sync=%s: the child failed: %v: %s", policy, err, out.String())
	case n > 0 && err == nil:
		// The calls of a run vary a little (the syncer's and a
		// checkpoint's run beside the writes): this one made fewer.
	case n > 0 && (!errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL):
		t.Fatalf("sync=%s: the child to kill at call %d ended with %v: %s", policy, n, err, out.String())
	}
	return out.String()
}

// checkKilled reopens dir and holds it to what the child printed.
func checkKilled(dir, out string) error {
	puts, acks, clears := map[string]bool{}, map[string]bool{}, map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		verb, rest, _ := strings.Cut(sc.Text(), " ")
		m := map[string]map[string]bool{"put": puts, "ack": acks, "clear": clears}[verb]
		for _, k := range strings.Fields(rest) {
			if m != nil {
				m[k] = true
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := tq.Open(ctx, "file://"+dir)
	if err != nil {
		return fmt.Errorf("reopen: %w", err)
	}
	defer c.Close()
	meta, err := c.List(ctx, "p")
	if err != nil {
		return err
	}
	listed := meta.Keys()
	for k := range puts {
		if in := slices.Contains(listed, k); !in && !acks[k] {
			return fmt.Errorf("row %s, put, is gone", k)
		}
	}
	for k := range clears {
		if slices.Contains(listed, k) {
			return fmt.Errorf("row %s, cleared, is listed", k)
		}
	}
	if len(listed) > 0 {
		b, err := c.BatchGet(ctx, "p", listed)
		if err != nil {
			return fmt.Errorf("reading the rows listed: %w", err)
		}
		if err := rowsWhole(listed, b); err != nil {
			return err
		}
	}
	task, err := c.Task("p", "train", killFields, tq.LeaseFor(time.Hour))
	if err != nil {
		return err
	}
	l, err := task.Claim(ctx, 1000)
	if err != nil {
		return err
	}
	for _, k := range l.Keys() {
		if acks[k] {
			return fmt.Errorf("row %s, acked, claimed again", k)
		}
	}
	return nil
}
