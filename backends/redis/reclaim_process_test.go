package redis_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/tqgo/tqgo/internal/childproc"
	"hash/fnv"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/internal/replica"
	"github.com/tqgo/tqgo/tq"
)

// The environment of a killed writer (TestKilledWriterHelper): the queue's
// URL (its presence is what makes the helper act), which child it is, the
// seed of its choices, and how many operations each of its goroutines
// does before it reports that it started.
const (
	killURLEnv   = "TQ_REDIS_KILLED_WRITER_URL"
	killChildEnv = "TQ_REDIS_KILLED_WRITER_CHILD"
	killSeedEnv  = "TQ_REDIS_KILLED_WRITER_SEED"
	killWarmEnv  = "TQ_REDIS_KILLED_WRITER_WARM"
)

// The partitions the killed writers use: two writers share main (disjoint
// keys, overwritten and cleared now and then); one writes side and clears
// the whole partition now and then.
const (
	killMain = "main"
	killSide = "side"
)

// killFields are the columns a killed writer's puts carry: two tensor
// columns (written as split cells) and a values column (packed).
var killFields = []string{"ids", "logp", "meta"}

// TestReclaimAfterKilledWriters kills ten writer processes in sequence,
// each with SIGKILL at a random moment of its puts and clears (cells
// written in several rounds, overwrites, clears of keys and of a whole
// partition), and then checks what the dead writers left: every listed
// row's cells exist and read back whole, with the values its tags say
// were written; the cells no row references are leaked (reservations
// never committed, replaced cells, cleared rows' cells, not yet deleted);
// Reclaim(0) of each partition deletes exactly those, reports them, and
// leaves the rows as they were.
func TestReclaimAfterKilledWriters(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	const prefix = "killed"
	// Rounds of 4 KiB and tq chunks of 8 cells: a put of a few rows is
	// many requests, so a kill lands in the middle of one.
	url := srv.URL() + "?prefix=" + prefix + "&write_round_bytes=4096&round_keys=16"
	raw := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { raw.Close() })
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	s, err := redis.OpenURL(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	meta := metaOf(s)
	t.Cleanup(func() { s.Close(); meta.Close() })
	partitions := []string{killMain, killSide}

	leakedBefore, leaks := 0, 0
	for child := range 10 {
		runKilledWriter(t, url, child, seed, 1+rng.IntN(12), time.Duration(rng.IntN(30_000))*time.Microsecond)
		cs := takeCensus(t, raw, meta, prefix, partitions)
		leaked := len(cs.leaked())
		t.Logf("writer %d killed: %d rows listed, %d cells, %d of them leaked (%d new)",
			child, cs.rows, len(cs.data), leaked, leaked-leakedBefore)
		if leaked > leakedBefore {
			leaks++
		}
		leakedBefore = leaked
	}
	if t.Failed() {
		return
	}
	t.Logf("%d of 10 kills leaked cells", leaks)

	before := takeCensus(t, raw, meta, prefix, partitions)
	leaked := before.leaked()
	if len(leaked) == 0 {
		t.Fatal("no kill left a leaked cell: the test proves nothing")
	}
	reader := openTQ(t, url)
	for _, p := range partitions {
		checkKilledRows(t, reader, meta, p)
	}
	rec := &deleteRecorder{Store: s}
	c, err := tq.New(backends.Engine{Data: rec, Meta: meta}, tq.WithRetry(tq.NoRetry))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for _, p := range partitions {
		rec.reset()
		rep, err := c.Reclaim(ctx, p, 0)
		if err != nil {
			t.Fatalf("Reclaim(%q, 0): %+v, %v", p, rep, err)
		}
		deleted := rec.keys()
		if rep.Left != 0 || rep.Deleted != len(deleted) {
			t.Errorf("Reclaim(%q, 0): %+v; it deleted %d cells, want Deleted %d and Left 0", p, rep, len(deleted), len(deleted))
		}
		existed, seen := 0, map[string]bool{}
		for _, k := range deleted {
			if seen[k] {
				t.Errorf("Reclaim(%q) deleted cell %q twice", p, k)
			}
			seen[k] = true
			if before.refs[k] {
				t.Errorf("Reclaim(%q) deleted cell %q, which a listed row references", p, k)
			}
			if before.data[k] {
				existed++
				delete(leaked, k)
			}
		}
		t.Logf("Reclaim(%q): %+v, %d of the cells existed", p, rep, existed)
		if refs, err := meta.Garbage(ctx, p, 0); err != nil || len(refs) != 0 {
			t.Errorf("Garbage(%q, 0) after Reclaim: %d cells, %v; want none", p, len(refs), err)
		}
	}
	for k := range leaked {
		t.Errorf("leaked cell %q was not deleted by Reclaim", k)
	}
	after := takeCensus(t, raw, meta, prefix, partitions)
	if n := len(after.leaked()); n != 0 {
		t.Errorf("%d unreferenced cells left after Reclaim", n)
	}
	if len(after.data) != len(before.data)-len(before.leaked()) {
		t.Errorf("%d cells after Reclaim, want %d of %d: the leaked ones deleted", len(after.data), len(before.data)-len(before.leaked()), len(before.data))
	}
	if !maps.Equal(after.refs, before.refs) {
		t.Errorf("Reclaim changed the rows: they reference %d cells, before %d", len(after.refs), len(before.refs))
	}
	for _, p := range partitions {
		checkKilledRows(t, reader, meta, p)
	}
}

