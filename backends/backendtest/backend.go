package backendtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tqgo/tqgo/backends"
)

// Run checks that the backends newBackend returns keep the data contract
// (see the package doc), one subtest per rule, each on a fresh backend from
// newBackend. Subtests of optional interfaces the backend lacks are skipped.
func Run(t *testing.T, newBackend func(t *testing.T) backends.Backend) {
	t.Helper()
	nonce := newNonce()
	for _, tc := range dataTests {
		t.Run(tc.name, func(t *testing.T) {
			b := newBackend(t)
			if b == nil {
				t.Fatal("newBackend returned nil")
			}
			tc.fn(&dt{t: t, ctx: t.Context(), b: b, prefix: prefix(nonce, t)})
		})
	}
}

var dataTests = []struct {
	name string
	fn   func(*dt)
}{
	{"PutGet", testPutGet},
	{"GetMissing", testGetMissing},
	{"GetMixed", testGetMixed},
	{"Overwrite", testOverwrite},
	{"Delete", testDelete},
	{"EmptyBatch", testEmptyBatch},
	{"MismatchedLengths", testMismatchedLengths},
	{"LargeValues", testLargeValues},
	{"ManyKeys", testManyKeys},
	{"BinaryValues", testBinaryValues},
	{"ZeroLength", testZeroLength},
	{"CancelledContext", testCancelled},
	{"Concurrent", testConcurrent},
	{"AllocatePublish", testAllocatePublish},
	{"AllocateReplace", testAllocateReplace},
	{"AllocateDiscard", testAllocateDiscard},
	{"AllocateTwoStaged", testAllocateTwoStaged},
	{"Tagged", testTagged},
	{"SplitRead", testSplitRead},
	{"SplitWrite", testSplitWrite},
	{"Closed", testClosed},
}

// dt is one data subtest: its backend and its key prefix.
type dt struct {
	t      *testing.T
	ctx    context.Context
	b      backends.Backend
	prefix string
}

// keys returns n keys named after name, unique to the subtest.
func (d *dt) keys(name string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%s/%d", d.prefix, name, i)
	}
	return out
}

// values returns a value of size bytes for each key.
func values(keys []string, size func(i int) int) [][]byte {
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = value(k, size(i))
	}
	return out
}

func (d *dt) put(keys []string, vals [][]byte) {
	d.t.Helper()
	if err := d.b.Put(d.ctx, keys, vals); err != nil {
		d.t.Fatalf("Put of %d keys: %v", len(keys), err)
	}
}

func (d *dt) del(keys []string) {
	d.t.Helper()
	if err := d.b.Delete(d.ctx, keys); err != nil {
		d.t.Fatalf("Delete of %d keys: %v", len(keys), err)
	}
}

// get reads keys with plain Get.
func (d *dt) get(keys []string) [][]byte {
	d.t.Helper()
	got, err := d.b.Get(d.ctx, keys)
	if err != nil {
		d.t.Fatalf("Get of %d keys: %v", len(keys), err)
	}
	if len(got) != len(keys) {
		d.t.Fatalf("Get of %d keys returned %d values", len(keys), len(got))
	}
	return got
}

// read reads keys written with tags (nil: written by plain Put): with
// GetTagged when the backend is a TaggedReader, else with Get.
func (d *dt) read(keys, tags []string) [][]byte {
	d.t.Helper()
	tr, ok := d.b.(backends.TaggedReader)
	if !ok {
		return d.get(keys)
	}
	if tags == nil {
		tags = make([]string, len(keys))
	}
	got, err := tr.GetTagged(d.ctx, keys, tags)
	if err != nil {
		d.t.Fatalf("GetTagged of %d keys: %v", len(keys), err)
	}
	if len(got) != len(keys) {
		d.t.Fatalf("GetTagged of %d keys returned %d values", len(keys), len(got))
	}
	return got
}

