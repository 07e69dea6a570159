package tq_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/tq"
)

// A Wait whose partition makes no progress for its Stall bound returns a
// *StallError naming what it waits for: the field no row has.
func TestStallSaysWhatIsMissing(t *testing.T) {
	c := openMemory(t)
	putA(t, c, "p", []string{"r0", "r1", "r2"})
	tk, err := c.Task("p", "train", []string{"a", "adv"}, tq.Stall(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = tk.Wait(t.Context(), 2, tq.AtLeast(2))
	took := time.Since(start)
	var se *tq.StallError
	if !errors.As(err, &se) || !errors.Is(err, tq.ErrStalled) {
		t.Fatalf("Wait with no progress: %v, want a *StallError", err)
	}
	if took < 200*time.Millisecond || took > 5*time.Second {
		t.Errorf("stalled after %v, want after the 200ms bound, soon", took)
	}
	if se.Missing["adv"] != 3 || se.Missing["a"] != 0 || se.Status.Waiting != 3 || se.Want != 2 {
		t.Errorf("stall: %+v, want 3 rows waiting for adv", se)
	}
	if !strings.Contains(err.Error(), "adv: 3") {
		t.Errorf("the error does not name the missing field: %v", err)
	}
	// Nothing stays registered: a claim after it takes what is there.
	if err := c.Put(t.Context(), "p", "r0", map[string]any{"adv": float32(1)}, nil); err != nil {
		t.Fatal(err)
	}
	if l, err := tk.Claim(t.Context(), 2); err != nil || l.Len() != 1 {
		t.Fatalf("claim after the stall: %v, %v", l, err)
	}
}

// Progress (a lease extended, a field written) keeps a Wait waiting; a
// Wait whose peers are alive waits on past the bound; once they are gone
// it gives up, naming them.
func TestStallTellsSlowFromDead(t *testing.T) {
	data, meta := memory.New(), memory.NewMetaStore()
	c := newClient(t, data, meta)
	named := newClient(t, data, meta, tq.WithName("rollout-7"))
	pres, err := named.Announce(t.Context(), "rollout", 250*time.Millisecond) // gone after 750ms unseen: a loaded machine may starve the announcer for a while
	if err != nil {
		t.Fatal(err)
	}
	tk, err := c.Task("p", "train", []string{"a"}, tq.Stall(200*time.Millisecond, "rollout"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	_, err = tk.Wait(ctx, 1)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with its peer alive: %v, want it to wait on until its context ends", err)
	}
	ms, err := c.Members(t.Context(), "rollout")
	if err != nil || len(ms) != 1 || !ms[0].Alive || ms[0].Name != "rollout-7" {
		t.Fatalf("members: %+v, %v; want rollout-7 alive", ms, err)
	}
	if err := pres.Close(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = tk.Wait(t.Context(), 1)
	var se *tq.StallError
	if !errors.As(err, &se) || len(se.Gone) != 1 || se.Gone[0] != "rollout" {
		t.Fatalf("Wait with its peer gone: %v, want a *StallError naming rollout", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("gave up after %v", took)
	}
	if !strings.Contains(err.Error(), `"rollout-7" left`) {
		t.Errorf("the error does not say the peer left: %v", err)
	}
	ms, err = c.Members(t.Context(), "rollout")
	if err != nil || len(ms) != 1 || ms[0].Alive || !ms[0].Left {
		t.Fatalf("members after Close: %+v, %v; want rollout-7 left", ms, err)
	}
}

// A Wait whose partition keeps changing (rows arrive that the task does
// not take yet) is not stalled.
func TestStallProgressResets(t *testing.T) {
	c := openMemory(t)
	tk, err := c.Task("p", "train", []string{"a", "adv"}, tq.Stall(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	go func() {
		for i := 0; ctx.Err() == nil; i++ {
			_ = c.Put(ctx, "p", "r"+string(rune('a'+i%26))+time.Now().Format("150405.000"), map[string]any{"a": float32(1)}, nil)
			time.Sleep(100 * time.Millisecond)
		}
	}()
	if _, err := tk.Wait(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait while rows keep coming: %v, want it to wait until its context ends", err)
	}
}

func TestAnnounceChecks(t *testing.T) {
	c := openMemory(t)
	if _, err := c.Announce(t.Context(), "bad group!", 0); !errors.Is(err, tq.ErrInvalid) {
		t.Errorf("bad group: %v", err)
	}
	if _, err := c.Announce(t.Context(), "g", time.Millisecond); !errors.Is(err, tq.ErrInvalid) {
		t.Errorf("1ms interval: %v", err)
	}
	if _, err := c.Task("p", "t", []string{"a"}, tq.Stall(0)); !errors.Is(err, tq.ErrInvalid) {
		t.Errorf("Stall(0): %v", err)
	}
	if _, err := tq.Open(t.Context(), "memory://", tq.WithName("a|b")); !errors.Is(err, tq.ErrInvalid) {
		t.Errorf("a name with '|': %v", err)
	}
}
