package backendtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tqgo/tqgo/backends"
)

// RunStore checks that the stores newStore returns keep the data contract
// of backends.Store (see the package doc), one subtest per rule, each on a
// fresh store from newStore; the Stage subtests run when the store is a
// backends.Stager and are skipped otherwise.
func RunStore(t *testing.T, newStore func(t *testing.T) backends.Store) {
	t.Helper()
	nonce := newNonce()
	for _, tc := range storeTests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			if s == nil {
				t.Fatal("newStore returned nil")
			}
			tc.fn(&dt{t: t, ctx: t.Context(), s: s, prefix: prefix(nonce, t), tags: map[string]string{}})
		})
	}
}

var storeTests = []struct {
	name string
	fn   func(*dt)
}{
	{"WriteRead", testWriteRead},
	{"SharedHead", testSharedHead},
	{"ReadValue", testReadValue},
	{"ReadMissing", testReadMissing},
	{"Overwrite", testOverwrite},
	{"Delete", testDelete},
	{"Tags", testTags},
	{"DeleteUntagged", testDeleteUntagged},
	{"EmptyBatch", testEmptyBatch},
	{"CallerMemory", testCallerMemory},
	{"ValueStable", testValueStable},
	{"LargeValues", testLargeValues},
	{"ManyKeys", testManyKeys},
	{"BinaryValues", testBinaryValues},
	{"ZeroLength", testZeroLength},
	{"CancelledContext", testCancelled},
	{"Concurrent", testConcurrent},
	{"Closed", testClosed},
	{"StageWrite", testStageWrite},
	{"StageReplace", testStageReplace},
	{"StageDisjoint", testStageDisjoint},
	{"StageMixed", testStageMixed},
	{"Unstage", testUnstage},
	{"UnstageAfterWrite", testUnstageAfterWrite},
	{"StageInvalid", testStageInvalid},
	{"StageClosed", testStageClosed},
}

// dt is one data subtest: its store, its key prefix, and the tag the
// store's last Write gave each key.
type dt struct {
	t      *testing.T
	ctx    context.Context
	s      backends.Store
	prefix string

	mu   sync.Mutex // guards tags
	tags map[string]string
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

// cells returns a cell per key holding vals[i], cut into Head and Body at
// a place that varies with i: no Head, no Body, or both.
func cells(keys []string, vals [][]byte) []backends.Cell {
	out := make([]backends.Cell, len(keys))
	for i, k := range keys {
		v := vals[i]
		var cut int
		switch i % 3 {
		case 0:
			cut = 0
		case 1:
			cut = min(len(v), 9)
		default:
			cut = len(v)
		}
		out[i] = backends.Cell{Key: k, Head: v[:cut:cut], Body: v[cut:], Tag: "not-the-engine's"}
	}
	return out
}

// write writes cs and records their tags.
func (d *dt) write(cs []backends.Cell) {
	d.t.Helper()
	if err := d.s.Write(d.ctx, cs); err != nil {
		d.t.Fatalf("Write of %d cells: %v", len(cs), err)
	}
	d.noteTags(cs)
}

func (d *dt) noteTags(cs []backends.Cell) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range cs {
		d.tags[c.Key] = c.Tag
	}
}

func (d *dt) tag(key string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.tags[key]
}

// put writes vals under keys (cut as cells cuts them).
func (d *dt) put(keys []string, vals [][]byte) {
	d.t.Helper()
	d.write(cells(keys, vals))
}

// refs returns the cells naming keys, with the tags their writes gave.
func (d *dt) refs(keys []string) []backends.Cell {
	out := make([]backends.Cell, len(keys))
	for i, k := range keys {
		out[i] = backends.Cell{Key: k, Tag: d.tag(k)}
	}
	return out
}

func (d *dt) del(keys []string) {
	d.t.Helper()
	if err := d.s.Delete(d.ctx, d.refs(keys)); err != nil {
		d.t.Fatalf("Delete of %d keys: %v", len(keys), err)
	}
}