// expect checks got against want, where a nil want means missing. It
// reports at most a few mismatches, so 25,000 bad keys stay readable.
func (d *dt) expect(what string, keys []string, got, want [][]byte) {
	d.t.Helper()
	bad := 0
	for i := range want {
		var msg string
		switch {
		case want[i] == nil && got[i] != nil:
			msg = fmt.Sprintf("got %d bytes, want missing (nil)", len(got[i]))
		case want[i] != nil && got[i] == nil:
			msg = fmt.Sprintf("got missing (nil), want %d bytes", len(want[i]))
		case !bytes.Equal(got[i], want[i]):
			msg = fmt.Sprintf("got %d bytes, want %d bytes%s", len(got[i]), len(want[i]), firstDiff(got[i], want[i]))
		default:
			continue
		}
		if bad++; bad <= 5 {
			d.t.Errorf("%s: key %q: %s", what, keys[i], msg)
		}
	}
	if bad > 5 {
		d.t.Errorf("%s: %d of %d keys wrong", what, bad, len(keys))
	}
}

func firstDiff(a, b []byte) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf(", first difference at byte %d", i)
		}
	}
	return ""
}

// missing is want for keys that must read as missing.
func missing(n int) [][]byte { return make([][]byte, n) }

func (d *dt) wantErr(what string, err, target error) {
	d.t.Helper()
	if !errors.Is(err, target) {
		d.t.Errorf("%s: got error %v, want one wrapping %v", what, err, target)
	}
}

func testPutGet(d *dt) {
	keys := d.keys("k", 10)
	vals := values(keys, func(i int) int { return 1 + i*97 })
	d.put(keys, vals)
	d.expect("Get after Put", keys, d.get(keys), vals)

	// Another order, with a key asked for twice.
	ask := []string{keys[3], keys[0], keys[3], keys[9]}
	d.expect("Get in another order", ask, d.get(ask), [][]byte{vals[3], vals[0], vals[3], vals[9]})
}

func testGetMissing(d *dt) {
	keys := d.keys("never", 5)
	got, err := d.b.Get(d.ctx, keys)
	if err != nil {
		d.t.Fatalf("Get of missing keys: %v, want no error", err)
	}
	if len(got) != len(keys) {
		d.t.Fatalf("Get of %d missing keys returned %d values", len(keys), len(got))
	}
	d.expect("Get of missing keys", keys, got, missing(len(keys)))
}

func testGetMixed(d *dt) {
	keys := d.keys("k", 8)
	vals := values(keys, func(i int) int { return 10 + i })
	want := make([][]byte, len(keys))
	var even []string
	var evenVals [][]byte
	for i := 0; i < len(keys); i += 2 {
		even, evenVals = append(even, keys[i]), append(evenVals, vals[i])
		want[i] = vals[i]
	}
	d.put(even, evenVals)
	d.expect("Get of present and missing keys", keys, d.get(keys), want)
}

func testOverwrite(d *dt) {
	keys := d.keys("k", 3)
	d.put(keys, values(keys, func(i int) int { return 100 }))
	// Longer, shorter and equal-length replacements.
	newer := [][]byte{value("a"+keys[0], 5000), value("b"+keys[1], 7), value("c"+keys[2], 100)}
	d.put(keys, newer)
	d.expect("Get after overwrite", keys, d.get(keys), newer)
}

func testDelete(d *dt) {
	keys := d.keys("k", 6)
	vals := values(keys, func(i int) int { return 50 })
	d.put(keys, vals)
	ghosts := d.keys("ghost", 2)
	d.del(append([]string{keys[0], keys[2], ghosts[0]}, keys[4], ghosts[1]))
	d.expect("Get after Delete", keys, d.get(keys), [][]byte{nil, vals[1], nil, vals[3], nil, vals[5]})

	d.del(ghosts)                              // only missing keys
	d.del([]string{keys[0], keys[0]})          // already deleted, and twice
	d.put(keys[:1], [][]byte{[]byte("again")}) // a deleted key can be written again
	d.expect("Get after Put of a deleted key", keys[:2], d.get(keys[:2]), [][]byte{[]byte("again"), vals[1]})
}

