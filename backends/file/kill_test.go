package file_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/tqgo/tqgo/internal/childproc"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends/file"
	"github.com/tqgo/tqgo/tq"
)

// The kill test's child: TQ_FILE_KILL_DIR names the directory, _RUN the
// run (for unique keys), _SYNC the policy.
const (
	killDirEnv  = "TQ_FILE_KILL_DIR"
	killRunEnv  = "TQ_FILE_KILL_RUN"
	killSyncEnv = "TQ_FILE_KILL_SYNC"
)

var killFields = []string{"a", "b", "c"}

// rowOf is the row put under key: its values derive from the key, so a
// reader can check every byte.
func rowOf(key string) (a []int64, b []float32, c string) {
	h := fnv.New64a()
	h.Write([]byte(key))
	x := h.Sum64()
	a, b = make([]int64, 8), make([]float32, 16)
	for i := range a {
		a[i] = int64(x) + int64(i)*7919
	}
	for i := range b {
		b[i] = float32(x%100_000) + float32(i)/4
	}
	return a, b, key + "/c"
}

// TestKillChild is the child of TestKill: it puts rows and claims and
// acks them until it is killed, printing each put and each ack only once
// it returned nil.
func TestKillChild(t *testing.T) {
	dir := os.Getenv(killDirEnv)
	if dir == "" {
		t.Skip("the child of TestKill")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // never outlives a lost parent long
	defer cancel()
	c, err := tq.Open(ctx, "file://"+dir+"?sync="+os.Getenv(killSyncEnv)+"&checkpoint=256KiB")
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	task, err := c.Task("p", "train", killFields, tq.LeaseFor(time.Second))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	run := os.Getenv(killRunEnv)
	for i := 0; ctx.Err() == nil; i++ {
		const n = 4
		keys := make([]string, n)
		as, bs, cs := make([]int64, 0, n*8), make([]float32, 0, n*16), make([]string, n)
		for j := range keys {
			keys[j] = fmt.Sprintf("r%s-%05d-%d", run, i, j)
			a, b, c := rowOf(keys[j])
			as, bs, cs[j] = append(as, a...), append(bs, b...), c
		}
		batch := tq.Batch{"a": tq.Stacked(as, n, 8), "b": tq.Stacked(bs, n, 16), "c": tq.ValuesOf(cs)}
		if err := c.BatchPut(ctx, "p", keys, batch, nil); err == nil {
			fmt.Println("put", strings.Join(keys, " "))
		}
		time.Sleep(200 * time.Microsecond) // a few thousand rows a run: enough to kill anywhere, few to check
		l, err := task.Claim(ctx, 3)
		if err != nil || l.Len() == 0 {
			continue
		}
		if err := l.Ack(ctx); err != nil {
			continue
		}
		fmt.Println("ack", strings.Join(l.Keys(), " "))
		if i%4 != 0 {
			// Clear most of what was consumed, as a trainer does: the log
			// outgrows the live data, and checkpoints come. The rest stays
			// to show it was acked.
			if err := c.Clear(ctx, "p", l.Keys()); err == nil {
				fmt.Println("clear", strings.Join(l.Keys(), " "))
			}
		}
	}
}

// Every write acknowledged before a kill -9 is there after it: the child
// is killed at random moments, ten times, restarted on the same directory
// each time, and then every row it said it put is whole and exact, every
// row it said it acked is acked, no row is partial, and the queue goes
// on.
func TestKill(t *testing.T) {
	t.Parallel() // mostly waits for the moment of each kill, in a directory of its own
	if os.Getenv(killDirEnv) != "" {
		t.Skip("in the child")
	}
	if testing.Short() {
		t.Skip("-short")
	}
	dir := t.TempDir()
	puts, acks, clears := map[string]bool{}, map[string]bool{}, map[string]bool{}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	policies := []string{"always", "everysec", "never"}
	for run := range 10 {
		killChild(t, dir, run, policies[run%len(policies)], time.Duration(50+rng.IntN(1500))*time.Millisecond, puts, acks, clears)
	}
	t.Logf("%d rows put, %d acked and %d cleared by the children", len(puts), len(acks), len(clears))
	ckpts := 0
	for _, n := range file.DirNames(t, dir) {
		var seq uint64
		if file.ScanName(n, "checkpoint-%016x.ckpt", &seq) {
			ckpts++
		}
	}
	if ckpts == 0 {
		t.Error("the children wrote no checkpoint: the kills tested the log alone")
	}
	if len(puts) == 0 || len(acks) == 0 {
		t.Fatal("the children acknowledged nothing")
	}

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, err := tq.Open(ctx, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	meta, err := c.List(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	listed := meta.Keys()
	for k := range puts {
		// A row may be gone unseen only if the child cleared it just before
		// the kill, which it does only once it printed its ack.
		switch in := slices.Contains(listed, k); {
		case clears[k] && in:
			t.Fatalf("row %s, cleared before a kill, is there", k)
		case !in && !acks[k]:
			t.Fatalf("row %s, put before a kill, is gone", k)
		}
	}
	// Every row, printed or not (a put may return just as the kill comes),
	// is whole and exact.
	b, err := c.BatchGet(ctx, "p", listed)
	if err != nil {
		t.Fatalf("reading every row: %v", err)
	}
	checkRows(t, listed, b)

	task, err := c.Task("p", "train", killFields, tq.LeaseFor(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Claim the rest (the leases the children held ended as the directory
	// reopened) and ack it: a row acked before a kill must not come back.
	// (A row may be acked with no line printed: killed just after its
	// Ack.)
	again := map[string]bool{}
	for {
		st, err := task.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Ready+st.Leased+st.Waiting == 0 {
			break
		}
		l, err := task.Wait(ctx, len(listed))
		if err != nil {
			t.Fatalf("claiming the rest: %v (status %+v)", err, st)
		}
		for _, k := range l.Keys() {
			if acks[k] {
				t.Fatalf("row %s, acked before a kill, was delivered again", k)
			}
			if again[k] {
				t.Fatalf("row %s delivered twice after the kills", k)
			}
			again[k] = true
		}
		if err := l.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	st, err := task.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Acked != len(listed) || st.Ready+st.Leased+st.Waiting != 0 {
		t.Fatalf("after acking every row: %+v, want %d acked", st, len(listed))
	}
}

// killChild runs the child on dir and kills it with SIGKILL after it
// acknowledged its first put and after, recording what it printed.
func killChild(t *testing.T, dir string, run int, policy string, after time.Duration, puts, acks, clears map[string]bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillChild$")
	childproc.Tie(cmd)
	cmd.Env = append(os.Environ(), killDirEnv+"="+dir, killRunEnv+"="+strconv.Itoa(run), killSyncEnv+"="+policy)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		lines   []string
		started = make(chan struct{})
		done    = make(chan struct{})
	)
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		first := true
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, sc.Text())
			mu.Unlock()
			if first && strings.HasPrefix(sc.Text(), "put ") {
				close(started)
				first = false
			}
		}
	}()
	select {
	case <-started:
	case <-done:
		_ = cmd.Wait()
		t.Fatalf("run %d: the child ended before its first put: %q", run, lines)
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("run %d: no put in 20s", run)
	}
	if run == 0 {
		// The child holds the directory: this process may not open it.
		if _, err := file.Open(t.Context(), dir, file.Options{}); !errors.Is(err, file.ErrLocked) {
			t.Errorf("Open while the child runs: %v, want ErrLocked", err)
		}
	}
	time.Sleep(after)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("run %d: the child's output did not end after the kill", run)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("run %d: the child ended with %v, not by the kill: %q", run, err, lines)
	}
	n := 0
	for _, l := range lines {
		switch verb, rest, _ := strings.Cut(l, " "); verb {
		case "put":
			n++
			for _, k := range strings.Fields(rest) {
				puts[k] = true
			}
		case "ack":
			for _, k := range strings.Fields(rest) {
				acks[k] = true
			}
		case "clear":
			for _, k := range strings.Fields(rest) {
				clears[k] = true
			}
		case "error":
			t.Fatalf("run %d: the child failed: %s", run, rest)
		}
	}
	t.Logf("run %d (sync=%s): killed after %v, %d puts acknowledged", run, policy, after, n)
}

func checkRows(t *testing.T, keys []string, b tq.Batch) {
	t.Helper()
	as, err := tq.RowsAs[int64](b["a"])
	if err != nil {
		t.Fatal(err)
	}
	bs, err := tq.RowsAs[float32](b["b"])
	if err != nil {
		t.Fatal(err)
	}
	cs, err := tq.ValuesAs[string](b["c"])
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != len(keys) || len(bs) != len(keys) || len(cs) != len(keys) {
		t.Fatalf("read %d, %d, %d values of %d rows", len(as), len(bs), len(cs), len(keys))
	}
	for i, k := range keys {
		a, fb, c := rowOf(k)
		if !slices.Equal(as[i], a) || !slices.Equal(bs[i], fb) || cs[i] != c {
			t.Fatalf("row %s reads %v %v %q, was put as %v %v %q", k, as[i], bs[i], cs[i], a, fb, c)
		}
	}
}
