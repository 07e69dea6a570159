package file_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends/file"
	"github.com/tqgo/tqgo/tq"
)

// crashFullEnv set to 1 makes TestCrashStates try every crash point with
// more states each (minutes under -race) instead of a sample.
const crashFullEnv = "TQ_FILE_CRASH_FULL"

// A step of the crash workload: what it did to which rows, and the
// trace's length when it began and when it returned (ok: with nil).
type crashStep struct {
	verb       string // put, ack, clear
	keys       []string
	start, end int
	ok         bool
}

// crashWorkload puts rows, claims, acks and clears them on a fresh
// directory under the recorder, with checkpoints every few KiB (so that
// segments are recycled), and closes the client.
func crashWorkload(t *testing.T, dir, policy string, rec *file.Recorder) []crashStep {
	t.Helper()
	ctx := t.Context()
	c, err := tq.Open(ctx, "file://"+dir+"?sync="+policy+"&checkpoint=1KiB")
	if err != nil {
		t.Fatal(err)
	}
	task, err := c.Task("p", "train", killFields, tq.LeaseFor(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var steps []crashStep
	do := func(verb string, keys []string, f func() error) {
		s := crashStep{verb: verb, keys: keys, start: rec.Len()}
		s.ok = f() == nil
		s.end = rec.Len()
		steps = append(steps, s)
	}
	for i := range 150 {
		keys := []string{fmt.Sprintf("r%03d-0", i), fmt.Sprintf("r%03d-1", i)}
		do("put", keys, func() error { return c.BatchPut(ctx, "p", keys, killBatch(keys), nil) })
		if policy != "always" && policy != "never" {
			time.Sleep(3 * time.Millisecond) // let the syncer fsync now and then
		}
		l, err := task.Claim(ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		if l.Len() == 0 {
			continue
		}
		if i%16 == 4 {
			continue // leased, never acked
		}
		do("ack", l.Keys(), func() error { return l.Ack(ctx) })
		if i%8 != 0 {
			do("clear", l.Keys(), func() error { return c.Clear(ctx, "p", l.Keys()) })
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	return steps
}

func killBatch(keys []string) tq.Batch {
	n := len(keys)
	as, bs, cs := make([]int64, 0, n*8), make([]float32, 0, n*16), make([]string, n)
	for j, k := range keys {
		a, b, c := rowOf(k)
		as, bs, cs[j] = append(as, a...), append(bs, b...), c
	}
	return tq.Batch{"a": tq.Stacked(as, n, 8), "b": tq.Stacked(bs, n, 16), "c": tq.ValuesOf(cs)}
}

// Every state a crash of the machine can leave reopens, and holds what
// the sync policy promises: the engine's every write, rename, cut and
// fsync is recorded over a workload of puts, claims, acks and clears
// with checkpoints, and at crash points across the trace the states a
// crash can leave are built (what was fsynced; what a kill -9 leaves;
// prefixes, subsets and 4 KiB page mixes of the unsynced writes and
// names; writes torn at 512 B and anywhere) and reopened. Each must open;
// every write the policy promised (under sync=always every acknowledged
// one; otherwise those acknowledged before the log's last fsync) must be
// there: a row put is listed, a row cleared is not, a row acked is not
// claimable; and every row listed reads whole (none half visible).
func TestCrashStates(t *testing.T) {
	full := os.Getenv(crashFullEnv) == "1"
	points, perPoint := 12, 3
	if full {
		points, perPoint = 1<<30, 8
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("rng seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	total, bad := 0, 0
	for _, policy := range []string{"always", "5ms", "never"} {
		t.Run(policy, func(t *testing.T) {
			dir := t.TempDir()
			rec := file.Record(0)
			steps := crashWorkload(t, dir, policy, rec)
			rec.Restore()
			n := rec.Len()
			durable := rec.DurableAt()
			var ks []int
			if points >= n+1 {
				for k := 0; k <= n; k++ {
					ks = append(ks, k)
				}
			} else {
				for i := range points {
					ks = append(ks, i*n/(points-1))
				}
				ks = append(ks, rec.Around()...)
				slices.Sort(ks)
				ks = slices.Compact(ks)
			}
			tried, failed := 0, 0
			seen := map[string]int{} // violations by class
			for _, k := range ks {
				for _, st := range rec.States(k, rng, perPoint) {
					tried++
					if err := checkCrashState(t, policy, st, steps, k, durable[k]); err != nil {
						failed++
						class := crashClass(err)
						if seen[class]++; seen[class] == 1 {
							t.Errorf("crash after op %d of %d, state %s: %v", k, n, st.How(), err)
						}
					}
				}
			}
			if failed > 0 {
				t.Logf("violations by class: %v", seen)
			}
			t.Logf("sync=%s: %d ops traced (%s), %d crash states tried, %d violations", policy, n, rec.Summary(), tried, failed)
			total += tried
			bad += failed
		})
	}
	t.Logf("%d crash states tried, %d violations", total, bad)
}

// checkCrashState reopens st and holds it to the steps: k is the crash
// point, durable the last fsync of the log before it.
func checkCrashState(t *testing.T, policy string, st file.CrashState, steps []crashStep, k, durable int) error {
	dir, err := os.MkdirTemp(t.TempDir(), "state")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := st.Materialize(dir); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, err := tq.Open(ctx, "file://"+dir+"?sync="+policy)
	if err != nil {
		return fmt.Errorf("open: %w (files %v)", err, names(st))
	}
	defer c.Close()
	promised := func(s crashStep) bool {
		if !s.ok || s.end > k {
			return false
		}
		return policy == "always" || durable >= s.end
	}
	started := func(s crashStep) bool { return s.start < k }
	meta, err := c.List(ctx, "p")
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	listed := meta.Keys()
	put, clearStarted := map[string]bool{}, map[string]bool{}
	for _, s := range steps {
		for _, key := range s.keys {
			switch {
			case s.verb == "put" && started(s):
				put[key] = true
			case s.verb == "clear" && started(s):
				clearStarted[key] = true
			}
		}
	}
	for _, key := range listed {
		if !put[key] {
			return fmt.Errorf("row %s listed, never put", key)
		}
	}
	for _, s := range steps {
		if !promised(s) {
			continue
		}
		for _, key := range s.keys {
			in := slices.Contains(listed, key)
			switch {
			case s.verb == "put" && !in && !clearStarted[key]:
				return fmt.Errorf("row %s, put and promised, is gone", key)
			case s.verb == "clear" && in:
				return fmt.Errorf("row %s, cleared and promised, is listed", key)
			}
		}
	}
	if len(listed) > 0 {
		b, err := c.BatchGet(ctx, "p", listed)
		if err != nil {
			return fmt.Errorf("reading the %d rows listed: %w", len(listed), err)
		}
		if err := rowsWhole(listed, b); err != nil {
			return err
		}
	}
	task, err := c.Task("p", "train", killFields, tq.LeaseFor(time.Hour))
	if err != nil {
		return err
	}
	l, err := task.Claim(ctx, 1000)
	if err != nil {
		return fmt.Errorf("claim: %w", err)
	}
	for _, s := range steps {
		if s.verb == "ack" && promised(s) {
			for _, key := range s.keys {
				if slices.Contains(l.Keys(), key) {
					return fmt.Errorf("row %s, acked and promised, claimed again", key)
				}
			}
		}
	}
	return nil
}

// crashClass names the kind of a violation, to report one of each.
func crashClass(err error) string {
	for _, c := range []string{"not the newest", "bad header", "damage", "cell missing", "is gone", "is listed", "claimed again", "listed, never put", "open"} {
		if strings.Contains(err.Error(), c) {
			return c
		}
	}
	return "other"
}

func names(st file.CrashState) string {
	var ns []string
	for n, b := range st.Files() {
		ns = append(ns, fmt.Sprintf("%s:%d", n, len(b)))
	}
	slices.Sort(ns)
	return strings.Join(ns, " ")
}

// rowsWhole checks every row read is the one put.
func rowsWhole(keys []string, b tq.Batch) error {
	as, err := tq.RowsAs[int64](b["a"])
	if err != nil {
		return err
	}
	bs, err := tq.RowsAs[float32](b["b"])
	if err != nil {
		return err
	}
	cs, err := tq.ValuesAs[string](b["c"])
	if err != nil {
		return err
	}
	if len(as) != len(keys) || len(bs) != len(keys) || len(cs) != len(keys) {
		return fmt.Errorf("read %d, %d, %d values of %d rows", len(as), len(bs), len(cs), len(keys))
	}
	for i, k := range keys {
		a, fb, c := rowOf(k)
		if !slices.Equal(as[i], a) || !slices.Equal(bs[i], fb) || cs[i] != c {
			return errors.New("row " + k + " reads other values than put")
		}
	}
	return nil
}
