// Package yuanrongtest checks that a yuanrong.DataSystem keeps the
// datasystem's semantics the port relies on, in the manner of
// testing/fstest.TestFS: yuanrong.Local runs it, and so should a binding of
// the real SDK (against a running worker) before it carries data.
//
// The rules Run checks, one subtest each:
//
//   - A created buffer is exactly its size and invisible (MGet gives nil)
//     until MPublish; a zero-size buffer publishes a non-nil empty value.
//   - MGet gives nil for a missing key, mixes present and missing keys, and
//     allows a key to repeat.
//   - MPublish never overwrites: a published key fails with a
//     *yuanrong.KeyError matching ErrKeyExists, and the refused buffer can be
//     published after Delete.
//   - A buffer of another instance, or one already published or released,
//     fails MPublish with ErrInvalid and nothing of that call is published.
//   - Mismatched lengths, a negative size or an empty key fail MCreate
//     with ErrInvalid.
//   - Empty batches are no-ops (MGet of none gives an empty result).
//   - A value MGet returned stays intact after its key is deleted and
//     written again.
//   - A call with a cancelled context fails with context.Canceled and has no
//     effect; after Close every call fails with ErrClosed and Release is
//     still safe.
//
// Keys start with a prefix unique to the Run call and subtest, so one
// server may serve every subtest. Each call of newDS must return a new
// instance (it may share a server) and register its cleanup with
// t.Cleanup; a closed instance must tolerate that cleanup.
package yuanrongtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tqgo/tqgo/yuanrong"
)

// Run runs every subtest, each on a fresh DataSystem from newDS.
func Run(t *testing.T, newDS func(t *testing.T) yuanrong.DataSystem) {
	t.Helper()
	nonce := fmt.Sprintf("yt%x", rand.Uint32())
	for _, tc := range []struct {
		name string
		fn   func(*st)
	}{
		{"CreatedInvisibleUntilPublished", testInvisible},
		{"GetMissingAndRepeated", testGetMixed},
		{"PublishDoesNotOverwrite", testNoOverwrite},
		{"RejectsBadBuffers", testBadBuffers},
		{"RejectsBadCreate", testBadCreate},
		{"EmptyBatches", testEmpty},
		{"GetSurvivesDelete", testSurvivesDelete},
		{"CancelledContext", testCancelled},
		{"Closed", testClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := newDS(t)
			if ds == nil {
				t.Fatal("newDS returned nil")
			}
			name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
			tc.fn(&st{t: t, ctx: t.Context(), ds: ds, newDS: newDS, prefix: nonce + "." + name + "."})
		})
	}
}

// st is one subtest.
type st struct {
	t      *testing.T
	ctx    context.Context
	ds     yuanrong.DataSystem
	newDS  func(t *testing.T) yuanrong.DataSystem
	prefix string
}

func (s *st) key(name string) string { return s.prefix + name }

// create creates a buffer per key holding vals[i].
func (s *st) create(ds yuanrong.DataSystem, keys []string, vals ...string) []yuanrong.Buffer {
	s.t.Helper()
	sizes := make([]int, len(vals))
	for i, v := range vals {
		sizes[i] = len(v)
	}
	bufs, err := ds.MCreate(s.ctx, keys, sizes)
	if err != nil {
		s.t.Fatalf("MCreate: %v", err)
	}
	if len(bufs) != len(keys) {
		s.t.Fatalf("MCreate of %d keys returned %d buffers", len(keys), len(bufs))
	}
	for i, b := range bufs {
		if b.Key() != keys[i] || len(b.Data()) != sizes[i] {
			s.t.Fatalf("buffer %d: key %q, %d bytes; want %q, %d", i, b.Key(), len(b.Data()), keys[i], sizes[i])
		}
		copy(b.Data(), vals[i])
	}
	return bufs
}

func (s *st) publish(bufs []yuanrong.Buffer) {
	s.t.Helper()
	if err := s.ds.MPublish(s.ctx, bufs); err != nil {
		s.t.Fatalf("MPublish: %v", err)
	}
}

func (s *st) get(keys ...string) [][]byte {
	s.t.Helper()
	got, err := s.ds.MGet(s.ctx, keys)
	if err != nil {
		s.t.Fatalf("MGet: %v", err)
	}
	if len(got) != len(keys) {
		s.t.Fatalf("MGet of %d keys returned %d values", len(keys), len(got))
	}
	return got
}

func testInvisible(s *st) {
	a, z := s.key("a"), s.key("zero")
	bufs := s.create(s.ds, []string{a, z}, "alpha", "")
	if got := s.get(a, z); got[0] != nil || got[1] != nil {
		s.t.Fatalf("created buffers visible before MPublish: %q", got)
	}
	s.publish(bufs)
	got := s.get(a, z)
	if string(got[0]) != "alpha" {
		s.t.Fatalf("published value %q, want %q", got[0], "alpha")
	}
	if got[1] == nil || len(got[1]) != 0 {
		s.t.Fatalf("zero-size value reads %#v, want a non-nil empty slice", got[1])
	}
}

func testGetMixed(s *st) {
	a, m := s.key("a"), s.key("missing")
	s.publish(s.create(s.ds, []string{a}, "alpha"))
	got := s.get(m, a, m, a)
	if got[0] != nil || got[2] != nil || string(got[1]) != "alpha" || string(got[3]) != "alpha" {
		s.t.Fatalf("MGet(missing, a, missing, a) = %q", got)
	}
}

