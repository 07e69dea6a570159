package redis_test

import (
	"bufio"
	"context"
	"fmt"
	"github.com/tqgo/tqgo/internal/childproc"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/internal/redistest"
)

// The environment of a consumer process (TestQueueConsumerHelper).
const (
	consumerURLEnv  = "TQ_REDIS_CONSUMER_URL"
	consumerModeEnv = "TQ_REDIS_CONSUMER_MODE" // "claim" or "hold"
)

// startConsumer starts a consumer process in mode on url; its stdout
// lines come on the channel returned (closed when it ends).
func startConsumer(t *testing.T, url, mode string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestQueueConsumerHelper$", "-test.count=1", "-test.timeout=60s")
	childproc.Tie(cmd)
	cmd.Env = append(os.Environ(), consumerURLEnv+"="+url, consumerModeEnv+"="+mode)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd, lines
}

// nextLine returns the next line starting with prefix, failing t after a
// generous wait or when the process ends first.
func nextLine(t *testing.T, lines <-chan string, prefix string) string {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the consumer ended before a line %q", prefix)
			}
			if rest, ok := strings.CutPrefix(l, prefix); ok {
				return rest
			}
		case <-timeout:
			t.Fatalf("no line %q from the consumer", prefix)
		}
	}
}

// parseLeased decodes "token i,i,i".
func parseLeased(t *testing.T, s string) (string, []uint64) {
	tok, list, _ := strings.Cut(s, " ")
	var out []uint64
	for _, f := range strings.Split(list, ",") {
		if f == "" {
			continue
		}
		i, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			t.Fatalf("leased line %q", s)
		}
		out = append(out, i)
	}
	return tok, out
}

// TestQueueProcesses: three processes wait on an empty task, are woken by
// a commit of this one, and claim its rows at once: every row is leased
// to exactly one of them (or, for rows left when they stop, to this
// process), before any ack.
func TestQueueProcesses(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	url := srv.URL() + "?prefix=qproc"
	m := metaOf(open(t, url))
	var procs [3]<-chan string
	for i := range procs {
		_, procs[i] = startConsumer(t, url, "claim")
	}
	for _, lines := range procs {
		nextLine(t, lines, "waiting")
	}
	idx := commitRows(t, m, "p", keysOf("r", 300)...)
	owner := map[uint64]string{}
	lease := func(tok string, rows []uint64) {
		for _, i := range rows {
			if prev, ok := owner[i]; ok {
				t.Fatalf("row %d leased to %s and to %s", i, prev, tok)
			}
			owner[i] = tok
		}
	}
	for _, lines := range procs {
		for {
			l, ok := <-lines
			if !ok {
				t.Fatal("a consumer ended without finishing")
			}
			if l == "done" {
				break
			}
			if rest, ok := strings.CutPrefix(l, "leased "); ok {
				lease(parseLeased(t, rest))
			}
		}
	}
	by := map[string]bool{}
	for _, tok := range owner {
		by[tok] = true
	}
	if len(by) < 3 {
		t.Logf("rows leased by %d claims", len(by))
	}
	rest, err := m.Claim(ctx, "p", metadata.ClaimRequest{Task: "t", Lease: time.Minute, Rows: len(idx), Min: 1}, all)
	if err != nil {
		t.Fatal(err)
	}
	lease(rest.Lease, claimIdx(rest))
	if len(owner) != len(idx) {
		t.Fatalf("%d rows leased, want %d", len(owner), len(idx))
	}
	for i, d := range states(t, m, "p", "t") {
		if d.State != metadata.Leased || d.Lease != owner[i] || d.Deliveries != 1 {
			t.Fatalf("row %d is %+v, the consumers say leased once to %s", i, d, owner[i])
		}
	}
}

