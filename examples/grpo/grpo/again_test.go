package grpo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/tq"
)

// lostCommits is the memory engine's metadata whose commits, when armed,
// run a step of the test around them: the first applies and then loses its
// reply (tq.ErrOutcomeUnknown) after running applied; the next runs
// before first, then applies.
type lostCommits struct {
	*memory.MetaStore
	armed   atomic.Bool
	commits atomic.Int64
	applied func() // after the first commit applied, before its reply is lost
	before  func() // before the second commit
	// lookupFails is how many Lookups, from the first commit on, fail
	// (the engine out of reach a moment longer).
	lookupFails, lookups atomic.Int64
}

func (m *lostCommits) Lookup(ctx context.Context, partition string, keys []string) ([]*metadata.Row, error) {
	if m.commits.Load() > 0 {
		m.lookups.Add(1)
		if m.lookupFails.Add(-1) >= 0 {
			return nil, errors.New("connection refused")
		}
	}
	return m.MetaStore.Lookup(ctx, partition, keys)
}

func (m *lostCommits) Commit(ctx context.Context, partition string, updates []metadata.RowUpdate) (metadata.CommitResult, error) {
	if !m.armed.Load() {
		return m.MetaStore.Commit(ctx, partition, updates)
	}
	switch m.commits.Add(1) {
	case 1:
		res, err := m.MetaStore.Commit(ctx, partition, updates)
		if err != nil {
			return res, err
		}
		if m.applied != nil {
			m.applied()
		}
		return metadata.CommitResult{}, fmt.Errorf("%w: the reply was lost", backends.ErrOutcomeUnknown)
	case 2:
		if m.before != nil {
			m.before()
		}
	}
	return m.MetaStore.Commit(ctx, partition, updates)
}

// A put made again after its outcome was unknown, its first attempt
// having applied, is no error and brings back no row, whatever the other
// roles did with the rows meanwhile: consumed and cleared them before the
// put was made again, or while it was. (A reward worker's put of rewards
// made again once the trainers had cleared the rows failed with "row
// changed since prepare", and the role exited; or it made rows of the
// rewards alone, which no task ever finished.)
func TestPutAgainAfterItApplied(t *testing.T) {
	for _, tc := range []struct {
		name    string
		update  bool     // fields added to rows that exist (a reward worker's), or rows the put makes (a rollout's)
		applied []string // rows cleared after the first attempt applied
		before  []string // rows cleared just before a second attempt's commit, if one is made
		lookups int      // lookups that fail after the first attempt
	}{
		{"update, rows cleared before it is made again", true, []string{"k0", "k1"}, nil, 0},
		{"update, rows cleared while it is made again", true, nil, []string{"k0", "k1"}, 0},
		{"update, a row cleared while it is made again", true, nil, []string{"k0"}, 0},
		{"update, rows cleared, the first lookup failing", true, []string{"k0", "k1"}, nil, 1},
		{"new rows, one consumed and cleared before it is made again", false, []string{"k0"}, nil, 0},
		{"new rows, cleared while it is made again", false, nil, []string{"k0", "k1"}, 0},
		{"new rows, one cleared, the first lookup failing", false, []string{"k0"}, nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			meta := &lostCommits{MetaStore: memory.NewMetaStore()}
			c, err := tq.New(backends.Engine{Data: memory.New(), Meta: meta, Local: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := c.Close(); err != nil {
					t.Error(err)
				}
			})
			r := &runner{c: c, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			keys := []string{"k0", "k1"}
			if tc.update {
				if err := c.BatchPut(ctx, "p", keys, tq.Batch{"x": tq.Stacked([]int64{1, 2})}, nil); err != nil {
					t.Fatal(err)
				}
			}
			var cleared []string // by the other roles, as the put went
			clear := func(keys []string) func() {
				if keys == nil {
					return nil
				}
				return func() {
					if err := c.Clear(ctx, "p", keys); err != nil {
						t.Errorf("clear %q: %v", keys, err)
					}
					cleared = append(cleared, keys...)
				}
			}
			meta.applied, meta.before = clear(tc.applied), clear(tc.before)
			meta.lookupFails.Store(int64(tc.lookups))
			meta.armed.Store(true)
			b := tq.Batch{"reward": tq.Stacked([]float32{0.5, 1}), "uid": tq.ValuesOf([]string{"u0", "u1"})}
			if tc.update {
				err = r.update(ctx, "p", keys, b, nil)
			} else {
				err = r.put(ctx, "p", keys, b, []tq.Tag{{"round": int64(1)}, {"round": int64(1)}})
			}
			if meta.commits.Load() == 0 {
				t.Fatal("the put made no commit")
			}
			if tc.lookups > 0 && meta.lookups.Load() <= int64(tc.lookups) {
				t.Errorf("%d lookups after the first attempt, %d of them failing: the rows were not looked up again", meta.lookups.Load(), tc.lookups)
			}
			if err != nil {
				t.Fatalf("a put whose first attempt applied: %v", err)
			}
			m, err := c.List(ctx, "p")
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, row := range m.Rows {
				got = append(got, row.Key)
			}
			slices.Sort(got)
			want := slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return slices.Contains(cleared, k) })
			if !slices.Equal(got, want) {
				t.Fatalf("rows after: %q, want %q (%q were cleared)", got, want, cleared)
			}
			if len(got) > 0 {
				rb, err := c.BatchGet(ctx, "p", got, "reward")
				if err != nil {
					t.Fatalf("the rows left lack the put's field: %v", err)
				}
				if v, err := tq.As[float32](rb["reward"]); err != nil || v[len(v)-1] != 1 {
					t.Fatalf("reward of %q: %v, %v; want the put's", got, v, err)
				}
			}
		})
	}
}