func testEmptyBatch(d *dt) {
	keep := d.keys("keep", 1)
	keepVal := [][]byte{[]byte("kept")}
	d.put(keep, keepVal)

	for _, keys := range [][]string{nil, {}} {
		what := fmt.Sprintf("keys %#v", keys)
		if err := d.b.Put(d.ctx, keys, [][]byte{}[:len(keys)]); err != nil {
			d.t.Errorf("Put of empty batch (%s): %v, want nil", what, err)
		}
		got, err := d.b.Get(d.ctx, keys)
		if err != nil || len(got) != 0 {
			d.t.Errorf("Get of empty batch (%s) = %d values, %v; want 0, nil", what, len(got), err)
		}
		if err := d.b.Delete(d.ctx, keys); err != nil {
			d.t.Errorf("Delete of empty batch (%s): %v, want nil", what, err)
		}
	}
	if err := d.b.Put(d.ctx, nil, nil); err != nil {
		d.t.Errorf("Put(nil, nil): %v, want nil", err)
	}
	if a, ok := d.b.(backends.Allocator); ok {
		st, err := a.Allocate(d.ctx, nil, nil)
		if err != nil {
			d.t.Errorf("Allocate of empty batch: %v, want nil", err)
		} else {
			if n := len(st.Buffers()); n != 0 {
				d.t.Errorf("Allocate of empty batch gave %d buffers", n)
			}
			if err := st.Publish(d.ctx); err != nil {
				d.t.Errorf("Publish of empty Staged: %v, want nil", err)
			}
		}
	}
	if w, ok := d.b.(backends.TaggedWriter); ok {
		tags, err := w.PutTagged(d.ctx, nil, nil)
		if err != nil || len(tags) != 0 {
			d.t.Errorf("PutTagged of empty batch = %d tags, %v; want 0, nil", len(tags), err)
		}
	}
	if r, ok := d.b.(backends.TaggedReader); ok {
		got, err := r.GetTagged(d.ctx, nil, nil)
		if err != nil || len(got) != 0 {
			d.t.Errorf("GetTagged of empty batch = %d values, %v; want 0, nil", len(got), err)
		}
	}
	if del, ok := d.b.(backends.TaggedDeleter); ok {
		if err := del.DeleteTagged(d.ctx, nil, nil); err != nil {
			d.t.Errorf("DeleteTagged of empty batch: %v, want nil", err)
		}
	}
	d.expect("Get after empty batches", keep, d.get(keep), keepVal)
}

func testMismatchedLengths(d *dt) {
	keys := d.keys("k", 2)
	one := [][]byte{[]byte("x")}
	d.wantErr("Put of 2 keys and 1 value", d.b.Put(d.ctx, keys, one), backends.ErrInvalid)
	d.wantErr("Put of 1 key and 2 values", d.b.Put(d.ctx, keys[:1], [][]byte{[]byte("x"), []byte("y")}), backends.ErrInvalid)
	d.expect("Get after invalid Puts", keys, d.get(keys), missing(2))

	if a, ok := d.b.(backends.Allocator); ok {
		_, err := a.Allocate(d.ctx, keys, []int{1})
		d.wantErr("Allocate of 2 keys and 1 size", err, backends.ErrInvalid)
		_, err = a.Allocate(d.ctx, keys, []int{1, -1})
		d.wantErr("Allocate of a negative size", err, backends.ErrInvalid)
	}
	if w, ok := d.b.(backends.TaggedWriter); ok {
		_, err := w.PutTagged(d.ctx, keys, one)
		d.wantErr("PutTagged of 2 keys and 1 value", err, backends.ErrInvalid)
	}
	if r, ok := d.b.(backends.TaggedReader); ok {
		_, err := r.GetTagged(d.ctx, keys, []string{""})
		d.wantErr("GetTagged of 2 keys and 1 tag", err, backends.ErrInvalid)
	}
	if del, ok := d.b.(backends.TaggedDeleter); ok {
		d.wantErr("DeleteTagged of 2 keys and 1 tag", del.DeleteTagged(d.ctx, keys, []string{""}), backends.ErrInvalid)
	}
	d.expect("Get after invalid calls", keys, d.get(keys), missing(2))
}