// readCells returns a ReadCell per key with its tag and destinations of
// size[i] bytes (a negative size: none), Head of up to 5 bytes. Found and
// Value hold junk, which Read must overwrite.
func (d *dt) readCells(keys []string, size func(i int) int) []backends.ReadCell {
	out := make([]backends.ReadCell, len(keys))
	for i, k := range keys {
		out[i] = backends.ReadCell{Key: k, Tag: d.tag(k), Found: true, Value: []byte("junk")}
		if n := size(i); n >= 0 {
			buf := bytes.Repeat([]byte{0xee}, n)
			h := min(n, 5*(i%2)) // every other cell with no Head
			out[i].Head, out[i].Body = buf[:h:h], buf[h:]
		}
	}
	return out
}

// get reads keys with empty destinations and returns each value (nil:
// missing), checking that a found value came in Value.
func (d *dt) get(keys []string) [][]byte {
	d.t.Helper()
	rc := d.readCells(keys, func(int) int { return -1 })
	if err := d.s.Read(d.ctx, rc); err != nil {
		d.t.Fatalf("Read of %d keys: %v", len(keys), err)
	}
	out := make([][]byte, len(keys))
	for i, c := range rc {
		switch {
		case !c.Found && c.Value != nil:
			d.t.Fatalf("Read of key %q: not Found, but Value set (%d bytes)", keys[i], len(c.Value))
		case c.Found && c.Value == nil:
			out[i] = []byte{} // Value nil is a zero-length value too
		case c.Found:
			out[i] = c.Value
		}
	}
	return out
}

