package redis_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/codec"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

// openTQ opens a tq client on url for t, closed when t ends.
func openTQ(t *testing.T, url string, opts ...tq.Option) *tq.Client {
	t.Helper()
	c, err := tq.Open(t.Context(), url, append([]tq.Option{tq.WithRetry(tq.NoRetry)}, opts...)...)
	if err != nil {
		t.Fatalf("tq.Open(%q): %v", url, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rollout is a batch like a rollout worker's: stacked prompts, jagged
// responses, and plain values.
func rollout(keys []string, seed int) tq.Batch {
	n := len(keys)
	prompts := make([]int64, n*4)
	for i := range prompts {
		prompts[i] = int64(seed*1000 + i)
	}
	resp := make([][]float32, n)
	uids := make([]string, n)
	for i := range resp {
		resp[i] = make([]float32, 1+(i+seed)%5)
		for j := range resp[i] {
			resp[i][j] = float32(seed) + float32(i)/10 + float32(j)/100
		}
		uids[i] = fmt.Sprintf("uid-%d-%d", seed, i)
	}
	return tq.Batch{
		"prompts":   tq.Stacked(prompts, n, 4),
		"responses": tq.JaggedOf(resp),
		"uid":       tq.ValuesOf(uids),
	}
}

// checkRollout checks b against rollout(keys, seed), for the rows of
// want (indexes into keys).
func checkRollout(t *testing.T, b tq.Batch, keys []string, seed int, rows []int) {
	t.Helper()
	all := rollout(keys, seed)
	wantPrompts, _ := tq.As[int64](all["prompts"])
	gotPrompts, err := tq.As[int64](b["prompts"])
	if err != nil {
		t.Fatalf("prompts: %v", err)
	}
	if b["prompts"].Kind() != tq.KindStacked || len(gotPrompts) != 4*len(rows) {
		t.Fatalf("prompts: kind %v, %d values; want stacked, %d", b["prompts"].Kind(), len(gotPrompts), 4*len(rows))
	}
	wantResp, _ := tq.RowsAs[float32](all["responses"])
	gotResp, err := tq.RowsAs[float32](b["responses"])
	if err != nil {
		t.Fatalf("responses: %v", err)
	}
	uids := b["uid"].Values()
	for j, i := range rows {
		if !slices.Equal(gotPrompts[4*j:4*j+4], wantPrompts[4*i:4*i+4]) {
			t.Errorf("row %q prompts %v, want %v", keys[i], gotPrompts[4*j:4*j+4], wantPrompts[4*i:4*i+4])
		}
		if !slices.Equal(gotResp[j], wantResp[i]) {
			t.Errorf("row %q responses %v, want %v", keys[i], gotResp[j], wantResp[i])
		}
		if want := fmt.Sprintf("uid-%d-%d", seed, i); uids[j] != want {
			t.Errorf("row %q uid %v, want %q", keys[i], uids[j], want)
		}
	}
}

func keyRange(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%03d", prefix, i)
	}
	return out
}

// TestTQ runs a rollout -> reward -> train exchange through tq on Redis.
func TestTQ(t *testing.T) {
	srv := redistest.Start(t)
	testTQ(t, srv.URL()+"?prefix=job1")
}

func testTQ(t *testing.T, url string) {
	ctx := t.Context()
	c := openTQ(t, url)
	keys := keyRange("s", 100)
	tags := make([]tq.Tag, len(keys))
	for i := range tags {
		tags[i] = tq.Tag{"status": "rollout", "step": int64(3)}
	}
	if err := c.BatchPut(ctx, "step-3", keys, rollout(keys, 1), tags); err != nil {
		t.Fatal(err)
	}
	b, err := c.BatchGet(ctx, "step-3", keys)
	if err != nil {
		t.Fatal(err)
	}
	all := make([]int, len(keys))
	for i := range all {
		all[i] = i
	}
	checkRollout(t, b, keys, 1, all)

	// A reward worker adds a column to some rows, and a tag.
	some := []string{keys[7], keys[3], keys[50]}
	rewards := []float32{0.5, -1, 2}
	if err := c.BatchPut(ctx, "step-3", some, tq.Batch{"rewards": tq.Stacked(rewards)},
		[]tq.Tag{{"status": "rewarded"}, {"status": "rewarded"}, {"status": "rewarded"}}); err != nil {
		t.Fatal(err)
	}
	b, err = c.BatchGet(ctx, "step-3", some, "rewards", "prompts", "responses", "uid")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := tq.As[float32](b["rewards"])
	if !slices.Equal(got, rewards) {
		t.Errorf("rewards %v, want %v", got, rewards)
	}
	checkRollout(t, b, keys, 1, []int{7, 3, 50})
	_, err = c.BatchGet(ctx, "step-3", keys[:10], "rewards")
	var ke *tq.KeyError
	if !errors.Is(err, tq.ErrNotReady) || !errors.As(err, &ke) || ke.Field != "rewards" {
		t.Errorf("BatchGet of a column some rows lack: %v, want ErrNotReady", err)
	}

	// List shows rows by index with their merged tags.
	m, err := c.List(ctx, "step-3")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Rows) != len(keys) {
		t.Fatalf("List: %d rows, want %d", len(m.Rows), len(keys))
	}
	for i, r := range m.Rows {
		if r.Key != keys[i] || (i > 0 && r.Index <= m.Rows[i-1].Index) {
			t.Fatalf("List row %d: key %q index %d", i, r.Key, r.Index)
		}
		wantStatus := "rollout"
		if slices.Contains(some, r.Key) {
			wantStatus = "rewarded"
		}
		if r.Tag["status"] != wantStatus || r.Tag["step"] != int64(3) {
			t.Errorf("row %q tag %v, want status %q and step int64(3)", r.Key, r.Tag, wantStatus)
		}
		if fi := r.Fields["prompts"]; fi.DType != "int64" || !slices.Equal(fi.Shape, []int{4}) {
			t.Errorf("row %q prompts %+v", r.Key, fi)
		}
	}
	// Reading by meta skips the lookup.
	b, err = c.BatchGetByMeta(ctx, &tq.BatchMeta{Partition: m.Partition, Rows: m.Rows[10:20]}, "prompts", "responses", "uid")
	if err != nil {
		t.Fatal(err)
	}
	checkRollout(t, b, keys, 1, all[10:20])

	// Overwrite a column: the new values are read, the old cells deleted.
	if err := c.BatchPut(ctx, "step-3", keys, rollout(keys, 2), nil); err != nil {
		t.Fatal(err)
	}
	b, err = c.BatchGet(ctx, "step-3", keys, "prompts", "responses", "uid")
	if err != nil {
		t.Fatal(err)
	}
	checkRollout(t, b, keys, 2, all)

	if err := c.Put(ctx, "other", "x", map[string]any{"v": codec.Scalar(float64(1.5))}, tq.Tag{"k": true}); err != nil {
		t.Fatal(err)
	}
	ps, err := c.Partitions(ctx)
	if err != nil || !slices.Equal(ps, []string{"other", "step-3"}) {
		t.Errorf("Partitions = %q, %v", ps, err)
	}

	// Clear some keys, then the partition.
	if err := c.Clear(ctx, "step-3", keys[:50]); err != nil {
		t.Fatal(err)
	}
	if _, err := c.BatchGet(ctx, "step-3", keys[:1]); !errors.Is(err, tq.ErrNotFound) {
		t.Errorf("BatchGet of a cleared key: %v, want ErrNotFound", err)
	}
	b, err = c.BatchGet(ctx, "step-3", keys[50:], "prompts", "responses", "uid")
	if err != nil {
		t.Fatal(err)
	}
	checkRollout(t, b, keys, 2, all[50:])
	if err := c.ClearPartition(ctx, "step-3"); err != nil {
		t.Fatal(err)
	}
	if m, err := c.List(ctx, "step-3"); err != nil || len(m.Rows) != 0 {
		t.Errorf("List after ClearPartition: %v, %v", m, err)
	}
	if ps, err := c.Partitions(ctx); err != nil || !slices.Equal(ps, []string{"other"}) {
		t.Errorf("Partitions after ClearPartition = %q, %v", ps, err)
	}
	if err := c.ClearPartition(ctx, "other"); err != nil {
		t.Fatal(err)
	}
}

// TestNoLeftovers checks that clearing everything leaves no data key
// behind: overwrites, clears and rollbacks delete every cell they orphan.
func TestNoLeftovers(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	c := openTQ(t, srv.URL()+"?prefix=clean")
	keys := keyRange("k", 64)
	for seed := range 3 {
		if err := c.BatchPut(ctx, "p", keys, rollout(keys, seed), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.BatchPut(ctx, "p", keys[:5], tq.Batch{"extra": tq.Stacked([]int32{1, 2, 3, 4, 5})}, nil); err != nil {
		t.Fatal(err)
	}
	cl := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer cl.Close()
	data, err := cl.Keys(ctx, "clean:d:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := 64*3 + 5; len(data) != want {
		t.Errorf("%d data keys after overwrites, want %d (one per live cell)", len(data), want)
	}
	if err := c.ClearPartition(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	// The writer empties the log in the background, after the clear.
	var left []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		left, err = cl.Keys(ctx, "*").Result()
		if err == nil {
			left, err = redistest.Persistent(ctx, cl, left)
		}
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(left, func(k string) bool { return !strings.HasPrefix(k, "clean:{clean}:") }) || time.Now().After(deadline) {
			break
		}
	}
	for _, k := range left {
		if !strings.HasPrefix(k, "clean:{clean}:") {
			t.Errorf("key %q left after ClearPartition (only the index counter and registry may stay)", k)
		}
	}

	// Clearing every key (what a trainer does at the end of a step)
	// leaves nothing either: no log of an emptied partition.
	if err := c.BatchPut(ctx, "q", keys, rollout(keys, 7), nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Clear(ctx, "q", keys[:10]); err != nil {
		t.Fatal(err)
	}
	if err := c.Clear(ctx, "q", keys[10:]); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if left, err = cl.Keys(ctx, "*").Result(); err == nil {
			left, err = redistest.Persistent(ctx, cl, left)
		}
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(left, func(k string) bool { return !strings.HasPrefix(k, "clean:{clean}:") }) || time.Now().After(deadline) {
			break
		}
	}
	for _, k := range left {
		if !strings.HasPrefix(k, "clean:{clean}:") {
			t.Errorf("key %q left after clearing every key (only the index counter and registry may stay)", k)
		}
	}
	if parts, err := c.Partitions(ctx); err != nil || len(parts) != 0 {
		t.Errorf("Partitions after clearing everything: %q, %v", parts, err)
	}
	if err := c.BatchPut(ctx, "q", keys[:3], rollout(keys[:3], 8), nil); err != nil {
		t.Fatalf("put into the emptied partition: %v", err)
	}
	if m, err := c.List(ctx, "q"); err != nil || len(m.Rows) != 3 {
		t.Fatalf("List after a put into the emptied partition: %v, %v", m, err)
	}
}

// TestPrefixIsolation has two jobs share one server under two prefixes.
func TestPrefixIsolation(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	a := openTQ(t, srv.URL()+"?prefix=jobA")
	b := openTQ(t, srv.URL()+"?prefix=jobB")
	keys := keyRange("k", 10)
	if err := a.BatchPut(ctx, "train", keys, rollout(keys, 1), nil); err != nil {
		t.Fatal(err)
	}
	if m, err := b.List(ctx, "train"); err != nil || len(m.Rows) != 0 {
		t.Fatalf("jobB lists %v, %v in jobA's partition", m, err)
	}
	if ps, err := b.Partitions(ctx); err != nil || len(ps) != 0 {
		t.Fatalf("jobB sees partitions %q, %v", ps, err)
	}
	if _, err := b.BatchGet(ctx, "train", keys); !errors.Is(err, tq.ErrNotFound) {
		t.Fatalf("jobB BatchGet of jobA's keys: %v, want ErrNotFound", err)
	}
	// The same partition and keys in jobB are other rows.
	if err := b.BatchPut(ctx, "train", keys, rollout(keys, 2), nil); err != nil {
		t.Fatal(err)
	}
	all := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	ga, err := a.BatchGet(ctx, "train", keys)
	if err != nil {
		t.Fatal(err)
	}
	checkRollout(t, ga, keys, 1, all)
	if err := b.ClearPartition(ctx, "train"); err != nil {
		t.Fatal(err)
	}
	ga, err = a.BatchGet(ctx, "train", keys)
	if err != nil {
		t.Fatalf("jobA after jobB cleared its partition: %v", err)
	}
	checkRollout(t, ga, keys, 1, all)

	cl := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer cl.Close()
	all2, err := cl.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range all2 {
		if !strings.HasPrefix(k, "jobA:") && !strings.HasPrefix(k, "jobB:") {
			t.Errorf("key %q is outside both prefixes", k)
		}
	}
}

// TestNewCallerClient checks the constructor path: a caller-owned client
// stays open after the store and the tq client close.
func TestNewCallerClient(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	cl := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer cl.Close()
	s, err := redis.New(cl, redis.WithPrefix("own"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := tq.New(engine(s), tq.WithRetry(tq.NoRetry))
	if err != nil {
		t.Fatal(err)
	}
	keys := keyRange("k", 3)
	if err := c.BatchPut(ctx, "p", keys, rollout(keys, 1), nil); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(c.Close(), s.Close(), s.Log().Close()); err != nil {
		t.Fatal(err)
	}
	if err := cl.Ping(ctx).Err(); err != nil {
		t.Fatalf("caller's client closed by the store: %v", err)
	}
	if err := putVals(ctx, s, []string{"x"}, [][]byte{nil}); !errors.Is(err, backends.ErrClosed) {
		t.Fatalf("Put after Close: %v", err)
	}
	// A second store on the same client and prefix sees the rows.
	s2, _ := redis.New(cl, redis.WithPrefix("own"))
	c2, _ := tq.New(engine(s2), tq.WithRetry(tq.NoRetry))
	defer c2.Close()
	b, err := c2.BatchGet(ctx, "p", keys)
	if err != nil {
		t.Fatal(err)
	}
	checkRollout(t, b, keys, 1, []int{0, 1, 2})
	if _, err := redis.New(nil); err == nil {
		t.Error("New(nil) succeeded")
	}
	for _, o := range []redis.Option{redis.WithPrefix(""), redis.WithPrefix("a:b"), redis.WithPrefix("{x}"), redis.WithIODepth(0), redis.WithRoundKeys(0), redis.WithReadRoundBytes(0), redis.WithWriteRoundBytes(-1)} {
		if _, err := redis.New(cl, o); err == nil {
			t.Error("New with an invalid option succeeded")
		}
	}
}

// BatchGetInto on Redis reads each step's stacked column into the memory
// of the step before's, on the confirmed one-request read (a client reading
// rows it has seen) and on the read that looks rows up first (a client that
// has not).
func TestBatchGetIntoOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	writer := openTQ(t, srv.URL()+"?prefix=into")
	reader := openTQ(t, srv.URL()+"?prefix=into")
	ctx := t.Context()
	keys := keyRange("k", 64)
	all := make([]int, len(keys))
	for i := range all {
		all[i] = i
	}
	for name, c := range map[string]*tq.Client{"confirmed read": writer, "looked-up read": reader} {
		t.Run(name, func(t *testing.T) {
			var prev tq.Batch
			var at *byte
			for step := range 3 {
				part := fmt.Sprintf("%s-%d", strings.ReplaceAll(name, " ", "-"), step)
				if err := writer.BatchPut(ctx, part, keys, rollout(keys, step), nil); err != nil {
					t.Fatal(err)
				}
				got, err := c.BatchGetInto(ctx, part, keys, prev)
				if err != nil {
					t.Fatal(err)
				}
				checkRollout(t, got, keys, step, all)
				x, _ := got["prompts"].Tensor()
				if step == 0 {
					at = &x.Data[0]
				} else if &x.Data[0] != at {
					t.Errorf("step %d: prompts read into fresh memory, not the step before's", step)
				}
				prev = got
			}
		})
	}
}
