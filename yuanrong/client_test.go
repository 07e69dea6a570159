package yuanrong_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"go.uber.org/goleak"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/codec"
	"github.com/tqgo/tqgo/yuanrong"
)

func newClient(t *testing.T, ds yuanrong.DataSystem, opts ...yuanrong.Option) *yuanrong.Client {
	t.Helper()
	c, err := yuanrong.NewClient(ds, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func keysN(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%d@%s", i, prefix)
	}
	return out
}

func mustTensor[T codec.Element](t *testing.T, s []T, shape ...int64) codec.Tensor {
	t.Helper()
	ts, err := codec.FromSlice(s, shape...)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func TestClientRoundTrip(t *testing.T) {
	ctx := t.Context()
	c := newClient(t, yuanrong.NewLocal())
	keys := []string{"0@input_ids", "0@uid", "0@meta", "1@input_ids"}
	vals := []any{
		mustTensor(t, []int64{1, 2, 3, 4, 5, 6}, 2, 3),
		"uid-0",
		map[string]any{"step": int64(3), "ok": true},
		mustTensor(t, []float32{0.5}),
	}
	tags, err := c.Put(ctx, keys, vals)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tags, []string{yuanrong.TagKV, yuanrong.TagKV, yuanrong.TagKV, yuanrong.TagKV}) {
		t.Fatalf("tags %q, want %q per key", tags, yuanrong.TagKV)
	}
	got, err := c.Get(ctx, append(slices.Clone(keys), "2@missing"), append(slices.Clone(tags), yuanrong.TagKV))
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := codec.View[int64](got[0].(codec.Tensor))
	if !slices.Equal(ids, []int64{1, 2, 3, 4, 5, 6}) || !slices.Equal(got[0].(codec.Tensor).Shape, []int64{2, 3}) {
		t.Fatalf("input_ids %v", got[0])
	}
	if got[1] != "uid-0" || got[2].(map[string]any)["step"] != int64(3) {
		t.Fatalf("general values %v %v", got[1], got[2])
	}
	if got[4] != nil {
		t.Fatalf("missing key came back as %v, want nil", got[4])
	}
	// Put replaces (delete first, then publish).
	if _, err := c.Put(ctx, keys[1:2], []any{"uid-0b"}); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, keys[1:2], nil); err != nil || got[0] != "uid-0b" {
		t.Fatalf("after overwrite: %v %v", got, err)
	}
	if err := c.Clear(ctx, keys, tags); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, keys, tags); err != nil || slices.ContainsFunc(got, func(v any) bool { return v != nil }) {
		t.Fatalf("after clear: %v %v", got, err)
	}
}