func testLargeValues(d *dt) {
	big := d.keys("big", 1)
	bigVal := [][]byte{value(big[0], 8<<20)}
	d.put(big, bigVal)
	d.expect("Get of an 8 MiB value", big, d.get(big), bigVal)

	keys := d.keys("k", 64)
	vals := values(keys, func(int) int { return 256 << 10 })
	d.put(keys, vals)
	d.expect("Get of 64 x 256 KiB", keys, d.get(keys), vals)
}

func testManyKeys(d *dt) {
	keys := d.keys("k", 25000)
	vals := values(keys, func(i int) int { return 16 + i%32 })
	d.put(keys, vals)
	d.expect("Get of 25,000 keys", keys, d.get(keys), vals)
	d.del(keys)
	d.expect("Get of 25,000 deleted keys", keys, d.get(keys), missing(len(keys)))
}

func testBinaryValues(d *dt) {
	every := make([]byte, 256)
	reversed := make([]byte, 256)
	for i := range every {
		every[i], reversed[i] = byte(i), byte(255-i)
	}
	vals := [][]byte{
		every,
		reversed,
		bytes.Repeat(every, 40),         // 10 KiB
		make([]byte, 1000),              // all zero
		bytes.Repeat([]byte{0xff}, 999), // all 0xff
		[]byte("\r\n\x00$-1\r\n*3\r\n"), // RESP-like bytes
		{0xc3, 0x28, 0xa0, 0xa1, 0xe2, 0x28, 0xa1, 0xf0, 0x90, 0x28, 0xbc}, // invalid UTF-8
		{0},
	}
	keys := d.keys("k", len(vals))
	d.put(keys, vals)
	d.expect("Get of binary values", keys, d.get(keys), vals)
}

func testZeroLength(d *dt) {
	keys := d.keys("k", 3)
	d.put(keys, [][]byte{{}, []byte("x"), make([]byte, 0, 16)})
	got := d.get(keys)
	for _, i := range []int{0, 2} {
		if got[i] == nil || len(got[i]) != 0 {
			d.t.Errorf("Get of a zero-length value: got %v (nil: %t), want a non-nil empty slice", got[i], got[i] == nil)
		}
	}
	d.put(keys[1:2], [][]byte{{}})
	if got := d.get(keys[1:2]); got[0] == nil || len(got[0]) != 0 {
		d.t.Errorf("Get of a value overwritten with a zero-length one: got %v (nil: %t), want a non-nil empty slice", got[0], got[0] == nil)
	}
	d.del(keys[:1])
	d.expect("Get of a deleted zero-length value", keys[:1], d.get(keys[:1]), missing(1))
}

func testCancelled(d *dt) {
	keys := d.keys("k", 2)
	vals := values(keys, func(int) int { return 10 })
	d.put(keys[:1], vals[:1])
	ctx, cancel := context.WithCancel(d.ctx)
	cancel()

	d.wantErr("Put with a cancelled context", d.b.Put(ctx, keys[1:], vals[1:]), context.Canceled)
	_, err := d.b.Get(ctx, keys)
	d.wantErr("Get with a cancelled context", err, context.Canceled)
	d.wantErr("Delete with a cancelled context", d.b.Delete(ctx, keys[:1]), context.Canceled)
	d.expect("Get after calls with a cancelled context", keys, d.get(keys), [][]byte{vals[0], nil})
}