// getInto reads keys into destinations of want's lengths (missing wants:
// none) and returns what each read gave: the destinations joined, or
// Value, or nil for not Found; where the value has want's length it must
// be in the destinations, with Value nil.
func (d *dt) getInto(keys []string, want [][]byte) [][]byte {
	d.t.Helper()
	rc := d.readCells(keys, func(i int) int {
		if want[i] == nil {
			return -1
		}
		return len(want[i])
	})
	if err := d.s.Read(d.ctx, rc); err != nil {
		d.t.Fatalf("Read of %d keys: %v", len(keys), err)
	}
	out := make([][]byte, len(keys))
	for i, c := range rc {
		switch {
		case !c.Found:
			if c.Value != nil {
				d.t.Fatalf("Read of key %q: not Found, but Value set", keys[i])
			}
		case c.Value != nil || want[i] == nil:
			if want[i] != nil && len(c.Value) == len(want[i]) && len(want[i]) > 0 {
				d.t.Fatalf("Read of key %q: a value of the destination's length (%d) came in Value, not the destination", keys[i], len(want[i]))
			}
			out[i] = c.Value
			if out[i] == nil {
				out[i] = []byte{}
			}
		default:
			out[i] = slices.Concat([]byte{}, c.Head, c.Body)
		}
	}
	return out
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
			msg = fmt.Sprintf("got %d bytes, want missing", len(got[i]))
		case want[i] != nil && got[i] == nil:
			msg = fmt.Sprintf("got missing, want %d bytes", len(want[i]))
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

// expectBoth checks keys both ways: into destinations of want's lengths,
// and whole into Value.
func (d *dt) expectBoth(what string, keys []string, want [][]byte) {
	d.t.Helper()
	d.expect(what+" (into destinations)", keys, d.getInto(keys, want), want)
	d.expect(what+" (into Value)", keys, d.get(keys), want)
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

func testWriteRead(d *dt) {
	keys := d.keys("k", 12)
	vals := values(keys, func(i int) int { return 1 + i*97 })
	d.put(keys, vals)
	d.expectBoth("Read after Write", keys, vals)

	// Another order, with a key asked for twice.
	ask := []string{keys[3], keys[0], keys[3], keys[9]}
	d.expectBoth("Read in another order", ask, [][]byte{vals[3], vals[0], vals[3], vals[9]})
}

// Cells of one Write may share one Head (tq's codec prefix of a stacked
// column), and cells with no Head or no Body are whole values.
func testSharedHead(d *dt) {
	keys := d.keys("k", 40)
	head := []byte("shared codec head:")
	cs := make([]backends.Cell, len(keys))
	want := make([][]byte, len(keys))
	for i, k := range keys {
		body := value(k, []int{0, 1, 100, 5000, 70 << 10}[i%5])
		cs[i] = backends.Cell{Key: k, Head: head, Body: body}
		want[i] = slices.Concat(head, body)
	}
	d.write(cs)
	d.expectBoth("Read of cells sharing a Head", keys, want)
}

// A value of another length than the destinations comes whole in Value;
// so does every value read with empty destinations.
func testReadValue(d *dt) {
	keys := d.keys("k", 6)
	vals := values(keys, func(i int) int { return 10 + 100*i })
	d.put(keys, vals)
	for _, delta := range []int{-1, 1, -10} {
		rc := d.readCells(keys, func(i int) int { return len(vals[i]) + delta })
		if err := d.s.Read(d.ctx, rc); err != nil {
			d.t.Fatalf("Read: %v", err)
		}
		for i, c := range rc {
			if !c.Found || !bytes.Equal(c.Value, vals[i]) {
				d.t.Errorf("Read of a %d-byte value into %d bytes: Found %v, Value of %d bytes, want the whole value in Value", len(vals[i]), len(vals[i])+delta, c.Found, len(c.Value))
			}
		}
	}
	d.expect("Read with empty destinations", keys, d.get(keys), vals)
}

func testReadMissing(d *dt) {
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
	d.expect("Read of present and missing keys", keys, d.get(keys), want)
	never := d.keys("never", 3)
	d.expect("Read of missing keys", never, d.get(never), missing(3))
	// Destinations given for a missing key: still not Found.
	d.expect("Read of missing keys into destinations", never, d.getInto(never, [][]byte{{1}, {}, make([]byte, 10)}), missing(3))
}

func testOverwrite(d *dt) {
	keys := d.keys("k", 3)
	d.put(keys, values(keys, func(int) int { return 100 }))
	// Longer, shorter and equal-length replacements.
	newer := [][]byte{value("a"+keys[0], 5000), value("b"+keys[1], 7), value("c"+keys[2], 100)}
	d.put(keys, newer)
	d.expectBoth("Read after overwrite", keys, newer)
}

func testDelete(d *dt) {
	keys := d.keys("k", 6)
	vals := values(keys, func(int) int { return 50 })
	d.put(keys, vals)
	ghosts := d.keys("ghost", 2)
	d.del([]string{keys[0], keys[2], ghosts[0], keys[4], ghosts[1]})
	d.expect("Read after Delete", keys, d.get(keys), [][]byte{nil, vals[1], nil, vals[3], nil, vals[5]})

	d.del(ghosts)                     // only missing keys
	d.del([]string{keys[0], keys[0]}) // already deleted, and twice
	again := [][]byte{[]byte("again")}
	d.put(keys[:1], again) // a deleted key can be written again
	d.expect("Read after Write of a deleted key", keys[:2], d.get(keys[:2]), [][]byte{again[0], vals[1]})
}

// Write sets every cell's Tag (overwriting what the caller left there),
// and Read and Delete given those tags find the values: the tags are what
// the rest of the suite reads and deletes with.
func testTags(d *dt) {
	keys := d.keys("k", 6)
	vals := values(keys, func(i int) int { return []int{0, 10, 1000, 100 << 10, 5, 300 << 10}[i] })
	cs := cells(keys, vals)
	if err := d.s.Write(d.ctx, cs); err != nil {
		d.t.Fatalf("Write: %v", err)
	}
	for _, c := range cs {
		if c.Tag == "not-the-engine's" {
			d.t.Fatalf("Write left the caller's Tag in cell %q: Write sets every Tag", c.Key)
		}
	}
	d.noteTags(cs)
	d.expectBoth("Read with Write's tags", keys, vals)
	if err := d.s.Delete(d.ctx, cs[:3]); err != nil {
		d.t.Fatalf("Delete with Write's tags: %v", err)
	}
	d.expect("Read after Delete with Write's tags", keys, d.get(keys), append(missing(3), vals[3:]...))
}

// Delete with the Tag "" removes a value whatever tag Write gave it: the
// metadata never learns the tag of a reservation that was aborted before
// its commit (MetaStore.Garbage returns such cells with Tag ""), and their
// cells must still be deletable.
func testDeleteUntagged(d *dt) {
	keys := d.keys("k", 4)
	vals := values(keys, func(i int) int { return []int{0, 10, 5000, 300 << 10}[i] })
	d.put(keys, vals)
	untagged := make([]backends.Cell, len(keys))
	for i, k := range keys {
		untagged[i] = backends.Cell{Key: k}
	}
	if err := d.s.Delete(d.ctx, untagged); err != nil {
		d.t.Fatalf("Delete with Tag \"\": %v", err)
	}
	d.expect("Read after Delete with Tag \"\"", keys, d.get(keys), missing(len(keys)))
}

func testEmptyBatch(d *dt) {
	keep := d.keys("keep", 1)
	keepVal := [][]byte{[]byte("kept")}
	d.put(keep, keepVal)
	for _, n := range []int{-1, 0} {
		what := "nil"
		var cs []backends.Cell
		var rc []backends.ReadCell
		if n == 0 {
			what, cs, rc = "zero-length", []backends.Cell{}, []backends.ReadCell{}
		}
		if err := d.s.Write(d.ctx, cs); err != nil {
			d.t.Errorf("Write of a %s batch: %v, want nil", what, err)
		}
		if err := d.s.Read(d.ctx, rc); err != nil {
			d.t.Errorf("Read of a %s batch: %v, want nil", what, err)
		}
		if err := d.s.Delete(d.ctx, cs); err != nil {
			d.t.Errorf("Delete of a %s batch: %v, want nil", what, err)
		}
		if st, ok := d.s.(backends.Stager); ok {
			if err := st.Stage(d.ctx, cs, nil); err != nil {
				d.t.Errorf("Stage of a %s batch: %v, want nil", what, err)
			}
			st.Unstage(cs)
		}
	}
	d.expect("Read after empty batches", keep, d.get(keep), keepVal)
}

// Write keeps no caller memory: the caller may reuse Head and Body (a
// shared Head too, or a Body with no Head) as soon as Write returns.
func testCallerMemory(d *dt) {
	keys := d.keys("k", 30)
	head := []byte("head")
	cs := make([]backends.Cell, len(keys))
	want := make([][]byte, len(keys))
	for i, k := range keys {
		body := value(k, []int{1, 100, 5000, 70 << 10, 300 << 10}[i%5])
		cs[i] = backends.Cell{Key: k, Body: body}
		if i%2 == 0 {
			cs[i].Head = head
		}
		want[i] = slices.Concat(cs[i].Head, body)
	}
	d.write(cs)
	head[0] ^= 0xff
	for _, c := range cs {
		for j := range c.Body {
			c.Body[j] ^= 0xff
		}
	}
	d.expectBoth("Read after the caller changed the memory it wrote from", keys, want)
}

// A Value the caller holds stays as it was while the key is rewritten and
// deleted.
func testValueStable(d *dt) {
	keys := d.keys("k", 3)
	vals := values(keys, func(i int) int { return []int{5, 5000, 300 << 10}[i] })
	d.put(keys, vals)
	held := d.get(keys)
	d.put(keys, values(keys, func(i int) int { return len(vals[i]) + 1 }))
	d.put(keys, values(keys, func(i int) int { return len(vals[i]) }))
	d.del(keys[:1])
	d.expect("a held Value after the key was rewritten and deleted", keys, held, vals)
}

func testLargeValues(d *dt) {
	big := d.keys("big", 1)
	bigVal := [][]byte{value(big[0], 8<<20)}
	d.put(big, bigVal)
	d.expectBoth("Read of an 8 MiB value", big, bigVal)

	keys := d.keys("k", 64)
	vals := values(keys, func(int) int { return 256 << 10 })
	d.put(keys, vals)
	d.expectBoth("Read of 64 x 256 KiB", keys, vals)
}

func testManyKeys(d *dt) {
	keys := d.keys("k", 25000)
	vals := values(keys, func(i int) int { return 16 + i%32 })
	d.put(keys, vals)
	d.expectBoth("Read of 25,000 keys", keys, vals)
	d.del(keys)
	d.expect("Read of 25,000 deleted keys", keys, d.get(keys), missing(len(keys)))
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
	d.expectBoth("Read of binary values", keys, vals)
}

// A zero-length value (no Head, no Body) is a value: Found, with Value of
// length 0, whether read with empty destinations or not.
func testZeroLength(d *dt) {
	keys := d.keys("k", 3)
	d.write([]backends.Cell{{Key: keys[0]}, {Key: keys[1], Body: []byte("x")}, {Key: keys[2], Head: []byte{}, Body: make([]byte, 0, 16)}})
	want := [][]byte{{}, []byte("x"), {}}
	d.expect("Read of zero-length values", keys, d.get(keys), want)
	d.expect("Read of zero-length values into destinations", keys, d.getInto(keys, [][]byte{make([]byte, 3), []byte("?"), {}}), want)
	d.write([]backends.Cell{{Key: keys[1]}})
	d.expect("Read of a value overwritten with a zero-length one", keys[1:2], d.get(keys[1:2]), [][]byte{{}})
	d.del(keys[:1])
	d.expect("Read of a deleted zero-length value", keys[:1], d.get(keys[:1]), missing(1))
}

func testCancelled(d *dt) {
	keys := d.keys("k", 2)
	vals := values(keys, func(int) int { return 10 })
	d.put(keys[:1], vals[:1])
	ctx, cancel := context.WithCancel(d.ctx)
	cancel()
	d.wantErr("Write with a cancelled context", d.s.Write(ctx, cells(keys[1:], vals[1:])), context.Canceled)
	d.wantErr("Read with a cancelled context", d.s.Read(ctx, d.readCells(keys, func(int) int { return -1 })), context.Canceled)
	d.wantErr("Delete with a cancelled context", d.s.Delete(ctx, d.refs(keys[:1])), context.Canceled)
	d.expect("Read after calls with a cancelled context", keys, d.get(keys), [][]byte{vals[0], nil})
}

func testClosed(d *dt) {
	keys := d.keys("k", 1)
	vals := [][]byte{[]byte("v")}
	d.put(keys, vals)
	if err := d.s.Close(); err != nil {
		d.t.Fatalf("Close: %v", err)
	}
	d.wantErr("Write after Close", d.s.Write(d.ctx, cells(keys, vals)), backends.ErrClosed)
	d.wantErr("Read after Close", d.s.Read(d.ctx, d.readCells(keys, func(int) int { return -1 })), backends.ErrClosed)
	d.wantErr("Delete after Close", d.s.Delete(d.ctx, d.refs(keys)), backends.ErrClosed)
}

// testConcurrent runs workers that each write, read and delete their own
// keys and keys every worker shares, checking every read, then checks the
// final state each worker's last operations determine: own keys as the
// worker left them, shared keys holding some worker's final value, doomed
// keys (whose last operation in every worker is a Delete) missing. Odd
// workers write through Stage when the store is a Stager. Every value is
// under 400 bytes, and a worker reads a key with the tag of its own last
// write of it.
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
	stager, _ := d.s.(backends.Stager)
	ctx := d.ctx

	worker := func(g int) error {
		tags := map[string]string{}
		refs := func(keys []string) []backends.Cell {
			out := make([]backends.Cell, len(keys))
			for i, k := range keys {
				out[i] = backends.Cell{Key: k, Tag: tags[k]}
			}
			return out
		}
		write := func(keys []string, r int) ([][]byte, error) {
			vals := make([][]byte, len(keys))
			for i, k := range keys {
				vals[i] = stamp(k, g, r)
			}
			var cs []backends.Cell
			if stager == nil || g%2 == 0 {
				cs = cells(keys, vals)
			} else {
				cs = refs(keys)
				if err := stager.Stage(ctx, cs, sizes(vals)); err != nil {
					return nil, err
				}
				for i, c := range cs {
					copy(c.Body, vals[i])
				}
			}
			if err := d.s.Write(ctx, cs); err != nil {
				if stager != nil {
					stager.Unstage(cs)
				}
				return nil, err
			}
			for _, c := range cs {
				tags[c.Key] = c.Tag
			}
			return vals, nil
		}
		// read returns the values of keys, checking that each is missing
		// (if mayMiss) or some worker's whole value for its key.
		read := func(keys []string, mayMiss bool) ([][]byte, error) {
			rc := make([]backends.ReadCell, len(keys))
			for i, k := range keys {
				rc[i] = backends.ReadCell{Key: k, Tag: tags[k]}
			}
			if err := d.s.Read(ctx, rc); err != nil {
				return nil, err
			}
			out := make([][]byte, len(keys))
			for i, c := range rc {
				if !c.Found {
					if mayMiss {
						continue
					}
					return nil, fmt.Errorf("key %q: missing", keys[i])
				}
				if _, _, err := unstamp(keys[i], c.Value); err != nil {
					return nil, err
				}
				out[i] = c.Value
			}
			return out, nil
		}
		del := func(keys []string) error { return d.s.Delete(ctx, refs(keys)) }
		odd := make([]string, 0, ownN/2)
		for i := 1; i < ownN; i += 2 {
			odd = append(odd, own[g][i])
		}
		for r := range rounds {
			vals, err := write(own[g], r)
			if err != nil {
				return fmt.Errorf("round %d: writing own keys: %w", r, err)
			}
			got, err := read(own[g], false)
			if err != nil {
				return fmt.Errorf("round %d: reading own keys: %w", r, err)
			}
			for i := range got {
				if !bytes.Equal(got[i], vals[i]) {
					return fmt.Errorf("round %d: own key %q: read %d bytes, not the %d just written", r, own[g][i], len(got[i]), len(vals[i]))
				}
			}
			if r%4 == 3 {
				if err := del(odd); err != nil {
					return fmt.Errorf("round %d: deleting own keys: %w", r, err)
				}
			}
			lo := (g + r) % sharedN
			part := slices.Concat(shared[lo:], shared[:lo])[:sharedN/2]
			if _, err := write(part, r); err != nil {
				return fmt.Errorf("round %d: writing shared keys: %w", r, err)
			}
			if r%3 == 2 {
				if err := del(part[:4]); err != nil {
					return fmt.Errorf("round %d: deleting shared keys: %w", r, err)
				}
			}
			if _, err := read(shared, true); err != nil {
				return fmt.Errorf("round %d: reading shared keys: %w", r, err)
			}
			if _, err := write(doomed, r); err != nil {
				return fmt.Errorf("round %d: writing doomed keys: %w", r, err)
			}
			if _, err := read(doomed, true); err != nil {
				return fmt.Errorf("round %d: reading doomed keys: %w", r, err)
			}
			if r%2 == 1 {
				if err := del(doomed[r%doomedN:]); err != nil {
					return fmt.Errorf("round %d: deleting doomed keys: %w", r, err)
				}
			}
		}
		if _, err := write(own[g], final); err != nil {
			return fmt.Errorf("final: writing own keys: %w", err)
		}
		if err := del(odd); err != nil {
			return fmt.Errorf("final: deleting own keys: %w", err)
		}
		if _, err := write(shared, final); err != nil {
			return fmt.Errorf("final: writing shared keys: %w", err)
		}
		if err := del(doomed); err != nil {
			return fmt.Errorf("final: deleting doomed keys: %w", err)
		}
		d.mu.Lock()
		for k, tag := range tags {
			d.tags[k] = tag
		}
		d.mu.Unlock()
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