// Get decodes without copying: tensor bytes alias the datasystem's buffer.
func TestClientGetZeroCopy(t *testing.T) {
	ctx := t.Context()
	ds := yuanrong.NewLocal()
	c := newClient(t, ds)
	if _, err := c.Put(ctx, []string{"k"}, []any{mustTensor(t, make([]byte, 4096))}); err != nil {
		t.Fatal(err)
	}
	stored := mget(t, ds, "k")[0]
	got, err := c.Get(ctx, []string{"k"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	data := got[0].(codec.Tensor).Data
	lo, hi := uintptr(unsafe.Pointer(&stored[0])), uintptr(unsafe.Pointer(&stored[len(stored)-1]))
	if len(data) == 0 || uintptr(unsafe.Pointer(&data[0])) < lo || uintptr(unsafe.Pointer(&data[len(data)-1])) > hi {
		t.Fatal("decoded tensor bytes do not alias the datasystem's buffer")
	}
}

// 25,001 keys with PutKeysLimit and GetClearKeysLimit 10,000 give three
// rounds of every call.
func TestClientBatchesAtKeyLimits(t *testing.T) {
	ctx := t.Context()
	ds := &countingDS{DataSystem: yuanrong.NewLocal()}
	c := newClient(t, ds, yuanrong.WithPutKeysLimit(10_000), yuanrong.WithGetClearKeysLimit(10_000))
	const n = 25_001
	keys := keysN("f", n)
	vals := make([]any, n)
	for i := range vals {
		vals[i] = int64(i)
	}
	tags, err := c.Put(ctx, keys, vals)
	if err != nil {
		t.Fatal(err)
	}
	rounds := []int{10_000, 10_000, 5_001}
	creates, publishes, gets, deletes := ds.calls()
	if !slices.Equal(creates, rounds) || !slices.Equal(publishes, rounds) || !slices.Equal(deletes, rounds) || gets != nil {
		t.Fatalf("put: creates %v publishes %v deletes-before-publish %v gets %v; want %v each and no gets", creates, publishes, deletes, gets, rounds)
	}
	got, err := c.Get(ctx, keys, tags)
	if err != nil {
		t.Fatal(err)
	}
	if got[n-1] != int64(n-1) || got[10_000] != int64(10_000) {
		t.Fatalf("values across rounds: %v %v", got[10_000], got[n-1])
	}
	if _, _, gets, _ = ds.calls(); !slices.Equal(gets, rounds) {
		t.Fatalf("get rounds %v, want %v", gets, rounds)
	}
	if err := c.Clear(ctx, keys, tags); err != nil {
		t.Fatal(err)
	}
	if _, _, _, deletes = ds.calls(); !slices.Equal(deletes, rounds) {
		t.Fatalf("clear rounds %v, want %v", deletes, rounds)
	}
}

func TestClientGetClearLimitApart(t *testing.T) {
	ctx := t.Context()
	ds := &countingDS{DataSystem: yuanrong.NewLocal()}
	c := newClient(t, ds, yuanrong.WithPutKeysLimit(6), yuanrong.WithGetClearKeysLimit(4))
	keys := keysN("f", 10)
	tags, err := c.Put(ctx, keys, make([]any, 10))
	if err != nil {
		t.Fatal(err)
	}
	creates, publishes, _, deletes := ds.calls()
	if !slices.Equal(creates, []int{6, 4}) || !slices.Equal(publishes, []int{6, 4}) || !slices.Equal(deletes, []int{4, 2, 4}) {
		t.Fatalf("put: creates %v publishes %v deletes %v", creates, publishes, deletes)
	}
	if _, err := c.Get(ctx, keys, tags); err != nil {
		t.Fatal(err)
	}
	if err := c.Clear(ctx, keys, tags); err != nil {
		t.Fatal(err)
	}
	if _, _, gets, deletes := ds.calls(); !slices.Equal(gets, []int{4, 4, 2}) || !slices.Equal(deletes, []int{4, 4, 2}) {
		t.Fatalf("get rounds %v clear rounds %v, want [4 4 2] each", gets, deletes)
	}
}

// bigValues are large enough for the size-aware packer to wake its pool:
// 40 objects of 300 KiB, 12 MiB in all.
func bigValues(t *testing.T) ([]string, []any) {
	// 120 x 300 KiB = 35 MiB: above codec.DefaultPoolMinBatchBytes (32 MiB),
	// so the size-aware default does wake the pool.
	keys := keysN("obs", 120)
	vals := make([]any, len(keys))
	for i := range vals {
		b := make([]byte, 300<<10)
		for j := range b {
			b[j] = byte(i*31 + j*7 + j>>9)
		}
		vals[i] = mustTensor(t, b)
	}
	return keys, vals
}

// TransferQueue's fixed pool of 16 (every object through it).
var tqPool16 = codec.Options{DSMaxWorkers: 16, Oversubscribe: true, PackThreshold: 1, PoolMinBatchBytes: 1}

func TestClientDSMaxWorkersSameBytes(t *testing.T) {
	ctx := t.Context()
	keys, vals := bigValues(t)
	put := func(opts ...yuanrong.Option) ([][]byte, codec.Stats) {
		ds := yuanrong.NewLocal()
		c := newClient(t, ds, opts...)
		if _, err := c.Put(ctx, keys, vals); err != nil {
			t.Fatal(err)
		}
		return mget(t, ds, keys...), c.PackStats()
	}
	want, serial := put(yuanrong.WithDSMaxWorkers(1))
	if serial.PooledObjects != 0 || serial.PoolRuns != 0 {
		t.Fatalf("DSMaxWorkers 1 used the pool: %+v", serial)
	}
	for name, opts := range map[string][]yuanrong.Option{
		"16 size-aware":       {yuanrong.WithDSMaxWorkers(16)},
		"16 fixed pool as TQ": {yuanrong.WithPackOptions(tqPool16)},
	} {
		got, st := put(opts...)
		pooled := name != "16 size-aware" || runtime.GOMAXPROCS(0) > 1
		if pooled && (st.PooledObjects == 0 || st.PoolRuns == 0) {
			t.Errorf("%s: the pool was not used (%+v), so the test proves nothing", name, st)
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("%s: key %q differs from DSMaxWorkers 1", name, keys[i])
			}
		}
	}
}

// A publish that fails part-way (in any of 3 rounds, after publishing half
// of its buffers) rolls the put back: no key of it is left, not even the old
// value of a key in a round after the failing one; other keys are.
func TestClientRollbackOnPublishFailure(t *testing.T) {
	for _, fail := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("round%d", fail), func(t *testing.T) {
			ctx := t.Context()
			local := yuanrong.NewLocal()
			ds := &countingDS{DataSystem: local}
			c := newClient(t, ds, yuanrong.WithPutKeysLimit(4))
			// Old values in the first round and in the last, which a
			// failure in an earlier round never reaches.
			if _, err := c.Put(ctx, []string{"other", "3@f", "9@f"}, []any{"keep", "old", "old"}); err != nil {
				t.Fatal(err)
			}
			ds.failPublish = fail + 1 // after the put above
			keys := keysN("f", 10)
			_, err := c.Put(ctx, keys, make([]any, 10))
			if !errors.Is(err, errPublish) {
				t.Fatalf("put: %v, want the injected fault", err)
			}
			if local.Pending() != 0 {
				t.Fatalf("%d created buffers left unreleased", local.Pending())
			}
			got := mget(t, local, append(keys, "other")...)
			for i, v := range got[:len(keys)] {
				if v != nil {
					t.Errorf("key %q of the failed put is still in the datasystem", keys[i])
				}
			}
			if string(got[len(keys)]) == "" || local.Len() != 1 {
				t.Fatalf("datasystem holds %d keys, want only the unrelated one", local.Len())
			}
		})
	}
}

