package yuanrong_test

import (
	"errors"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/yuanrong"
	"github.com/tqgo/tqgo/yuanrong/yuanrongtest"
)

func TestLocalConformance(t *testing.T) {
	yuanrongtest.Run(t, func(t *testing.T) yuanrong.DataSystem {
		l := yuanrong.NewLocal()
		t.Cleanup(func() { _ = l.Close() })
		return l
	})
}

func create(t *testing.T, ds yuanrong.DataSystem, keys []string, vals ...string) []yuanrong.Buffer {
	t.Helper()
	sizes := make([]int, len(vals))
	for i, v := range vals {
		sizes[i] = len(v)
	}
	bufs, err := ds.MCreate(t.Context(), keys, sizes)
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range bufs {
		copy(b.Data(), vals[i])
	}
	return bufs
}

func mget(t *testing.T, ds yuanrong.DataSystem, keys ...string) [][]byte {
	t.Helper()
	got, err := ds.MGet(t.Context(), keys)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// Pending counts buffers created and neither published nor released.
func TestLocalPending(t *testing.T) {
	ds := yuanrong.NewLocal()
	defer ds.Close()
	if err := ds.MPublish(t.Context(), create(t, ds, []string{"k"}, "old")); err != nil {
		t.Fatal(err)
	}
	bufs := create(t, ds, []string{"k", "free", "dropped"}, "new", "free", "x")
	if ds.Pending() != 3 || ds.Len() != 1 {
		t.Fatalf("pending %d len %d, want 3 1", ds.Pending(), ds.Len())
	}
	bufs[2].Release()
	if err := ds.MPublish(t.Context(), bufs[:2]); !errors.Is(err, yuanrong.ErrKeyExists) {
		t.Fatalf("publish over k: %v, want ErrKeyExists", err)
	}
	if ds.Pending() != 1 || ds.Len() != 2 {
		t.Fatalf("pending %d len %d after a publish refused for one key, want 1 2", ds.Pending(), ds.Len())
	}
	bufs[0].Release()
	bufs[0].Release()
	if ds.Pending() != 0 {
		t.Fatalf("pending %d after release", ds.Pending())
	}
}

// Local's errors also match the backends sentinels tq tests for.
func TestLocalErrorsMatchBackends(t *testing.T) {
	ds := yuanrong.NewLocal()
	if _, err := ds.MCreate(t.Context(), []string{"a"}, []int{-1}); !errors.Is(err, backends.ErrInvalid) {
		t.Errorf("negative size: %v, want backends.ErrInvalid", err)
	}
	_ = ds.Close()
	if _, err := ds.MGet(t.Context(), []string{"a"}); !errors.Is(err, backends.ErrClosed) {
		t.Errorf("after Close: %v, want backends.ErrClosed", err)
	}
}
