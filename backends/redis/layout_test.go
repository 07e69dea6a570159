package redis

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tqgo/tqgo/backends"
)

// The worked example of LAYOUT.md: partition "step-3" under prefix "tq",
// records with the ids 0000000000000001, 0000000000000002, ... and
// reservation times from layoutT0 on (server time, microseconds).
const (
	layoutPrefix = "tq"
	layoutT0     = int64(1796083200000000) // 2026-12-01T00:00:00Z
)

// layoutID is the id of the example's record n.
func layoutID(n int) string { return fmt.Sprintf("%016x", n) }

// storedPrepare is a Prepare record as the append script stores it: the
// base of the new rows' indexes and the server's time go after the id.
func storedPrepare(keys, fields []string, id string, base uint64, at int64) []byte {
	rec := prepareRecord(keys, fields)
	setID(rec, id)
	return slices.Concat(rec[:bodyAt], []byte(strconv.FormatUint(base, 10)+":"+strconv.FormatInt(at, 10)), rec[bodyAt:])
}

// storedAbort is an abort record as the script stores it: the cutoff
// after the id.
func storedAbort(id string, cutoff int64) []byte {
	rec := bareRecord(recAbort)
	setID(rec, id)
	return append(rec, strconv.FormatInt(cutoff, 10)...)
}

func withID(rec []byte, id string) []byte {
	setID(rec, id)
	return rec
}

// layoutLog builds the example's log with the package's encoders, in
// order.
func layoutLog(t *testing.T) [][]byte {
	t.Helper()
	x0 := map[string]backends.FieldInfo{"x": {DType: "float32", Shape: []int64{3}, Gen: 0}}
	r0 := map[string]backends.FieldInfo{"r": {Gen: 0}}
	x1 := map[string]backends.FieldInfo{"x": {DType: "float32", Shape: []int64{3}, Gen: 1}}
	rollout := map[string]any{"status": "rollout"}
	commit := func(n int, ups []backends.RowUpdate) []byte {
		rec, err := commitRecord(ups)
		if err != nil {
			t.Fatal(err)
		}
		return withID(rec, layoutID(n))
	}
	return [][]byte{
		storedPrepare([]string{"a", "b"}, []string{"x"}, layoutID(1), 7, layoutT0),
		commit(2, []backends.RowUpdate{
			{Key: "a", Index: 7, Fields: x0, Tag: rollout},
			{Key: "b", Index: 8, Fields: x0, Tag: rollout},
		}),
		storedPrepare([]string{"a", "b"}, []string{"r"}, layoutID(3), 9, layoutT0+1_000_000),
		commit(4, []backends.RowUpdate{{Key: "a", Index: 7, Fields: r0, Tag: map[string]any{"score": uint64(3)}}}),
		withID(deleteRecord([]string{"b"}), layoutID(5)),
		storedPrepare([]string{"a"}, []string{"x"}, layoutID(6), 9, layoutT0+2_000_000),
		commit(7, []backends.RowUpdate{{Key: "a", Index: 7, Fields: x1}}),
		withID(sweptRecord([]backends.Ref{{Index: 8, Field: "x", Gen: 0}}), layoutID(8)),
		withID(bareRecord(recFence), layoutID(9)),
		storedPrepare([]string{"a"}, []string{"x"}, layoutID(10), 9, layoutT0+3_000_000),
		storedAbort(layoutID(11), layoutT0+1_500_000),
	}
}

// layoutSnapshotAt is how many records of the example's log the
// example's snapshot replaces; its id is layoutID(12).
const layoutSnapshotAt = 10

// replayLayout replays recs, a whole log, into a fresh view.
func replayLayout(t *testing.T, recs [][]byte) *view {
	t.Helper()
	strs := make([]string, len(recs))
	for i, r := range recs {
		strs[i] = string(r)
	}
	v := newView()
	if _, err := v.catchUp(v.era, 0, "e", 0, headOf("", strs), strs); err != nil {
		t.Fatal(err)
	}
	return v
}

// docBlock returns the text of the fenced block that follows the marker
// <!-- name --> in doc.
func docBlock(t *testing.T, doc, name string) string {
	t.Helper()
	begin := "<!-- " + name + " -->\n```\n"
	i := strings.Index(doc, begin)
	if i < 0 {
		t.Fatalf("LAYOUT.md has no %q block", name)
	}
	rest := doc[i+len(begin):]
	j := strings.Index(rest, "```")
	if j < 0 {
		t.Fatalf("LAYOUT.md: unterminated %q block", name)
	}
	return rest[:j]
}