func testNoOverwrite(s *st) {
	k, free := s.key("k"), s.key("free")
	s.publish(s.create(s.ds, []string{k}, "old"))
	bufs := s.create(s.ds, []string{k, free}, "new", "free")
	err := s.ds.MPublish(s.ctx, bufs)
	var ke *yuanrong.KeyError
	if !errors.Is(err, yuanrong.ErrKeyExists) || !errors.As(err, &ke) || ke.Key != k {
		s.t.Fatalf("MPublish over a published key: %v, want a *KeyError for it matching ErrKeyExists", err)
	}
	if got := s.get(k); string(got[0]) != "old" {
		s.t.Fatalf("the published value became %q", got[0])
	}
	if err := s.ds.Delete(s.ctx, []string{k, s.key("never")}); err != nil {
		s.t.Fatalf("Delete: %v", err)
	}
	s.publish(bufs[:1]) // the refused buffer, again
	if got := s.get(k); string(got[0]) != "new" {
		s.t.Fatalf("after Delete and MPublish: %q, want %q", got[0], "new")
	}
}

func testBadBuffers(s *st) {
	other := s.newDS(s.t)
	foreign := s.create(other, []string{s.key("x")}, "x")
	y := s.key("y")
	mine := s.create(s.ds, []string{y}, "y")
	if err := s.ds.MPublish(s.ctx, append(mine, foreign...)); !errors.Is(err, yuanrong.ErrInvalid) {
		s.t.Fatalf("MPublish of another instance's buffer: %v, want ErrInvalid", err)
	}
	if got := s.get(y); got[0] != nil {
		s.t.Fatal("a refused MPublish published part of its batch")
	}
	s.publish(mine)
	if err := s.ds.MPublish(s.ctx, mine); !errors.Is(err, yuanrong.ErrInvalid) {
		s.t.Fatalf("second MPublish of a buffer: %v, want ErrInvalid", err)
	}
	foreign[0].Release()
	foreign[0].Release()
	if err := other.MPublish(s.ctx, foreign); !errors.Is(err, yuanrong.ErrInvalid) {
		s.t.Fatalf("MPublish of a released buffer: %v, want ErrInvalid", err)
	}
}

func testBadCreate(s *st) {
	a := s.key("a")
	for name, call := range map[string]func() error{
		"mismatched lengths": func() error { _, err := s.ds.MCreate(s.ctx, []string{a}, nil); return err },
		"negative size":      func() error { _, err := s.ds.MCreate(s.ctx, []string{a}, []int{-1}); return err },
		"empty key":          func() error { _, err := s.ds.MCreate(s.ctx, []string{""}, []int{1}); return err },
	} {
		if err := call(); !errors.Is(err, yuanrong.ErrInvalid) {
			s.t.Errorf("MCreate with %s: %v, want ErrInvalid", name, err)
		}
	}
}

func testEmpty(s *st) {
	bufs, err := s.ds.MCreate(s.ctx, nil, nil)
	if err != nil || len(bufs) != 0 {
		s.t.Fatalf("MCreate(empty) = %v, %v", bufs, err)
	}
	if err := s.ds.MPublish(s.ctx, nil); err != nil {
		s.t.Fatalf("MPublish(empty): %v", err)
	}
	got, err := s.ds.MGet(s.ctx, nil)
	if err != nil || got == nil || len(got) != 0 {
		s.t.Fatalf("MGet(empty) = %#v, %v; want an empty, non-nil result", got, err)
	}
	if err := s.ds.Delete(s.ctx, nil); err != nil {
		s.t.Fatalf("Delete(empty): %v", err)
	}
}

func testSurvivesDelete(s *st) {
	k := s.key("k")
	s.publish(s.create(s.ds, []string{k}, "first"))
	held := s.get(k)[0]
	if err := s.ds.Delete(s.ctx, []string{k}); err != nil {
		s.t.Fatal(err)
	}
	s.publish(s.create(s.ds, []string{k}, "again"))
	if !bytes.Equal(held, []byte("first")) {
		s.t.Fatalf("a value MGet returned changed to %q after Delete and a new write", held)
	}
}

func testCancelled(s *st) {
	k := s.key("k")
	bufs := s.create(s.ds, []string{k}, "v")
	ctx, cancel := context.WithCancel(s.ctx)
	cancel()
	if err := s.ds.MPublish(ctx, bufs); !errors.Is(err, context.Canceled) {
		s.t.Fatalf("MPublish with a cancelled context: %v", err)
	}
	if got := s.get(k); got[0] != nil {
		s.t.Fatal("MPublish with a cancelled context published")
	}
	s.publish(bufs)
	if err := s.ds.Delete(ctx, []string{k}); !errors.Is(err, context.Canceled) {
		s.t.Fatalf("Delete with a cancelled context: %v", err)
	}
	if got := s.get(k); got[0] == nil {
		s.t.Fatal("Delete with a cancelled context deleted")
	}
}

func testClosed(s *st) {
	k := s.key("k")
	bufs := s.create(s.ds, []string{k}, "v")
	if err := s.ds.Close(); err != nil {
		s.t.Fatal(err)
	}
	_, errC := s.ds.MCreate(s.ctx, []string{k}, []int{1})
	_, errG := s.ds.MGet(s.ctx, []string{k})
	for name, err := range map[string]error{
		"MCreate": errC, "MPublish": s.ds.MPublish(s.ctx, bufs), "MGet": errG, "Delete": s.ds.Delete(s.ctx, []string{k}),
	} {
		if !errors.Is(err, yuanrong.ErrClosed) {
			s.t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	bufs[0].Release()
}