func testClosed(d *dt) {
	keys := d.keys("k", 1)
	vals := [][]byte{[]byte("v")}
	d.put(keys, vals)
	var st backends.Staged
	a, isAlloc := d.b.(backends.Allocator)
	if isAlloc {
		var err error
		if st, err = a.Allocate(d.ctx, d.keys("staged", 1), []int{4}); err != nil {
			d.t.Fatalf("Allocate: %v", err)
		}
	}
	if err := d.b.Close(); err != nil {
		d.t.Fatalf("Close: %v", err)
	}
	d.wantErr("Put after Close", d.b.Put(d.ctx, keys, vals), backends.ErrClosed)
	_, err := d.b.Get(d.ctx, keys)
	d.wantErr("Get after Close", err, backends.ErrClosed)
	d.wantErr("Delete after Close", d.b.Delete(d.ctx, keys), backends.ErrClosed)
	if isAlloc {
		_, err := a.Allocate(d.ctx, keys, []int{1})
		d.wantErr("Allocate after Close", err, backends.ErrClosed)
		d.wantErr("Publish after Close", st.Publish(d.ctx), backends.ErrClosed)
	}
	if w, ok := d.b.(backends.TaggedWriter); ok {
		_, err := w.PutTagged(d.ctx, keys, vals)
		d.wantErr("PutTagged after Close", err, backends.ErrClosed)
	}
	if r, ok := d.b.(backends.TaggedReader); ok {
		_, err := r.GetTagged(d.ctx, keys, []string{""})
		d.wantErr("GetTagged after Close", err, backends.ErrClosed)
	}
	if del, ok := d.b.(backends.TaggedDeleter); ok {
		d.wantErr("DeleteTagged after Close", del.DeleteTagged(d.ctx, keys, []string{""}), backends.ErrClosed)
	}
}

// allocator returns the backend's Allocator, or skips the subtest.
func (d *dt) allocator() backends.Allocator {
	d.t.Helper()
	a, ok := d.b.(backends.Allocator)
	if !ok {
		d.t.Skip("backend does not implement backends.Allocator")
	}
	return a
}

// stage allocates buffers for keys and fills them with vals.
func (d *dt) stage(a backends.Allocator, keys []string, vals [][]byte) backends.Staged {
	d.t.Helper()
	st, err := a.Allocate(d.ctx, keys, sizes(vals))
	if err != nil {
		d.t.Fatalf("Allocate of %d keys: %v", len(keys), err)
	}
	bufs := st.Buffers()
	if len(bufs) != len(keys) {
		d.t.Fatalf("Allocate of %d keys gave %d buffers", len(keys), len(bufs))
	}
	for i, b := range bufs {
		if len(b) != len(vals[i]) {
			d.t.Fatalf("Allocate: buffer %d is %d bytes, want %d", i, len(b), len(vals[i]))
		}
		copy(b, vals[i])
	}
	return st
}

// publish publishes st and returns the tags it reports (nil if none).
func (d *dt) publish(st backends.Staged, n int) []string {
	d.t.Helper()
	if err := st.Publish(d.ctx); err != nil {
		d.t.Fatalf("Publish: %v", err)
	}
	tr, ok := st.(backends.TagReporter)
	if !ok {
		return nil
	}
	tags := tr.Tags()
	if len(tags) != n {
		d.t.Fatalf("Tags after Publish of %d keys: %d tags", n, len(tags))
	}
	return tags
}

func testAllocatePublish(d *dt) {
	a := d.allocator()
	keys := d.keys("k", 7)
	sz := []int{0, 1, 100, 4095, 4096, 4097, 300 << 10}
	vals := values(keys, func(i int) int { return sz[i] })
	st := d.stage(a, keys, vals)
	d.expect("Get before Publish", keys, d.get(keys), missing(len(keys)))
	tags := d.publish(st, len(keys))
	got := d.read(keys, tags)
	d.expect("Get after Publish", keys, got, vals)
	if got[0] == nil || len(got[0]) != 0 {
		d.t.Errorf("a published zero-size buffer reads as %v (nil: %t), want a non-nil empty slice", got[0], got[0] == nil)
	}
	if err := st.Publish(d.ctx); err == nil {
		d.t.Error("second Publish of one Staged: got nil error")
	}
	if err := st.Discard(d.ctx); err != nil {
		d.t.Logf("Discard after Publish: %v", err)
	}
	d.expect("Get after Discard of a published Staged", keys, d.read(keys, tags), vals)
	if d.t.Failed() {
		return
	}
	if del, ok := d.b.(backends.TaggedDeleter); ok && tags != nil {
		if err := del.DeleteTagged(d.ctx, keys, tags); err != nil {
			d.t.Fatalf("DeleteTagged of published keys: %v", err)
		}
	} else {
		d.del(keys)
	}
	d.expect("Get after deleting published keys", keys, d.read(keys, tags), missing(len(keys)))
}