// runKilledWriter runs writer child as a process of its own, and kills it
// with SIGKILL delay after it reported that its goroutines did warm
// operations each.
func runKilledWriter(t *testing.T, url string, child int, seed uint64, warm int, delay time.Duration) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledWriterHelper$", "-test.count=1", "-test.timeout=60s")
	childproc.Tie(cmd)
	cmd.Env = append(os.Environ(), killURLEnv+"="+url, killChildEnv+"="+strconv.Itoa(child), killSeedEnv+"="+strconv.FormatUint(seed, 10), killWarmEnv+"="+strconv.Itoa(warm))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	var out strings.Builder
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		once := sync.OnceFunc(func() { close(started) })
		for sc.Scan() {
			if sc.Text() == "started" {
				once()
			}
			out.WriteString(sc.Text() + "\n")
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case <-started:
		time.Sleep(delay)
	case <-read:
	case <-time.After(30 * time.Second):
	}
	killed := cmd.Process.Kill() == nil
	<-read
	err = cmd.Wait()
	var exit *exec.ExitError
	if !killed || !errors.As(err, &exit) || exit.Success() || strings.Contains(out.String(), "error:") || !strings.Contains(out.String(), "started") {
		t.Fatalf("writer %d: not killed while writing (%v):\n%s%s", child, err, out.String(), stderr.String())
	}
}

// TestKilledWriterHelper is a writer of TestReclaimAfterKilledWriters,
// which kills it; run directly it does nothing. Two goroutines put and
// clear rows of their own in killMain, a third puts rows of killSide and
// clears that partition now and then. It prints "started" once each did
// its first warm operations, and "error: ..." when an operation fails.
func TestKilledWriterHelper(t *testing.T) {
	url := os.Getenv(killURLEnv)
	if url == "" {
		t.Skip("helper process for TestReclaimAfterKilledWriters")
	}
	child, _ := strconv.Atoi(os.Getenv(killChildEnv))
	seed, _ := strconv.ParseUint(os.Getenv(killSeedEnv), 10, 64)
	warm, _ := strconv.Atoi(os.Getenv(killWarmEnv))
	if child%2 == 1 {
		// Snapshots replace the log every few writes: kills land in
		// compactions too, and the survivors read snapshots that carry
		// reservations, garbage and orphans.
		replica.SetDefaultCompactAfter(1)
	}
	ctx := t.Context()
	c := openTQ(t, url, tq.WithKeysLimit(8))
	var first sync.WaitGroup
	first.Add(3)
	go func() { first.Wait(); fmt.Println("started") }()
	fail := func(err error) { fmt.Printf("error: %v\n", err); os.Exit(3) }
	var wg sync.WaitGroup
	for w := range 3 {
		rng := rand.New(rand.NewPCG(seed, uint64(child*4+w+1)))
		wg.Go(func() {
			p, keys := killMain, keyRange(fmt.Sprintf("w%d-", w), 32)
			if w == 2 {
				p, keys = killSide, keyRange("s-", 24)
			}
			for n := 0; ctx.Err() == nil; n++ {
				v := int64(child)<<32 | int64(w)<<24 | int64(n) // unique to this put
				if err := killedWriterStep(ctx, c, rng, p, keys, v); err != nil {
					fail(err)
				}
				if n == warm-1 {
					first.Done()
				}
			}
		})
	}
	wg.Wait()
}