func TestClientCreateFailureReleases(t *testing.T) {
	local := yuanrong.NewLocal()
	ds := &countingDS{DataSystem: local, failCreate: 2}
	c := newClient(t, ds, yuanrong.WithPutKeysLimit(4))
	_, err := c.Put(t.Context(), keysN("f", 10), make([]any, 10))
	if !errors.Is(err, errCreate) {
		t.Fatalf("put: %v, want the injected fault", err)
	}
	if _, publishes, _, _ := ds.calls(); publishes != nil || local.Pending() != 0 || local.Len() != 0 {
		t.Fatalf("after a failed create: publishes %v, pending %d, len %d", publishes, local.Pending(), local.Len())
	}
}

// Everything is validated before the first datasystem call.
func TestClientValidatesFirst(t *testing.T) {
	ctx := t.Context()
	ds := &countingDS{DataSystem: yuanrong.NewLocal()}
	c := newClient(t, ds, yuanrong.WithPutKeysLimit(2))
	long := strings.Repeat("k", yuanrong.MaxKeyLen+1)
	cases := []struct {
		name   string
		keys   []string
		vals   []any
		badKey string
		also   error
	}{
		{"mismatched lengths", []string{"a", "b"}, []any{1}, "", nil},
		{"empty key", []string{"a", ""}, []any{1, 2}, "", nil},
		{"duplicate key", []string{"a", "b", "a"}, []any{1, 2, 3}, "a", nil},
		{"key too long", []string{"a", long}, []any{1, 2}, long, nil},
		{"bad value", []string{"a", "b", "c", "d", "e"}, []any{1, 2, 3, 4, struct{}{}}, "e", codec.ErrUnsupportedType},
		{"bad tensor", []string{"a", "b"}, []any{1, codec.Tensor{DType: codec.Float32, Shape: []int64{3}, Data: make([]byte, 4)}}, "b", codec.ErrShapeMismatch},
	}
	for _, tc := range cases {
		_, err := c.Put(ctx, tc.keys, tc.vals)
		if !errors.Is(err, yuanrong.ErrInvalid) || (tc.also != nil && !errors.Is(err, tc.also)) {
			t.Errorf("%s: %v, want ErrInvalid (and %v)", tc.name, err, tc.also)
		}
		var ke *yuanrong.KeyError
		if tc.badKey != "" && (!errors.As(err, &ke) || ke.Key != tc.badKey) {
			t.Errorf("%s: %v does not name key %.10q", tc.name, err, tc.badKey)
		}
		if creates, publishes, gets, deletes := ds.calls(); creates != nil || publishes != nil || gets != nil || deletes != nil {
			t.Errorf("%s: the datasystem was called (%v %v %v %v)", tc.name, creates, publishes, gets, deletes)
		}
	}
	if _, err := c.Get(ctx, []string{"a", "b"}, []string{yuanrong.TagKV}); !errors.Is(err, yuanrong.ErrInvalid) {
		t.Errorf("get with mismatched tags: %v", err)
	}
	if tags, err := c.Put(ctx, nil, nil); err != nil || tags == nil || len(tags) != 0 {
		t.Errorf("empty put: %v %v", tags, err)
	}
	if creates, _, gets, _ := ds.calls(); creates != nil || gets != nil {
		t.Errorf("the datasystem was called: %v %v", creates, gets)
	}
}