func testAllocateReplace(d *dt) {
	a := d.allocator()
	keys := d.keys("k", 3)
	old := values(keys, func(int) int { return 64 })
	d.put(keys, old)
	newer := [][]byte{value("n"+keys[0], 10), value("n"+keys[1], 5000), value("n"+keys[2], 64)}
	st := d.stage(a, keys, newer)
	d.expect("Get of old values before Publish", keys, d.get(keys), old)
	tags := d.publish(st, len(keys))
	d.expect("Get after Publish over old values", keys, d.read(keys, tags), newer)
}

func testAllocateDiscard(d *dt) {
	a := d.allocator()
	keys := d.keys("k", 3)
	old := [][]byte{[]byte("old")}
	d.put(keys[:1], old)
	st := d.stage(a, keys, values(keys, func(i int) int { return 100 * i }))
	if err := st.Discard(d.ctx); err != nil {
		d.t.Fatalf("Discard: %v", err)
	}
	d.expect("Get after Discard", keys, d.get(keys), [][]byte{old[0], nil, nil})
	if err := st.Publish(d.ctx); err == nil {
		d.t.Error("Publish after Discard: got nil error")
	}
	d.expect("Get after Publish of a discarded Staged", keys, d.get(keys), [][]byte{old[0], nil, nil})
}

// testAllocateTwoStaged fills two live Stageds, buffers of the same batch
// and of different batches, with distinct bytes: any buffer sharing memory
// with another shows up as a wrong value.
func testAllocateTwoStaged(d *dt) {
	a := d.allocator()
	ka, kb := d.keys("a", 20), d.keys("b", 20)
	sz := func(i int) int { return []int{1, 7, 64, 4000, 5000}[i%5] }
	va, vb := values(ka, sz), values(kb, sz)
	sta := d.stage(a, ka, va)
	stb := d.stage(a, kb, vb)
	// Refill a's buffers last, so a buffer shared with b shows a's bytes in b.
	for i, b := range sta.Buffers() {
		copy(b, va[i])
	}
	tb := d.publish(stb, len(kb))
	ta := d.publish(sta, len(ka))
	d.expect("Get of the first Staged", ka, d.read(ka, ta), va)
	d.expect("Get of the second Staged", kb, d.read(kb, tb), vb)
}

func testTagged(d *dt) {
	w, isW := d.b.(backends.TaggedWriter)
	r, isR := d.b.(backends.TaggedReader)
	del, isD := d.b.(backends.TaggedDeleter)
	if !isW && !isR && !isD {
		d.t.Skip("backend implements none of backends.TaggedWriter, TaggedReader, TaggedDeleter")
	}
	if isW {
		keys := d.keys("tagged", 6)
		vals := values(keys, func(i int) int { return []int{0, 10, 1000, 100 << 10, 5, 300 << 10}[i] })
		tags, err := w.PutTagged(d.ctx, keys, vals)
		if err != nil {
			d.t.Fatalf("PutTagged: %v", err)
		}
		if len(tags) != len(keys) {
			d.t.Fatalf("PutTagged of %d keys returned %d tags", len(keys), len(tags))
		}
		d.expect("read after PutTagged", keys, d.read(keys, tags), vals)
		if isD {
			if err := del.DeleteTagged(d.ctx, keys[:3], tags[:3]); err != nil {
				d.t.Fatalf("DeleteTagged: %v", err)
			}
			d.expect("read after DeleteTagged", keys, d.read(keys, tags), append(missing(3), vals[3:]...))
			// Deleting again, or keys never written, is no error.
			ghosts := d.keys("ghost", 1)
			if err := del.DeleteTagged(d.ctx, append(keys[:3:3], ghosts...), append(tags[:3:3], "")); err != nil {
				d.t.Errorf("DeleteTagged of missing keys: %v, want nil", err)
			}
		}
	}
	// The tag "" names a key written by plain Put.
	plain := d.keys("plain", 3)
	vals := values(plain, func(i int) int { return 1 + 500*i })
	d.put(plain, vals)
	empty := make([]string, len(plain))
	if isR {
		got, err := r.GetTagged(d.ctx, plain, empty)
		if err != nil {
			d.t.Fatalf("GetTagged with empty tags: %v", err)
		}
		d.expect("GetTagged with empty tags of plain keys", plain, got, vals)
		ghosts := d.keys("ghost", 2)
		got, err = r.GetTagged(d.ctx, ghosts, []string{"", ""})
		if err != nil {
			d.t.Fatalf("GetTagged of missing keys: %v", err)
		}
		d.expect("GetTagged of missing keys", ghosts, got, missing(2))
	}
	if isD {
		if err := del.DeleteTagged(d.ctx, plain[:2], empty[:2]); err != nil {
			d.t.Fatalf("DeleteTagged with empty tags: %v", err)
		}
		d.expect("Get after DeleteTagged with empty tags", plain, d.get(plain), [][]byte{nil, nil, vals[2]})
	}
}

