package file_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/file"
	"github.com/tqgo/tqgo/internal/childproc"
	"github.com/tqgo/tqgo/tq"
)

// viewDirEnv names the directory TestViewChild holds.
const viewDirEnv = "TQ_FILE_VIEW_DIR"

// TestViewChild is the child of TestViewWhileInUse: it opens the
// directory, puts rows "k0".."k9" in partition "p", claims four under
// task "train" and acks two of them, prints "ready", then keeps
// writing (puts and clears in partition "busy", enough for checkpoints)
// until its stdin closes.
func TestViewChild(t *testing.T) {
	dir := os.Getenv(viewDirEnv)
	if dir == "" {
		t.Skip("the child of TestViewWhileInUse")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // never outlives a lost parent long
	defer cancel()
	fail := func(err error) {
		fmt.Println("error", err)
		os.Exit(1)
	}
	c, err := tq.Open(ctx, "file://"+dir+"?sync=never&checkpoint=64KiB", tq.Quiet())
	if err != nil {
		fail(err)
	}
	keys := make([]string, 10)
	vals := make([]int64, 10)
	for i := range keys {
		keys[i], vals[i] = fmt.Sprintf("k%d", i), int64(i)
	}
	if err := c.BatchPut(ctx, "p", keys, tq.Batch{"a": tq.Stacked(vals, 10, 1)}, nil); err != nil {
		fail(err)
	}
	task, err := c.Task("p", "train", []string{"a"}, tq.LeaseFor(time.Hour))
	if err != nil {
		fail(err)
	}
	l, err := task.Claim(ctx, 2)
	if err != nil || l.Len() != 2 {
		fail(fmt.Errorf("claim: %v (%d rows)", err, l.Len()))
	}
	if err := l.Ack(ctx); err != nil {
		fail(err)
	}
	if l, err = task.Claim(ctx, 2); err != nil || l.Len() != 2 {
		fail(fmt.Errorf("claim: %v", err))
	}
	fmt.Println("ready")
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	big := make([]int64, 512)
	for i := 0; ctx.Err() == nil; i++ {
		k := fmt.Sprintf("b%d", i)
		if err := c.Put(ctx, "busy", k, map[string]any{"v": big}, nil); err != nil && ctx.Err() == nil {
			fail(err)
		}
		if i%2 == 1 {
			_ = c.Clear(ctx, "busy", []string{fmt.Sprintf("b%d", i-1), k})
		}
	}
	os.Exit(0)
}

// startViewChild starts TestViewChild holding dir and waits for its
// "ready"; the child ends when the test does.
func startViewChild(t *testing.T, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestViewChild$", "-test.v=false")
	cmd.Env = append(os.Environ(), viewDirEnv+"="+dir)
	childproc.Tie(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if line := sc.Text(); line == "ready" {
			go func() { _, _ = io.Copy(io.Discard, out) }()
			return cmd
		} else if strings.HasPrefix(line, "error") {
			t.Fatalf("child: %s", line)
		}
	}
	t.Fatalf("child ended before it was ready: %v", sc.Err())
	return nil
}

// While another process holds a directory and writes to it, a second
// writer's Open fails naming the holder, and a read-only open sees the
// rows and consumption the holder committed before it, as often as it
// opens, with every write refused.
func TestViewWhileInUse(t *testing.T) {
	if os.Getenv(viewDirEnv) != "" {
		t.Skip("in the child")
	}
	dir := t.TempDir()
	started := time.Now().Truncate(time.Microsecond)
	child := startViewChild(t, dir)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	_, err := file.Open(ctx, dir, file.Options{})
	var le *file.LockedError
	if !errors.Is(err, file.ErrLocked) || !errors.As(err, &le) {
		t.Fatalf("a second writer's Open: %v, want a *LockedError matching ErrLocked", err)
	}
	host, _ := os.Hostname()
	if le.PID != child.Process.Pid || le.Host != host || le.Since.IsZero() {
		t.Fatalf("the refusal names pid %d on %q since %v, want pid %d on %q", le.PID, le.Host, le.Since, child.Process.Pid, host)
	}
	if msg := err.Error(); !strings.Contains(msg, "pid "+strconv.Itoa(child.Process.Pid)) || !strings.Contains(msg, host) || !strings.Contains(msg, "mode=ro") {
		t.Fatalf("the refusal %q does not name the holder and the way to look", msg)
	}

	retried := 0
	var last time.Time
	for i := range 15 {
		c, err := tq.Open(ctx, "file://"+dir+"?mode=ro")
		if err != nil {
			t.Fatalf("read-only open %d: %v", i, err)
		}
		rows, err := c.List(ctx, "p")
		if err != nil {
			t.Fatal(err)
		}
		if got := rows.Keys(); len(got) != 10 {
			t.Fatalf("open %d: the view lists %v, want k0..k9", i, got)
		}
		b, err := c.BatchGet(ctx, "p", []string{"k7"})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := b["a"]; !ok {
			t.Fatalf("open %d: k7 read without field a: %v", i, b)
		}
		st, err := c.Status(ctx, "p")
		if err != nil {
			t.Fatal(err)
		}
		ts := st.Tasks["train"]
		if st.Rows != 10 || ts.Acked != 2 || ts.Leased != 2 || ts.Ready != 6 {
			t.Fatalf("open %d: status rows %d, train %+v; want 10 rows, 2 acked, 2 leased, 6 ready", i, st.Rows, ts)
		}
		task, err := c.Task("p", "train", []string{"a"})
		if err != nil {
			t.Fatal(err)
		}
		if ts, err := task.Status(ctx); err != nil || ts.Acked != 2 || ts.Leased != 2 || ts.Ready != 6 {
			t.Fatalf("open %d: the task's status %+v, %v; want 2 acked, 2 leased, 6 ready", i, ts, err)
		}
		if dead, err := task.Dead(ctx); err != nil || len(dead) != 0 {
			t.Fatalf("open %d: the task's dead rows %v, %v", i, dead, err)
		}
		if _, err := task.Claim(ctx, 1); !errors.Is(err, file.ErrReadOnly) {
			t.Fatalf("open %d: a claim on the view: %v, want ErrReadOnly", i, err)
		}
		err = c.Put(ctx, "p", "new", map[string]any{"a": []int64{1}}, nil)
		if !errors.Is(err, file.ErrReadOnly) || !errors.Is(err, backends.ErrInvalid) {
			t.Fatalf("a put on the view: %v, want ErrReadOnly", err)
		}
		if err := c.Clear(ctx, "p", []string{"k0"}); !errors.Is(err, file.ErrReadOnly) {
			t.Fatalf("a clear on the view: %v, want ErrReadOnly", err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}

		eng, err := file.Open(ctx, dir, file.Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		v, ok := file.ViewOf(eng)
		// (Offset 0: a segment the child was starting as the view read.)
		if !ok || v.AsOf.IsZero() || v.AsOf.After(time.Now()) || v.Segment == "" || v.Offset < 0 {
			t.Fatalf("ViewOf: %+v %v", v, ok)
		}
		// As of a record the child wrote, and never older than an
		// earlier view: the child writes on.
		if v.AsOf.Before(started) || v.AsOf.Before(last) {
			t.Fatalf("open %d: the view is as of %v; the child started at %v, the view before was as of %v", i, v.AsOf, started, last)
		}
		last = v.AsOf
		if v.Tries > 1 {
			retried++
		}
		if err := eng.Data.Write(ctx, []backends.Cell{{Key: "x", Body: []byte("y")}}); !errors.Is(err, file.ErrReadOnly) {
			t.Fatalf("a Store.Write on the view: %v", err)
		}
		_ = eng.Log.Close()
		_ = eng.Data.Close()
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%d of 15 views read the directory again after a checkpoint moved its files", retried)
	if ckpts := countCheckpoints(t, dir); ckpts == 0 {
		t.Error("the child wrote no checkpoint: the views were not read across one")
	}
}

func countCheckpoints(t *testing.T, dir string) int {
	n := 0
	for _, name := range file.DirNames(t, dir) {
		var seq uint64
		if file.ScanName(name, "checkpoint-%016x.ckpt", &seq) {
			n++
		}
	}
	return n
}

// fileState is a directory's names, sizes, modes, times and contents.
func fileState(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		sum := ""
		if !d.IsDir() {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sum = fmt.Sprintf("%x", sha256.Sum256(b))
		}
		m[path] = fmt.Sprintf("%d %v %v %s", info.Size(), info.Mode(), info.ModTime().UnixNano(), sum)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A read-only open changes nothing in the directory: not a torn tail
// (which a writer's Open cuts), not a checkpoint's leftover temporary
// file nor the segments a checkpoint replaced (which it removes).
func TestViewChangesNothing(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	c, err := tq.Open(ctx, "file://"+dir+"?checkpoint=16KiB")
	if err != nil {
		t.Fatal(err)
	}
	big := make([]int64, 1024)
	for i := range 40 {
		if err := c.Put(ctx, "p", fmt.Sprintf("k%d", i), map[string]any{"v": big}, nil); err != nil {
			t.Fatal(err)
		}
		// Churn: the log outgrows the live data, and checkpoints come.
		for j := range 3 {
			if err := c.Put(ctx, "churn", fmt.Sprintf("c%d", j), map[string]any{"v": big}, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Clear(ctx, "churn", []string{"c0", "c1", "c2"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if countCheckpoints(t, dir) == 0 {
		t.Fatal("no checkpoint written")
	}
	names := file.DirNames(t, dir)
	var segs []string
	for _, n := range names {
		var seq uint64
		if file.ScanName(n, "wal-%016x.log", &seq) {
			segs = append(segs, n)
		}
	}
	slices.Sort(segs)
	// A torn tail, a checkpoint's leftover, and a stale segment before
	// the checkpoint.
	f, err := os.OpenFile(filepath.Join(dir, segs[len(segs)-1]), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte{200, 0, 0, 0, 1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	for _, name := range []string{"checkpoint.tmp", "wal-0000000000000000.log"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("left"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Times a rewrite would change.
	old := time.Now().Add(-time.Hour)
	for name := range fileState(t, dir) {
		_ = os.Chtimes(name, old, old)
	}
	before := fileState(t, dir)

	for range 2 {
		c, err := tq.Open(ctx, "file://"+dir+"?mode=ro")
		if err != nil {
			t.Fatal(err)
		}
		rows, err := c.List(ctx, "p")
		if err != nil || len(rows.Keys()) != 40 {
			t.Fatalf("the view lists %d rows (%v), want 40", len(rows.Keys()), err)
		}
		if err := c.Put(ctx, "p", "x", map[string]any{"v": big}, nil); !errors.Is(err, file.ErrReadOnly) {
			t.Fatalf("a put on the view: %v", err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	after := fileState(t, dir)
	for name, was := range before {
		if after[name] != was {
			t.Errorf("%s: %s before a read-only open, %s after", name, was, after[name])
		}
	}
	for name := range after {
		if _, ok := before[name]; !ok {
			t.Errorf("%s created by a read-only open", name)
		}
	}
}

// mode= takes rw or ro, once.
func TestParseURLMode(t *testing.T) {
	for raw, want := range map[string]bool{"file:///d?mode=ro": true, "file:///d?mode=rw": false, "file:///d": false} {
		u, _ := url.Parse(raw)
		_, o, err := file.ParseURL(u)
		if err != nil || o.ReadOnly != want {
			t.Errorf("%s: ReadOnly %v, %v; want %v", raw, o.ReadOnly, err, want)
		}
	}
	for _, raw := range []string{"file:///d?mode=r", "file:///d?mode=ro&mode=ro", "file:///d?mode="} {
		u, _ := url.Parse(raw)
		if _, _, err := file.ParseURL(u); !errors.Is(err, backends.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", raw, err)
		}
	}
	if _, err := file.Open(t.Context(), filepath.Join(t.TempDir(), "none"), file.Options{ReadOnly: true}); !errors.Is(err, backends.ErrInvalid) {
		t.Errorf("a read-only open of a missing directory: %v, want ErrInvalid", err)
	}
}