// layoutHex is LAYOUT.md's dump of b: 16 bytes a line after the offset,
// then the bytes as text (. for any byte outside printable ASCII).
func layoutHex(b []byte) string {
	var sb strings.Builder
	for off := 0; off < len(b); off += 16 {
		line := b[off:min(off+16, len(b))]
		fmt.Fprintf(&sb, "%04x:", off)
		for _, c := range line {
			fmt.Fprintf(&sb, " %02x", c)
		}
		sb.WriteString(strings.Repeat("   ", 16-len(line)))
		sb.WriteString("  ")
		for _, c := range line {
			if c < 0x20 || c > 0x7e {
				c = '.'
			}
			sb.WriteByte(c)
		}
		sb.WriteByte('\n')
	}
	return sb.String()
}

// renderView prints a view's state the way LAYOUT.md's state blocks do:
// rows by key, then the garbage and orphans (sorted: their order in a
// view says nothing).
func renderView(v *view, prefix string) string {
	var sb strings.Builder
	for _, k := range slices.Sorted(maps.Keys(v.rows)) {
		r := v.rows[k]
		state := "prepared (invisible)"
		if r.row != nil {
			state = "committed"
		}
		fmt.Fprintf(&sb, "row %q: index %d, %s\n", k, r.index, state)
		if r.row != nil {
			for _, f := range slices.Sorted(maps.Keys(r.row.Fields)) {
				fi := r.row.Fields[f]
				fmt.Fprintf(&sb, "  field %q: %s, gen %d, cell %s:d:%s\n", f, describeCell(fi.DType, fi.Shape, fi.BackendTag), fi.Gen, prefix, backends.StorageKey(r.index, f, fi.Gen))
			}
			fmt.Fprintf(&sb, "  tag: %s\n", describeTag(r.row.Tag))
		}
		gens := slices.Clone(r.gens)
		slices.SortFunc(gens, func(a, b fieldGen) int { return strings.Compare(a.field, b.field) })
		for _, g := range gens {
			fmt.Fprintf(&sb, "  next %q: %d", g.field, g.next)
			for _, p := range g.pend {
				fmt.Fprintf(&sb, ", reserved %d at %d", p.gen, p.at)
			}
			sb.WriteByte('\n')
		}
	}
	var garbage, orphans []string
	for _, r := range v.garbage {
		garbage = append(garbage, r.Key())
	}
	for _, o := range v.orphans {
		orphans = append(orphans, fmt.Sprintf("%s at %d", o.ref.Key(), o.at))
	}
	fmt.Fprintf(&sb, "garbage: %s\norphans: %s\n", listOrNone(garbage), listOrNone(orphans))
	return sb.String()
}

// describeCell is a committed cell's metadata as a state block prints it.
func describeCell(dtype string, shape []int64, backendTag string) string {
	s := "value"
	if dtype != "" {
		s = fmt.Sprintf("%s %v", dtype, shape)
	}
	if backendTag != "" {
		s += fmt.Sprintf(" (backend tag %q)", backendTag)
	}
	return s
}