// killedWriterStep is one operation of a killed writer on keys of p: a put
// of a run of rows (new or overwritten) with every column, of two rows'
// tensor column alone (cells and commit in one request), of some
// columns, or a clear of a few rows (of the whole partition, on
// killSide); a put's values follow from its version v (see killedCells).
func killedWriterStep(ctx context.Context, c *tq.Client, rng *rand.Rand, p string, keys []string, v int64) error {
	lo := rng.IntN(len(keys) - 2)
	run := keys[lo : lo+2+rng.IntN(min(16, len(keys)-lo-2)+1)]
	put := func(keys, fields []string) error {
		b, tags := killedBatch(keys, v, fields)
		return c.BatchPut(ctx, p, keys, b, tags)
	}
	switch r := rng.IntN(10); {
	case r < 5:
		return put(run, killFields)
	case r < 7:
		return put(run[:2], killFields[:1])
	case r < 8:
		return put(run, killFields[1:])
	case p == killSide:
		return c.ClearPartition(ctx, p)
	default:
		return c.Clear(ctx, p, run[:min(len(run), 3)])
	}
}

// killedBatch is the batch a put of version v writes to fields of keys
// (see killedCells), and its tags: "v.<field>" is v for each field, so a
// row's tag says which put wrote each of its cells.
func killedBatch(keys []string, v int64, fields []string) (tq.Batch, []tq.Tag) {
	b := tq.Batch{}
	ids := make([]int64, 0, 64*len(keys))
	logp := make([][]float32, len(keys))
	vals := make([]string, len(keys))
	tags := make([]tq.Tag, len(keys))
	for i, k := range keys {
		kid, kl, kv := killedCells(k, v)
		ids, logp[i], vals[i] = append(ids, kid...), kl, kv
		tags[i] = tq.Tag{}
		for _, f := range fields {
			tags[i]["v."+f] = v
		}
	}
	for _, f := range fields {
		switch f {
		case "ids":
			b[f] = tq.Stacked(ids, len(keys), 64)
		case "logp":
			b[f] = tq.JaggedOf(logp)
		case "meta":
			b[f] = tq.ValuesOf(vals)
		}
	}
	return b, tags
}

// killedCells are the cells of key a put of version v writes: 64 ids
// (512 bytes), a jagged row of log-probs whose length depends on both,
// and a string.
func killedCells(key string, v int64) (ids []int64, logp []float32, meta string) {
	h := fnv.New64a()
	h.Write([]byte(key))
	kh := int64(h.Sum64() >> 2)
	ids = make([]int64, 64)
	for j := range ids {
		ids[j] = kh ^ (v*64 + int64(j))
	}
	logp = make([]float32, 8+(kh+v)%56)
	for j := range logp {
		logp[j] = -float32((v%4096)*64+int64(j)) / 64 // exact in float32
	}
	return ids, logp, key + "/" + strconv.FormatInt(v, 36)
}

// census is what a queue's data and metadata hold: the persistent data
// keys that are cells, and the cells the listed rows reference.
type census struct {
	data, refs map[string]bool
	rows       int
}

// leaked returns the cells no listed row references.
func (c census) leaked() map[string]bool {
	out := map[string]bool{}
	for k := range c.data {
		if !c.refs[k] {
			out[k] = true
		}
	}
	return out
}