// TestQueueKilledConsumer: a consumer process acks some of its rows and is
// killed (SIGKILL) holding the others; once their lease ends this process
// claims them, and in the end every row is acked exactly once, none lost.
func TestQueueKilledConsumer(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	url := srv.URL() + "?prefix=qkill"
	m := metaOf(open(t, url))
	idx := commitRows(t, m, "p", keysOf("r", 40)...)
	cmd, lines := startConsumer(t, url, "hold")
	ackTok, acked := parseLeased(t, nextLine(t, lines, "acked "))
	heldTok, held := parseLeased(t, nextLine(t, lines, "holding "))
	if ackTok != heldTok || len(acked) == 0 || len(held) == 0 {
		t.Fatalf("the consumer acked %v and holds %v", acked, held)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	acks := map[uint64]int{}
	for _, i := range acked {
		acks[i]++
	}
	redelivered := map[uint64]int{}
	deadline := time.Now().Add(60 * time.Second)
	for len(acks) < len(idx) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d rows acked", len(acks), len(idx))
		}
		c, err := m.Claim(ctx, "p", metadata.ClaimRequest{Task: "t", Lease: 10 * time.Second, Rows: 7, Min: 1}, all)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Rows) == 0 {
			if err := m.Wait(ctx, "p", c.Mark); err != nil {
				t.Fatal(err)
			}
			continue
		}
		for _, d := range c.Deliveries {
			redelivered[d.Index] = d.Deliveries
		}
		res, err := m.Settle(ctx, "p", metadata.SettleRequest{Task: "t", Op: metadata.Ack, Lease: c.Lease, Indexes: claimIdx(c)})
		if err != nil || len(res.Lost) != 0 {
			t.Fatalf("ack %+v %v", res, err)
		}
		for _, i := range claimIdx(c) {
			acks[i]++
		}
	}
	for i, n := range acks {
		if n != 1 {
			t.Fatalf("row %d acked %d times", i, n)
		}
	}
	for _, i := range held {
		if redelivered[i] != 2 {
			t.Fatalf("row %d the killed consumer held: delivered %d times, want 2", i, redelivered[i])
		}
	}
	for i, d := range states(t, m, "p", "t") {
		if d.State != metadata.Acked {
			t.Fatalf("row %d ends %+v", i, d)
		}
	}
}

// TestQueueConsumerHelper is a consumer process of TestQueueProcesses and
// TestQueueKilledConsumer; run directly it does nothing.
func TestQueueConsumerHelper(t *testing.T) {
	url := os.Getenv(consumerURLEnv)
	if url == "" {
		t.Skip("helper process for the consumer process tests")
	}
	ctx := context.Background()
	s, err := redis.OpenURL(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	m := metaOf(s)
	defer m.Close()
	defer s.Close()
	line := func(kind, tok string, rows []uint64) {
		var b strings.Builder
		for k, i := range rows {
			if k > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatUint(i, 10))
		}
		fmt.Printf("%s %s %s\n", kind, tok, b.String())
	}
	switch os.Getenv(consumerModeEnv) {
	case "claim":
		c, err := m.Claim(ctx, "p", metadata.ClaimRequest{Task: "t", Lease: time.Minute, Rows: 3, Min: 1}, all)
		if err != nil || len(c.Rows) != 0 {
			t.Fatalf("first claim %+v %v", c, err)
		}
		fmt.Println("waiting")
		if err := m.Wait(ctx, "p", c.Mark); err != nil {
			t.Fatal(err)
		}
		for {
			c, err := m.Claim(ctx, "p", metadata.ClaimRequest{Task: "t", Lease: time.Minute, Rows: 3, Min: 1}, all)
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Rows) == 0 {
				break
			}
			line("leased", c.Lease, claimIdx(c))
		}
		fmt.Println("done")
	case "hold":
		c, err := m.Claim(ctx, "p", metadata.ClaimRequest{Task: "t", Lease: 500 * time.Millisecond, Rows: 10, Min: 10}, all)
		if err != nil || len(c.Rows) != 10 {
			t.Fatalf("claim %+v %v", c, err)
		}
		rows := claimIdx(c)
		if _, err := m.Settle(ctx, "p", metadata.SettleRequest{Task: "t", Op: metadata.Ack, Lease: c.Lease, Indexes: rows[:4]}); err != nil {
			t.Fatal(err)
		}
		line("acked", c.Lease, rows[:4])
		line("holding", c.Lease, slices.Clone(rows[4:]))
		time.Sleep(time.Minute) // killed here
	}
}