// An unknown strategy tag fails Get and Clear before any read or delete.
func TestClientUnknownStrategy(t *testing.T) {
	ctx := t.Context()
	ds := &countingDS{DataSystem: yuanrong.NewLocal()}
	c := newClient(t, ds)
	keys := []string{"a", "b"}
	if _, err := c.Put(ctx, keys, []any{1, 2}); err != nil {
		t.Fatal(err)
	}
	ds.calls()
	tags := []string{yuanrong.TagKV, "npu"}
	_, errGet := c.Get(ctx, keys, tags)
	errClear := c.Clear(ctx, keys, tags)
	for name, err := range map[string]error{"Get": errGet, "Clear": errClear} {
		var ke *yuanrong.KeyError
		if !errors.Is(err, yuanrong.ErrUnknownStrategy) || !errors.As(err, &ke) || ke.Key != "b" {
			t.Errorf("%s with an unknown tag: %v, want ErrUnknownStrategy naming key b", name, err)
		}
	}
	if _, _, gets, deletes := ds.calls(); gets != nil || deletes != nil {
		t.Fatalf("the datasystem was called: gets %v deletes %v", gets, deletes)
	}
	if got, err := c.Get(ctx, keys, []string{"", yuanrong.TagKV}); err != nil || got[0] != int64(1) {
		t.Fatalf("the empty tag reads the KV path: %v %v", got, err)
	}
}

func TestClientCorruptValue(t *testing.T) {
	local := yuanrong.NewLocal()
	if err := local.MPublish(t.Context(), create(t, local, []string{"bad"}, "\xff\xff\xff\xff")); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, local)
	_, err := c.Get(t.Context(), []string{"missing", "bad"}, nil)
	var ke *yuanrong.KeyError
	if !errors.Is(err, codec.ErrCorrupt) || !errors.As(err, &ke) || ke.Key != "bad" {
		t.Fatalf("get of a corrupt buffer: %v, want codec.ErrCorrupt naming key bad", err)
	}
}

func TestClientCancelled(t *testing.T) {
	local := yuanrong.NewLocal()
	c := newClient(t, local)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := c.Put(ctx, []string{"a"}, []any{1}); !errors.Is(err, context.Canceled) {
		t.Fatalf("put: %v", err)
	}
	if local.Len() != 0 || local.Pending() != 0 {
		t.Fatal("a cancelled put left data behind")
	}
}

