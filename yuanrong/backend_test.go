package yuanrong_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest"
	"github.com/tqgo/tqgo/yuanrong"
)

func newBackend(t *testing.T, ds yuanrong.DataSystem, opts ...yuanrong.Option) *yuanrong.Backend {
	t.Helper()
	b, err := yuanrong.NewBackend(ds, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func TestBackendConformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backends.Backend {
		return newBackend(t, yuanrong.NewLocal())
	})
}

// Small key limits make every conformance batch of more than a few keys
// run in several rounds.
func TestBackendConformanceSmallLimits(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backends.Backend {
		return newBackend(t, yuanrong.NewLocal(), yuanrong.WithPutKeysLimit(7), yuanrong.WithGetClearKeysLimit(5))
	})
}

// A Staged whose publish fails in its 2nd of 3 rounds takes back what it
// published: nothing is visible, no buffer stays created, and it reports no
// tags.
func TestBackendStagedRollback(t *testing.T) {
	ctx := t.Context()
	local := yuanrong.NewLocal()
	ds := &countingDS{DataSystem: local, failPublish: 2}
	b := newBackend(t, ds, yuanrong.WithPutKeysLimit(4))
	keys := keysN("f", 10)
	st, err := b.Allocate(ctx, keys, make([]int, 10))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Publish(ctx); !errors.Is(err, errPublish) {
		t.Fatalf("publish: %v, want the injected fault", err)
	}
	if tags := st.(backends.TagReporter).Tags(); tags != nil {
		t.Errorf("tags %q after a failed publish", tags)
	}
	if err := st.Discard(ctx); err != nil {
		t.Fatal(err)
	}
	if _, publishes, _, _ := ds.calls(); !slices.Equal(publishes, []int{4, 4}) {
		t.Fatalf("publishes %v, want the 2nd round to fail and the 3rd never to run", publishes)
	}
	if local.Len() != 0 || local.Pending() != 0 {
		t.Fatalf("datasystem holds %d keys and %d created buffers after rollback", local.Len(), local.Pending())
	}
	if err := st.Publish(ctx); !errors.Is(err, yuanrong.ErrInvalid) {
		t.Fatalf("publish again: %v, want ErrInvalid", err)
	}
}

// A Staged published on a context that ended before its first round
// changes nothing: old values stay, no buffer stays created.
func TestBackendStagedCanceledBeforePublish(t *testing.T) {
	local := yuanrong.NewLocal()
	b := newBackend(t, local, yuanrong.WithPutKeysLimit(4))
	c := newClient(t, local)
	if _, err := c.Put(t.Context(), []string{"9@f"}, []any{"old"}); err != nil {
		t.Fatal(err)
	}
	st, err := b.Allocate(t.Context(), keysN("f", 10), make([]int, 10))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := st.Publish(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("publish on a canceled context: %v, want context.Canceled", err)
	}
	if local.Len() != 1 || local.Pending() != 0 {
		t.Fatalf("datasystem holds %d keys and %d created buffers, want the old key only", local.Len(), local.Pending())
	}
	if got := mget(t, local, "9@f"); got[0] == nil {
		t.Error("the old value of a key of the canceled put is gone")
	}
}

// Allocate checks everything before creating anything.
func TestBackendAllocateValidates(t *testing.T) {
	ctx := t.Context()
	ds := &countingDS{DataSystem: yuanrong.NewLocal()}
	b := newBackend(t, ds)
	for name, call := range map[string]func() error{
		"negative size":  func() error { _, err := b.Allocate(ctx, []string{"a", "b"}, []int{1, -1}); return err },
		"duplicate key":  func() error { _, err := b.Allocate(ctx, []string{"a", "a"}, []int{1, 1}); return err },
		"mismatched len": func() error { _, err := b.Allocate(ctx, []string{"a"}, []int{1, 1}); return err },
		"unknown tag":    func() error { _, err := b.GetTagged(ctx, []string{"a"}, []string{"npu"}); return err },
	} {
		if err := call(); !errors.Is(err, backends.ErrInvalid) && !errors.Is(err, yuanrong.ErrUnknownStrategy) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if creates, _, gets, _ := ds.calls(); creates != nil || gets != nil {
		t.Fatalf("the datasystem was called: creates %v gets %v", creates, gets)
	}
}