// describeTag prints a tag as a state block does: keys in order, each
// value with its type.
func describeTag(tag map[string]any) string {
	if tag == nil {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(tag)) {
		parts = append(parts, fmt.Sprintf("%q = %s", k, describeTagValue(tag[k])))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func describeTagValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "nil"
	case string:
		return fmt.Sprintf("string %q", x)
	case []byte:
		return fmt.Sprintf("bytes %x", x)
	case []any:
		var parts []string
		for _, e := range x {
			parts = append(parts, describeTagValue(e))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case map[string]any:
		return describeTag(x)
	}
	return fmt.Sprintf("%T %v", v, v)
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	slices.Sort(s)
	return strings.Join(s, ", ")
}

// TestLayoutDocExamples keeps LAYOUT.md's worked example honest: its
// records are what the package's encoders (and the append script's
// stamps) produce, byte for byte; its heads are chainHead's; and
// replaying them (the log, or the snapshot and what follows it) gives the
// rows its state blocks show.
func TestLayoutDocExamples(t *testing.T) {
	raw, err := os.ReadFile("LAYOUT.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	recs := layoutLog(t)
	for i, rec := range recs {
		name := fmt.Sprintf("record:%d", i+1)
		if got, want := docBlock(t, doc, name), layoutHex(rec); got != want {
			t.Errorf("LAYOUT.md %q is stale; the encoders give:\n%s", name, want)
		}
	}
	var heads strings.Builder
	head := ""
	for i, rec := range recs {
		id, _ := recordID(string(rec))
		head = chainHead(head, id)
		fmt.Fprintf(&heads, "%2d %s %s\n", i+1, id, head)
	}
	if got := docBlock(t, doc, "heads"); got != heads.String() {
		t.Errorf("LAYOUT.md heads are stale; chainHead gives:\n%s", heads.String())
	}
	v := replayLayout(t, recs)
	if got, want := docBlock(t, doc, "state:log"), renderView(v, layoutPrefix); got != want {
		t.Errorf("LAYOUT.md state:log differs from the replayed view:\n%s", want)
	}
	if list := v.committed(); len(list) != 1 || list[0].Key != "a" {
		t.Errorf("the example lists %v, want row a alone", list)
	}

	before := replayLayout(t, recs[:layoutSnapshotAt])
	snap, err := before.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	setID(snap, layoutID(12))
	if got, want := docBlock(t, doc, "record:snapshot"), layoutHex(snap); got != want {
		t.Errorf("LAYOUT.md snapshot is stale; the view's snapshot gives:\n%s", want)
	}
	if got, want := docBlock(t, doc, "state:snapshot"), renderView(before, layoutPrefix); got != want {
		t.Errorf("LAYOUT.md state:snapshot differs from the view the snapshot is of:\n%s", want)
	}
	compacted := replayLayout(t, [][]byte{snap})
	if d := diffViews(compacted, before); d != "" {
		t.Errorf("the snapshot replays into another state than the records it replaces: %s", d)
	}
	compacted = replayLayout(t, append([][]byte{snap}, recs[layoutSnapshotAt:]...))
	if got, want := renderView(compacted, layoutPrefix), renderView(v, layoutPrefix); got != want {
		t.Errorf("snapshot and the records after it replay into\n%s\nthe whole log into\n%s", got, want)
	}

	// The commit the example shows as skipped: x generation 2 of a is
	// pending, but r generation 1 was never reserved.
	skip, err := commitRecord([]backends.RowUpdate{
		{Key: "a", Index: 7, Fields: map[string]backends.FieldInfo{"x": {DType: "float32", Shape: []int64{3}, Gen: 2}}},
		{Key: "a", Index: 7, Fields: map[string]backends.FieldInfo{"r": {Gen: 1}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	setID(skip, layoutID(13))
	if got, want := docBlock(t, doc, "record:skipped"), layoutHex(skip); got != want {
		t.Errorf("LAYOUT.md skipped commit is stale; the encoder gives:\n%s", want)
	}
	skipped := replayLayout(t, append(slices.Clone(recs), skip))
	if got, want := renderView(skipped, layoutPrefix), renderView(v, layoutPrefix); got != want {
		t.Errorf("the skipped commit changed the state:\n%s", got)
	}
}

// TestLayoutHexDump: the dump LAYOUT.md uses reads back to its bytes
// (the reader test parses the doc's blocks with parseLayoutHex).
func TestLayoutHexDump(t *testing.T) {
	for _, rec := range layoutLog(t) {
		if got := parseLayoutHex(t, layoutHex(rec)); !bytes.Equal(got, rec) {
			t.Fatalf("dump of % x reads back as % x", rec, got)
		}
	}
}

// parseLayoutHex reads a dump layoutHex wrote: the hex between the
// offset and the two spaces before the text.
func parseLayoutHex(t *testing.T, dump string) []byte {
	t.Helper()
	var out []byte
	for line := range strings.Lines(dump) {
		_, rest, ok := strings.Cut(line, ":")
		if !ok {
			t.Fatalf("dump line %q has no offset", line)
		}
		for i := 0; i+3 <= len(rest) && rest[i] == ' ' && rest[i+1] != ' '; i += 3 {
			b, err := strconv.ParseUint(rest[i+1:i+3], 16, 8)
			if err != nil {
				t.Fatalf("dump line %q: %v", line, err)
			}
			out = append(out, byte(b))
		}
	}
	return out
}