// Close releases the packer's pool (no goroutine outlives it) and closes
// the datasystem; later calls fail with ErrClosed.
func TestClientCloseReleasesPool(t *testing.T) {
	before := goleak.IgnoreCurrent()
	ctx := t.Context()
	local := yuanrong.NewLocal()
	c, err := yuanrong.NewClient(local, yuanrong.WithPackOptions(tqPool16))
	if err != nil {
		t.Fatal(err)
	}
	keys, vals := bigValues(t)
	if _, err := c.Put(ctx, keys, vals); err != nil {
		t.Fatal(err)
	}
	if c.PackStats().PoolRuns == 0 {
		t.Fatal("the pool never started, so the test proves nothing")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	goleak.VerifyNone(t, before)
	_, errPut := c.Put(ctx, keys, vals)
	_, errGet := c.Get(ctx, keys, nil)
	for name, err := range map[string]error{"Put": errPut, "Get": errGet, "Clear": c.Clear(ctx, keys, nil)} {
		if !errors.Is(err, yuanrong.ErrClosed) || !errors.Is(err, backends.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	if _, err := local.MGet(ctx, keys); !errors.Is(err, yuanrong.ErrClosed) {
		t.Errorf("the datasystem is still open after Client.Close: %v", err)
	}
}

func TestOptionsRejectInvalid(t *testing.T) {
	for name, opt := range map[string]yuanrong.Option{
		"PutKeysLimit 0":      yuanrong.WithPutKeysLimit(0),
		"GetClearKeysLimit 0": yuanrong.WithGetClearKeysLimit(-1),
		"DSMaxWorkers 0":      yuanrong.WithDSMaxWorkers(0),
		"negative pack":       yuanrong.WithPackOptions(codec.Options{PackThreshold: -1}),
	} {
		if _, err := yuanrong.NewClient(yuanrong.NewLocal(), opt); !errors.Is(err, yuanrong.ErrInvalid) {
			t.Errorf("NewClient with %s: %v, want ErrInvalid", name, err)
		}
		if _, err := yuanrong.NewBackend(yuanrong.NewLocal(), opt); !errors.Is(err, yuanrong.ErrInvalid) {
			t.Errorf("NewBackend with %s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := yuanrong.NewClient(nil); !errors.Is(err, yuanrong.ErrInvalid) {
		t.Errorf("NewClient(nil): %v", err)
	}
}

// rivalDS publishes a value of its own under key before each of the first
// times MPublish calls, as another writer racing a put would.
type rivalDS struct {
	yuanrong.DataSystem
	key   string
	times int

	mu        sync.Mutex // guards publishes
	publishes []int
}

func (r *rivalDS) MPublish(ctx context.Context, bufs []yuanrong.Buffer) error {
	r.mu.Lock()
	r.publishes = append(r.publishes, len(bufs))
	rival := len(r.publishes) <= r.times
	r.mu.Unlock()
	if rival {
		b, err := r.DataSystem.MCreate(ctx, []string{r.key}, []int{5})
		if err != nil {
			return err
		}
		copy(b[0].Data(), "rival")
		if err := r.DataSystem.MPublish(ctx, b); err != nil {
			return err
		}
	}
	return r.DataSystem.MPublish(ctx, bufs)
}

// A key another writer publishes between a round's delete and its publish
// is deleted and published again: the later put wins.
func TestClientPublishRace(t *testing.T) {
	ctx := t.Context()
	local := yuanrong.NewLocal()
	ds := &rivalDS{DataSystem: local, key: "2@f", times: 3}
	c := newClient(t, ds)
	keys := keysN("f", 5)
	if _, err := c.Put(ctx, keys, []any{0, 1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ds.publishes, []int{5, 1, 1, 1}) {
		t.Fatalf("publishes %v, want the whole round then the raced key alone, three times", ds.publishes)
	}
	got, err := c.Get(ctx, keys, nil)
	if err != nil || got[2] != int64(2) {
		t.Fatalf("raced key reads %v (%v), want the put's value", got[2], err)
	}
	// A rival that always wins fails the put, which rolls back.
	ds.times, ds.publishes = 1000, nil
	_, err = c.Put(ctx, keys, []any{0, 1, 2, 3, 4})
	var ke *yuanrong.KeyError
	if !errors.Is(err, yuanrong.ErrKeyExists) || !errors.As(err, &ke) || ke.Key != "2@f" {
		t.Fatalf("put against a rival that always wins: %v, want ErrKeyExists naming 2@f", err)
	}
	if len(ds.publishes) != 10 || local.Pending() != 0 || local.Len() != 0 {
		t.Fatalf("%d publish attempts, %d buffers pending, %d keys left", len(ds.publishes), local.Pending(), local.Len())
	}
}