// testConcurrent runs workers that each write, read and delete their own
// keys and keys every worker shares, checking every read, then checks the
// final state each worker's last operations determine: own keys as the
// worker left them, shared keys holding some worker's final value, doomed
// keys (whose last operation in every worker is a Delete) missing. Odd
// workers write through Allocate when the backend has it.
func testConcurrent(d *dt) {
	const (
		workers = 8
		ownN    = 40
		sharedN = 24
		doomedN = 12
		rounds  = 12
		final   = rounds // the round number of each worker's final values
	)
	own := make([][]string, workers)
	for g := range own {
		own[g] = d.keys(fmt.Sprintf("own%d", g), ownN)
	}
	shared, doomed := d.keys("shared", sharedN), d.keys("doomed", doomedN)
	alloc, _ := d.b.(backends.Allocator)
	if _, ok := d.b.(backends.TaggedReader); ok {
		// What Publish wrote may need its tags to be read; this test
		// reads with plain Get.
		alloc = nil
	}
	ctx := d.ctx

	worker := func(g int) error {
		write := func(keys []string, r int) ([][]byte, error) {
			vals := make([][]byte, len(keys))
			for i, k := range keys {
				vals[i] = stamp(k, g, r)
			}
			if alloc == nil || g%2 == 0 {
				return vals, d.b.Put(ctx, keys, vals)
			}
			st, err := alloc.Allocate(ctx, keys, sizes(vals))
			if err != nil {
				return nil, err
			}
			for i, b := range st.Buffers() {
				copy(b, vals[i])
			}
			return vals, st.Publish(ctx)
		}
		// read checks that each value is nil (if mayMiss) or some worker's
		// whole value for its key.
		read := func(keys []string, mayMiss bool) error {
			got, err := d.b.Get(ctx, keys)
			if err != nil {
				return err
			}
			for i, v := range got {
				if v == nil && mayMiss {
					continue
				}
				if _, _, err := unstamp(keys[i], v); err != nil {
					return err
				}
			}
			return nil
		}
		odd := make([]string, 0, ownN/2)
		for i := 1; i < ownN; i += 2 {
			odd = append(odd, own[g][i])
		}
		for r := range rounds {
			vals, err := write(own[g], r)
			if err != nil {
				return fmt.Errorf("round %d: writing own keys: %w", r, err)
			}
			got, err := d.b.Get(ctx, own[g])
			if err != nil {
				return fmt.Errorf("round %d: reading own keys: %w", r, err)
			}
			for i := range got {
				if !bytes.Equal(got[i], vals[i]) {
					return fmt.Errorf("round %d: own key %q: read %d bytes, not the %d just written", r, own[g][i], len(got[i]), len(vals[i]))
				}
			}
			if r%4 == 3 {
				if err := d.b.Delete(ctx, odd); err != nil {
					return fmt.Errorf("round %d: deleting own keys: %w", r, err)
				}
			}
			lo := (g + r) % sharedN
			part := slices.Concat(shared[lo:], shared[:lo])[:sharedN/2]
			if _, err := write(part, r); err != nil {
				return fmt.Errorf("round %d: writing shared keys: %w", r, err)
			}
			if r%3 == 2 {
				if err := d.b.Delete(ctx, part[:4]); err != nil {
					return fmt.Errorf("round %d: deleting shared keys: %w", r, err)
				}
			}
			if err := read(shared, true); err != nil {
				return fmt.Errorf("round %d: reading shared keys: %w", r, err)
			}
			if _, err := write(doomed, r); err != nil {
				return fmt.Errorf("round %d: writing doomed keys: %w", r, err)
			}
			if err := read(doomed, true); err != nil {
				return fmt.Errorf("round %d: reading doomed keys: %w", r, err)
			}
			if r%2 == 1 {
				if err := d.b.Delete(ctx, doomed[r%doomedN:]); err != nil {
					return fmt.Errorf("round %d: deleting doomed keys: %w", r, err)
				}
			}
		}
		if _, err := write(own[g], final); err != nil {
			return fmt.Errorf("final: writing own keys: %w", err)
		}
		if err := d.b.Delete(ctx, odd); err != nil {
			return fmt.Errorf("final: deleting own keys: %w", err)
		}
		if _, err := write(shared, final); err != nil {
			return fmt.Errorf("final: writing shared keys: %w", err)
		}
		if err := d.b.Delete(ctx, doomed); err != nil {
			return fmt.Errorf("final: deleting doomed keys: %w", err)
		}
		return nil
	}

	runWorkers(d.t, workers, worker)
	if d.t.Failed() {
		return
	}

	for g := range workers {
		want := make([][]byte, ownN)
		for i := 0; i < ownN; i += 2 {
			want[i] = stamp(own[g][i], g, final)
		}
		d.expect(fmt.Sprintf("final own keys of worker %d", g), own[g], d.get(own[g]), want)
	}
	for i, v := range d.get(shared) {
		if v == nil {
			d.t.Errorf("final shared key %q: missing, want some worker's final value", shared[i])
			continue
		}
		if _, r, err := unstamp(shared[i], v); err != nil {
			d.t.Errorf("final shared key: %v", err)
		} else if r != final {
			d.t.Errorf("final shared key %q: holds a round-%d value, want a final one", shared[i], r)
		}
	}
	d.expect("final doomed keys", doomed, d.get(doomed), missing(doomedN))
}

