package tq_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/tqgo/tqgo/tq"
)

// putLengths puts a row per length, keyed "r<i>", in group "g<i/group>",
// with its length in the tag "len".
func putLengths(t *testing.T, c *tq.Client, p string, group int, lengths ...int64) []string {
	t.Helper()
	keys := make([]string, len(lengths))
	tags := make([]tq.Tag, len(lengths))
	vals := make([]float32, len(lengths))
	for i, n := range lengths {
		keys[i] = fmt.Sprintf("r%02d", i)
		tags[i] = tq.Tag{"len": n, "uid": fmt.Sprintf("g%d", i/group)}
	}
	if err := c.BatchPut(t.Context(), p, keys, tq.Batch{"a": tq.Stacked(vals)}, tags); err != nil {
		t.Fatal(err)
	}
	return keys
}

// A token budget leases rows up to a total length, not a row count: the
// oldest first, the first one whatever its length, never more than n.
func TestTokenBudget(t *testing.T) {
	c := openMemory(t)
	keys := putLengths(t, c, "p", 1, 50, 5, 5, 5, 5, 5, 5)
	tk, err := c.Task("p", "train", []string{"a"}, tq.TokenBudget("len", 12))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range [][]string{keys[0:1], keys[1:3], keys[3:5], keys[5:6]} {
		n := 100
		if len(want) == 1 && want[0] == keys[5] {
			n = 1 // n still bounds the rows
		}
		l, err := tk.Claim(t.Context(), n)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(l.Keys(), want) {
			t.Errorf("claim of %d rows within 12 tokens: %q, want %q", n, l.Keys(), want)
		}
	}
	if _, err := c.Task("p", "x", []string{"a"}, tq.TokenBudget("", 3)); !errors.Is(err, tq.ErrInvalid) {
		t.Errorf("budget over no tag: %v", err)
	}
	if _, err := c.Task("p", "x", []string{"a"}, tq.TokenBudget("len", 0)); !errors.Is(err, tq.ErrInvalid) {
		t.Errorf("budget of 0: %v", err)
	}
}

// With groups, the budget counts whole groups; with ranks, the batch it
// chose is split between them.
func TestTokenBudgetGroupsAndRanks(t *testing.T) {
	c := openMemory(t)
	// Groups of 2: g0 = 4+4, g1 = 3+3, g2 = 1+1, g3 = 2+2.
	keys := putLengths(t, c, "p", 2, 4, 4, 3, 3, 1, 1, 2, 2)
	tk, err := c.Task("p", "adv", []string{"a"}, tq.WithGroups(tq.GroupTag("uid"), 2), tq.TokenBudget("len", 16))
	if err != nil {
		t.Fatal(err)
	}
	l, err := tk.Claim(t.Context(), 8)
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(slices.Values(l.Keys())); !slices.Equal(got, keys[0:6]) {
		t.Errorf("groups within 16 tokens: %q, want the first three groups (8+6+2) %q", got, keys[0:6])
	}

	r0, err := c.Task("p", "train", []string{"a"}, tq.Ranks(2, 0, "len"), tq.TokenBudget("len", 14))
	if err != nil {
		t.Fatal(err)
	}
	r1, err := c.Task("p", "train", []string{"a"}, tq.Ranks(2, 1, "len"), tq.TokenBudget("len", 14))
	if err != nil {
		t.Fatal(err)
	}
	l0, err := r0.Claim(t.Context(), 8)
	if err != nil {
		t.Fatal(err)
	}
	l1, err := r1.Claim(t.Context(), 8)
	if err != nil {
		t.Fatal(err)
	}
	both := slices.Sorted(slices.Values(append(l0.Keys(), l1.Keys()...)))
	if !slices.Equal(both, keys[0:4]) || l0.Len() != 2 || l1.Len() != 2 {
		t.Errorf("ranks' shares of a 14-token batch: %q and %q, want %q split 2 and 2", l0.Keys(), l1.Keys(), keys[0:4])
	}
}