// takeCensus scans the data keys of prefix and lists partitions' rows.
// Every persistent data key must be a cell ("<index>@<field>[#gen]"), and
// every cell a listed row references must exist.
func takeCensus(t *testing.T, raw *goredis.Client, meta metadata.MetaStore, prefix string, partitions []string) census {
	t.Helper()
	ctx := t.Context()
	dataPrefix := prefix + ":d:"
	var all []string
	it := raw.Scan(ctx, 0, dataPrefix+"*", 1000).Iterator()
	for it.Next(ctx) {
		all = append(all, it.Val())
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	// Short-lived keys (a cells-and-commit request's marker) expire.
	keys, err := redistest.Persistent(ctx, raw, all)
	if err != nil {
		t.Fatal(err)
	}
	cs := census{data: map[string]bool{}, refs: map[string]bool{}}
	for _, k := range keys {
		k = strings.TrimPrefix(k, dataPrefix)
		if !isCellKey(k) {
			t.Errorf("data key %q is not a cell", k)
			continue
		}
		cs.data[k] = true
	}
	for _, p := range partitions {
		rows, err := meta.List(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		cs.rows += len(rows)
		for _, r := range rows {
			for _, ref := range r.Refs() {
				k := ref.Key()
				if !cs.data[k] {
					t.Errorf("row %q of %q: cell %q is missing", r.Key, p, k)
				}
				cs.refs[k] = true
			}
		}
	}
	return cs
}

// isCellKey reports whether k is "<index>@<field>" or
// "<index>@<field>#<gen>" (gen > 0), as backends.StorageKey makes it.
func isCellKey(k string) bool {
	idx, rest, ok := strings.Cut(k, "@")
	if !ok {
		return false
	}
	index, err := strconv.ParseUint(idx, 10, 64)
	if err != nil {
		return false
	}
	field, gen := rest, uint64(0)
	if i := strings.LastIndexByte(rest, '#'); i >= 0 {
		if gen, err = strconv.ParseUint(rest[i+1:], 10, 64); err != nil || gen == 0 {
			return false
		}
		field = rest[:i]
	}
	return slices.Contains(killFields, field) && backends.StorageKey(index, field, gen) == k
}

// checkKilledRows reads back every listed row of p and checks that it
// holds, for each field, the cells of the put its tag names (see
// killedBatch), and no field without one.
func checkKilledRows(t *testing.T, c *tq.Client, meta metadata.MetaStore, p string) {
	t.Helper()
	ctx := t.Context()
	rows, err := meta.List(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		b, err := c.BatchGet(ctx, p, []string{r.Key})
		if err != nil {
			t.Errorf("row %q of %q does not read back: %v", r.Key, p, err)
			continue
		}
		if len(b) != len(r.Fields) {
			t.Errorf("row %q of %q read %d fields, lists %d", r.Key, p, len(b), len(r.Fields))
		}
		for _, f := range killFields {
			v, tagged := r.Tag["v."+f].(int64)
			col, read := b[f]
			if tagged != read {
				t.Errorf("row %q of %q: field %q read %v, tagged %v (tag %v)", r.Key, p, f, read, tagged, r.Tag)
				continue
			}
			if !read {
				continue
			}
			ids, logp, val := killedCells(r.Key, v)
			var ok bool
			switch f {
			case "ids":
				got, err := tq.As[int64](col)
				ok = err == nil && slices.Equal(got, ids)
			case "logp":
				got, err := tq.RowsAs[float32](col)
				ok = err == nil && len(got) == 1 && slices.Equal(got[0], logp)
			case "meta":
				ok = slices.Equal(col.Values(), []any{val})
			}
			if !ok {
				t.Errorf("row %q of %q: field %q does not hold version %d's cell", r.Key, p, f, v)
			}
		}
	}
}

// deleteRecorder is a data backend that records the keys it is asked to
// delete.
type deleteRecorder struct {
	backends.Store
	mu      sync.Mutex
	deleted []string
}

func (d *deleteRecorder) Delete(ctx context.Context, cells []backends.Cell) error {
	d.mu.Lock()
	for _, c := range cells {
		d.deleted = append(d.deleted, c.Key)
	}
	d.mu.Unlock()
	return d.Store.Delete(ctx, cells)
}

func (d *deleteRecorder) reset() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.deleted = nil
}

func (d *deleteRecorder) keys() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.deleted)
}