// stamp is the value worker g writes to key in round r: a header naming
// all three, then filler derived from them, so a torn or misplaced value
// fails unstamp.
func stamp(key string, g, r int) []byte {
	n := (g*131 + r*17 + len(key)) % 300
	v := fmt.Appendf(nil, "%s|%d|%d|%d|", key, g, r, n)
	for i := range n {
		v = append(v, byte(i*7+g*13+r))
	}
	return v
}

// unstamp checks that v is a whole value stamp wrote for key and returns
// its worker and round.
func unstamp(key string, v []byte) (g, r int, err error) {
	var n int
	head, _, ok := strings.Cut(string(v), "|")
	if !ok || head != key {
		return 0, 0, fmt.Errorf("key %q: value of %d bytes is not stamped with the key", key, len(v))
	}
	if _, err := fmt.Sscanf(string(v[len(key):]), "|%d|%d|%d|", &g, &r, &n); err != nil {
		return 0, 0, fmt.Errorf("key %q: bad stamp: %v", key, err)
	}
	if want := stamp(key, g, r); !bytes.Equal(v, want) {
		return 0, 0, fmt.Errorf("key %q: torn value: %d bytes, stamp of worker %d round %d is %d bytes", key, len(v), g, r, len(want))
	}
	return g, r, nil
}
