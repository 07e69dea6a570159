package redis_test

// A reader of a partition written from LAYOUT.md alone: it decodes records
// with msgp's primitives and none of the package's decoders (this file is
// outside the package), replays them by the document's rules, and is
// checked against the document's worked example and against what tq wrote
// to a real server.

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"
	"github.com/tinylib/msgp/msgp"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/codec"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

// lrCell is a committed cell: a field table entry.
type lrCell struct {
	dtype      string
	shape      []int64
	gen        uint64
	backendTag string
}

type lrReservation struct {
	gen uint64
	at  int64
}

type lrRow struct {
	key       string
	index     uint64
	next      map[string]uint64
	pending   map[string][]lrReservation
	committed bool
	fields    map[string]lrCell
	tag       map[string]any
}

// lrRef names a cell: (index, field, gen), with an orphan's time.
type lrRef struct {
	index uint64
	field string
	gen   uint64
	at    int64
}

// lrState is a replayed partition (LAYOUT.md section 4).
type lrState struct {
	rows    map[string]*lrRow
	garbage []lrRef
	orphans []lrRef
}

// lrStorageKey is LAYOUT.md section 6's storage key.
func lrStorageKey(index uint64, field string, gen uint64) string {
	if gen == 0 {
		return fmt.Sprintf("%d@%s", index, field)
	}
	return fmt.Sprintf("%d@%s#%d", index, field, gen)
}

// lrHead is the head of a log whose records are recs (section 2).
func lrHead(head string, recs [][]byte) string {
	for _, r := range recs {
		sum := sha1.Sum(append([]byte(head), r[1:17]...))
		head = hex.EncodeToString(sum[:])
	}
	return head
}

// lrKeys are the partition's key names (section 1).
func lrKeys(prefix, partition string) (l, e, h, n string) {
	esc := strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D").Replace(partition)
	base := prefix + ":{" + prefix + ":" + esc + "}"
	return base + ":l", base + ":e", base + ":h", base + ":n"
}

// lrRead reads a partition's log atomically and checks its chain
// (section 2); no log gives no records.
func lrRead(ctx context.Context, c goredis.UniversalClient, prefix, partition string) ([][]byte, error) {
	l, e, h, _ := lrKeys(prefix, partition)
	var getE, getH *goredis.StringCmd
	var rng *goredis.StringSliceCmd
	if _, err := c.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		getE, getH, rng = p.Get(ctx, e), p.Get(ctx, h), p.LRange(ctx, l, 0, -1)
		return nil
	}); err != nil && !errors.Is(err, goredis.Nil) {
		return nil, err
	}
	list, err := rng.Result()
	if err != nil {
		return nil, err
	}
	if errors.Is(getE.Err(), goredis.Nil) {
		if len(list) != 0 {
			return nil, fmt.Errorf("a log of %d records without an epoch", len(list))
		}
		return nil, nil
	}
	head, err := getH.Result()
	if err != nil {
		return nil, err
	}
	recs := make([][]byte, len(list))
	for i, r := range list {
		if len(r) < 17 {
			return nil, fmt.Errorf("record %d of %d bytes", i, len(r))
		}
		recs[i] = []byte(r)
	}
	if got := lrHead("", recs); got != head {
		return nil, fmt.Errorf("the records chain to %s, the head is %s", got, head)
	}
	return recs, nil
}

// lrReader is a cursor over a record's body.
type lrReader struct {
	b   []byte
	err error
}

func (r *lrReader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *lrReader) uint() uint64 {
	v, rest, err := msgp.ReadUint64Bytes(r.b)
	r.fail(err)
	r.b = rest
	return v
}

func (r *lrReader) int() int64 {
	v, rest, err := msgp.ReadInt64Bytes(r.b)
	r.fail(err)
	r.b = rest
	return v
}

func (r *lrReader) str() string {
	v, rest, err := msgp.ReadStringBytes(r.b)
	r.fail(err)
	r.b = rest
	return v
}

func (r *lrReader) bool() bool {
	v, rest, err := msgp.ReadBoolBytes(r.b)
	r.fail(err)
	r.b = rest
	return v
}

// count reads an array header: a count of entries (maybe a flat run).
func (r *lrReader) count() int {
	n, rest, err := msgp.ReadArrayHeaderBytes(r.b)
	r.fail(err)
	r.b = rest
	if r.err == nil && int(n) > len(r.b) {
		r.fail(msgp.ErrShortBytes)
		return 0
	}
	return int(n)
}

func (r *lrReader) strs() []string {
	out := make([]string, r.count())
	for i := range out {
		out[i] = r.str()
	}
	return out
}

// table reads a field table.
func (r *lrReader) table() map[string]lrCell {
	n, rest, err := msgp.ReadMapHeaderBytes(r.b)
	r.fail(err)
	r.b = rest
	out := map[string]lrCell{}
	for range n {
		if r.err != nil {
			return nil
		}
		f := r.str()
		if r.count() != 4 {
			r.fail(fmt.Errorf("field %q: entry of other than 4 elements", f))
			return nil
		}
		var c lrCell
		c.dtype = r.str()
		if msgp.IsNil(r.b) {
			r.b = r.b[1:]
		} else {
			c.shape = make([]int64, r.count())
			for i := range c.shape {
				c.shape[i] = r.int()
			}
		}
		c.gen = r.uint()
		c.backendTag = r.str()
		out[f] = c
	}
	return out
}

func (r *lrReader) tables() []map[string]lrCell {
	out := make([]map[string]lrCell, r.count())
	for i := range out {
		out[i] = r.table()
	}
	return out
}

// tableRef reads a 1-based table number (0: none).
func (r *lrReader) tableRef(tables []map[string]lrCell) map[string]lrCell {
	t := r.uint()
	if t > uint64(len(tables)) {
		r.fail(fmt.Errorf("table %d of %d", t, len(tables)))
		return nil
	}
	if t == 0 {
		return nil
	}
	return tables[t-1]
}

// tag reads a tag: nil, or a map of typed values.
func (r *lrReader) tag() map[string]any {
	if msgp.IsNil(r.b) {
		r.b = r.b[1:]
		return nil
	}
	m, _ := r.value().(map[string]any)
	return m
}

// value reads one tag value by LAYOUT.md's table: the first byte tells
// the type, signed apart from unsigned.
func (r *lrReader) value() any {
	if len(r.b) == 0 {
		r.fail(msgp.ErrShortBytes)
		return nil
	}
	c := r.b[0]
	switch {
	case c == 0xc0:
		r.b = r.b[1:]
		return nil
	case c == 0xc2 || c == 0xc3:
		return r.bool()
	case c <= 0x7f || c >= 0xe0 || (c >= 0xd0 && c <= 0xd3):
		return r.int()
	case c >= 0xcc && c <= 0xcf:
		return r.uint()
	case c == 0xcb:
		v, rest, err := msgp.ReadFloat64Bytes(r.b)
		r.fail(err)
		r.b = rest
		return v
	case (c >= 0xa0 && c <= 0xbf) || (c >= 0xd9 && c <= 0xdb):
		return r.str()
	case c >= 0xc4 && c <= 0xc6:
		v, rest, err := msgp.ReadBytesBytes(r.b, nil)
		r.fail(err)
		r.b = rest
		return append([]byte{}, v...)
	case (c >= 0x90 && c <= 0x9f) || c == 0xdc || c == 0xdd:
		out := make([]any, r.count())
		for i := range out {
			out[i] = r.value()
		}
		return out
	case (c >= 0x80 && c <= 0x8f) || c == 0xde || c == 0xdf:
		n, rest, err := msgp.ReadMapHeaderBytes(r.b)
		r.fail(err)
		r.b = rest
		out := map[string]any{}
		for range n {
			if r.err != nil {
				return nil
			}
			k := r.str()
			out[k] = r.value()
		}
		return out
	}
	r.fail(fmt.Errorf("tag value of type byte %#x", c))
	return nil
}

// decimal reads a decimal number up to the byte stop (or the end).
func (r *lrReader) decimal(stop byte) int64 {
	end := len(r.b)
	if stop != 0 {
		if end = slices.Index(r.b, stop); end < 0 {
			r.fail(fmt.Errorf("no %q after a decimal", stop))
			return 0
		}
	}
	v, err := strconv.ParseInt(string(r.b[:end]), 10, 64)
	r.fail(err)
	r.b = r.b[min(end+1, len(r.b)):]
	return v
}

func newLRState() *lrState { return &lrState{rows: map[string]*lrRow{}} }

// lrReplay replays a whole log (section 4).
func lrReplay(recs [][]byte) (*lrState, error) {
	s := newLRState()
	for i, rec := range recs {
		if err := s.apply(rec, i); err != nil {
			return nil, fmt.Errorf("record %d (%c): %w", i, rec[0], err)
		}
	}
	return s, nil
}

func (s *lrState) apply(rec []byte, pos int) error {
	r := &lrReader{b: rec[17:]}
	switch rec[0] {
	case 'P':
		base, at := uint64(r.decimal(':')), r.decimal(':')
		fields, keys := r.strs(), r.strs()
		if r.err != nil {
			return r.err
		}
		fresh := uint64(0)
		for _, k := range keys {
			row := s.rows[k]
			if row == nil {
				row = &lrRow{key: k, index: base + fresh, next: map[string]uint64{}, pending: map[string][]lrReservation{}}
				fresh++
				s.rows[k] = row
			}
			for _, f := range fields {
				g := row.next[f] // 0 for a field the row never had
				row.pending[f] = append(row.pending[f], lrReservation{gen: g, at: at})
				row.next[f] = g + 1
			}
		}
	case 'C':
		tables := r.tables()
		type update struct {
			key    string
			index  uint64
			fields map[string]lrCell
			tag    map[string]any
		}
		ups := make([]update, r.count())
		for i := range ups {
			ups[i] = update{key: r.str(), index: r.uint()}
			ups[i].fields = r.tableRef(tables)
			ups[i].tag = r.tag()
		}
		if r.err != nil {
			return r.err
		}
		for _, u := range ups { // the check: all or nothing
			row := s.rows[u.key]
			if row == nil || row.index != u.index {
				return nil
			}
			for f, c := range u.fields {
				live := slices.ContainsFunc(row.pending[f], func(p lrReservation) bool { return p.gen == c.gen })
				if cur, ok := row.fields[f]; row.committed && ok && cur.gen == c.gen {
					live = true
				}
				if !live {
					return nil
				}
			}
		}
		for _, u := range ups {
			row := s.rows[u.key]
			if !row.committed {
				row.committed, row.fields = true, map[string]lrCell{}
			}
			for f, c := range u.fields {
				row.pending[f] = slices.DeleteFunc(row.pending[f], func(p lrReservation) bool { return p.gen == c.gen })
				cur, had := row.fields[f]
				switch {
				case had && cur.gen > c.gen:
					s.garbage = append(s.garbage, lrRef{index: row.index, field: f, gen: c.gen})
					continue
				case had && cur.gen != c.gen:
					s.garbage = append(s.garbage, lrRef{index: row.index, field: f, gen: cur.gen})
				}
				row.fields[f] = c
			}
			if u.tag != nil {
				if row.tag == nil {
					row.tag = map[string]any{}
				}
				maps.Copy(row.tag, u.tag)
			}
		}
	case 'D':
		keys := r.strs()
		if r.err != nil {
			return r.err
		}
		for _, k := range keys {
			s.remove(k)
		}
	case 'X':
		for k := range s.rows {
			s.remove(k)
		}
	case 'A':
		cutoff := r.decimal(0)
		if r.err != nil {
			return r.err
		}
		for _, row := range s.rows {
			for f, ps := range row.pending {
				row.pending[f] = slices.DeleteFunc(ps, func(p lrReservation) bool {
					if p.at > cutoff {
						return false
					}
					s.garbage = append(s.garbage, lrRef{index: row.index, field: f, gen: p.gen})
					return true
				})
			}
		}
		s.orphans = slices.DeleteFunc(s.orphans, func(o lrRef) bool {
			if o.at > cutoff {
				return false
			}
			s.garbage = append(s.garbage, lrRef{index: o.index, field: o.field, gen: o.gen})
			return true
		})
	case 'W':
		n := r.count()
		named := map[lrRef]bool{}
		for range n {
			if r.count() != 3 {
				return fmt.Errorf("swept cell of other than 3 elements")
			}
			named[lrRef{index: r.uint(), field: r.str(), gen: r.uint()}] = true
		}
		if r.err != nil {
			return r.err
		}
		gone := func(x lrRef) bool { return named[lrRef{index: x.index, field: x.field, gen: x.gen}] }
		s.garbage = slices.DeleteFunc(s.garbage, gone)
		s.orphans = slices.DeleteFunc(s.orphans, gone)
		for _, row := range s.rows {
			for f, ps := range row.pending {
				row.pending[f] = slices.DeleteFunc(ps, func(p lrReservation) bool { return gone(lrRef{index: row.index, field: f, gen: p.gen}) })
			}
		}
	case 'B':
		n := r.count()
		named := map[lrRef]bool{}
		for range n {
			if r.count() != 4 {
				return fmt.Errorf("abandoned cell of other than 4 elements")
			}
			named[lrRef{index: r.uint(), field: r.str(), gen: r.uint()}] = true
			r.str() // the backend tag
		}
		if r.err != nil {
			return r.err
		}
		take := func(x lrRef) bool {
			if named[lrRef{index: x.index, field: x.field, gen: x.gen}] {
				s.garbage = append(s.garbage, lrRef{index: x.index, field: x.field, gen: x.gen})
				return true
			}
			return false
		}
		s.orphans = slices.DeleteFunc(s.orphans, take)
		for _, row := range s.rows {
			for f, ps := range row.pending {
				row.pending[f] = slices.DeleteFunc(ps, func(p lrReservation) bool { return take(lrRef{index: row.index, field: f, gen: p.gen}) })
			}
		}
	case 'F':
	case 'S':
		if pos != 0 {
			return fmt.Errorf("snapshot at position %d", pos)
		}
		tables := r.tables()
		n := r.count()
		for range n {
			row := &lrRow{key: r.str(), index: r.uint(), next: map[string]uint64{}, pending: map[string][]lrReservation{}}
			g := r.count()
			if g%3 != 0 {
				return fmt.Errorf("row %q: %d generation values", row.key, g)
			}
			for range g / 3 {
				f := r.str()
				row.next[f] = r.uint()
				p := r.count()
				for range p / 2 {
					row.pending[f] = append(row.pending[f], lrReservation{gen: r.uint(), at: r.int()})
				}
			}
			row.committed = r.bool()
			fields := r.tableRef(tables)
			tag := r.tag()
			if row.committed {
				row.fields, row.tag = fields, tag
				if row.fields == nil {
					row.fields = map[string]lrCell{}
				}
			}
			s.rows[row.key] = row
		}
		for range r.count() {
			if r.count() != 4 {
				return fmt.Errorf("garbage cell of other than 4 elements")
			}
			s.garbage = append(s.garbage, lrRef{index: r.uint(), field: r.str(), gen: r.uint()})
			r.str() // backend tag
		}
		for range r.count() {
			if r.count() != 4 {
				return fmt.Errorf("orphan of other than 4 elements")
			}
			s.orphans = append(s.orphans, lrRef{index: r.uint(), field: r.str(), gen: r.uint(), at: r.int()})
		}
	default:
		return fmt.Errorf("record kind %q", rec[0])
	}
	if r.err == nil && len(r.b) != 0 {
		return fmt.Errorf("%d trailing bytes", len(r.b))
	}
	return r.err
}

// remove retires a row (section 4, D).
func (s *lrState) remove(key string) {
	row := s.rows[key]
	if row == nil {
		return
	}
	if row.committed {
		for f, c := range row.fields {
			s.garbage = append(s.garbage, lrRef{index: row.index, field: f, gen: c.gen})
		}
	}
	for f, ps := range row.pending {
		for _, p := range ps {
			s.orphans = append(s.orphans, lrRef{index: row.index, field: f, gen: p.gen, at: p.at})
		}
	}
	delete(s.rows, key)
}

// listed returns the committed rows by index.
func (s *lrState) listed() []*lrRow {
	var out []*lrRow
	for _, row := range s.rows {
		if row.committed {
			out = append(out, row)
		}
	}
	slices.SortFunc(out, func(a, b *lrRow) int { return int(a.index) - int(b.index) })
	return out
}

// render prints the state as LAYOUT.md's state blocks do.
func (s *lrState) render(prefix string) string {
	var sb strings.Builder
	for _, k := range slices.Sorted(maps.Keys(s.rows)) {
		row := s.rows[k]
		state := "prepared (invisible)"
		if row.committed {
			state = "committed"
		}
		fmt.Fprintf(&sb, "row %q: index %d, %s\n", k, row.index, state)
		if row.committed {
			for _, f := range slices.Sorted(maps.Keys(row.fields)) {
				c := row.fields[f]
				what := "value"
				if c.dtype != "" {
					what = fmt.Sprintf("%s %v", c.dtype, c.shape)
				}
				if c.backendTag != "" {
					what += fmt.Sprintf(" (backend tag %q)", c.backendTag)
				}
				fmt.Fprintf(&sb, "  field %q: %s, gen %d, cell %s:d:%s\n", f, what, c.gen, prefix, lrStorageKey(row.index, f, c.gen))
			}
			fmt.Fprintf(&sb, "  tag: %s\n", lrDescribe(row.tag))
		}
		for _, f := range slices.Sorted(maps.Keys(row.next)) {
			fmt.Fprintf(&sb, "  next %q: %d", f, row.next[f])
			for _, p := range row.pending[f] {
				fmt.Fprintf(&sb, ", reserved %d at %d", p.gen, p.at)
			}
			sb.WriteByte('\n')
		}
	}
	var garbage, orphans []string
	for _, g := range s.garbage {
		garbage = append(garbage, lrStorageKey(g.index, g.field, g.gen))
	}
	for _, o := range s.orphans {
		orphans = append(orphans, fmt.Sprintf("%s at %d", lrStorageKey(o.index, o.field, o.gen), o.at))
	}
	none := func(l []string) string {
		if len(l) == 0 {
			return "none"
		}
		slices.Sort(l)
		return strings.Join(l, ", ")
	}
	fmt.Fprintf(&sb, "garbage: %s\norphans: %s\n", none(garbage), none(orphans))
	return sb.String()
}

func lrDescribe(v any) string {
	switch x := v.(type) {
	case map[string]any:
		if x == nil {
			return "none"
		}
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(x)) {
			parts = append(parts, fmt.Sprintf("%q = %s", k, lrDescribeValue(x[k])))
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return lrDescribeValue(v)
}

func lrDescribeValue(v any) string {
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
			parts = append(parts, lrDescribeValue(e))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case map[string]any:
		return lrDescribe(x)
	}
	return fmt.Sprintf("%T %v", v, v)
}

// lrDocBlocks returns the fenced blocks of LAYOUT.md by their marker
// names.
func lrDocBlocks(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile("LAYOUT.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	rest := string(raw)
	for {
		i := strings.Index(rest, "<!-- ")
		if i < 0 {
			return out
		}
		rest = rest[i+len("<!-- "):]
		name, after, ok := strings.Cut(rest, " -->\n```\n")
		if !ok {
			t.Fatalf("LAYOUT.md: marker %q without a block", rest[:min(len(rest), 30)])
		}
		body, tail, ok := strings.Cut(after, "```")
		if !ok {
			t.Fatalf("LAYOUT.md: unterminated block %q", name)
		}
		out[name] = body
		rest = tail
	}
}

// lrHexBytes reads a LAYOUT.md dump: per line the offset, then two hex
// digits a byte, then (after two spaces) the text.
func lrHexBytes(t *testing.T, dump string) []byte {
	t.Helper()
	var out []byte
	for line := range strings.Lines(dump) {
		_, rest, _ := strings.Cut(line, ": ")
		hexPart, _, _ := strings.Cut(rest, "  ")
		b, err := hex.DecodeString(strings.ReplaceAll(strings.TrimSpace(hexPart), " ", ""))
		if err != nil {
			t.Fatalf("dump line %q: %v", line, err)
		}
		out = append(out, b...)
	}
	return out
}

// TestLayoutReaderDocExample: the reader replays LAYOUT.md's example
// records (parsed from the document) into the states its blocks show, and
// computes its heads.
func TestLayoutReaderDocExample(t *testing.T) {
	blocks := lrDocBlocks(t)
	var recs [][]byte
	for n := 1; ; n++ {
		dump, ok := blocks[fmt.Sprintf("record:%d", n)]
		if !ok {
			break
		}
		recs = append(recs, lrHexBytes(t, dump))
	}
	if len(recs) < 8 {
		t.Fatalf("LAYOUT.md has %d numbered records", len(recs))
	}
	var heads strings.Builder
	for i := range recs {
		fmt.Fprintf(&heads, "%2d %s %s\n", i+1, recs[i][1:17], lrHead("", recs[:i+1]))
	}
	if got := blocks["heads"]; got != heads.String() {
		t.Errorf("heads block:\n%s\nthe reader computes:\n%s", got, heads.String())
	}
	check := func(name, want string, recs ...[]byte) {
		t.Helper()
		s, err := lrReplay(recs)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := s.render("tq"); got != want {
			t.Errorf("%s replays into\n%s\nLAYOUT.md says\n%s", name, got, want)
		}
	}
	check("the log", blocks["state:log"], recs...)
	check("the log and the skipped commit", blocks["state:log"], append(slices.Clone(recs), lrHexBytes(t, blocks["record:skipped"]))...)
	snap := lrHexBytes(t, blocks["record:snapshot"])
	check("the snapshot", blocks["state:snapshot"], snap)
	check("the snapshot and the last record", blocks["state:log"], snap, recs[len(recs)-1])
}

// TestLayoutReaderSeesEngineRows: tq writes a partition (new rows, a new
// field, a rewrite, a clear, a reclaim), and the reader, reading the keys
// with a plain go-redis client, lists the rows Meta.List lists, with the
// same indexes, cells and tags, and finds each cell's packed value under
// the key it computes. With a short compaction threshold the log it reads
// starts with a snapshot; on the Cluster path the indexes come from
// allocScript.
func TestLayoutReaderSeesEngineRows(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name      string
		compactAt int64
		opts      []redis.Option
	}{
		{"log", 0, nil},
		{"compacted", 4, nil},
		{"cluster path", 0, []redis.Option{redis.WithClusterSafe()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.compactAt > 0 {
				defer redis.SetCompactAt(tc.compactAt)()
			}
			prefix := "lay" + strconv.Itoa(len(tc.name))
			s := open(t, srv.URL()+"?prefix="+prefix, tc.opts...)
			c, err := tq.New(engine(s))
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			const part = "step-3:run/1"
			keys := []string{"k0", "k1", "k2", "k3"}
			uids := []string{"u0", "u1", "u2", "u3"}
			xs := []float32{0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32}
			tags := []tq.Tag{{"status": "rollout", "n": 1}, {"status": "rollout", "n": uint8(2)}, nil, {"score": 0.5, "path": []any{"a", int64(-3)}, "raw": []byte{1, 2}}}
			if err := c.BatchPut(ctx, part, keys, tq.Batch{"x": tq.Stacked(xs, 4, 3), "uid": tq.ValuesOf(uids)}, tags); err != nil {
				t.Fatal(err)
			}
			if err := c.BatchPut(ctx, part, keys[:2], tq.Batch{"r": tq.ValuesOf([]string{"r0", "r1"})}, []tq.Tag{{"status": "scored"}, nil}); err != nil {
				t.Fatal(err)
			}
			xs[3], xs[4], xs[5] = 100, 101, 102
			if err := c.BatchPut(ctx, part, []string{"k1"}, tq.Batch{"x": tq.Stacked(xs[3:6], 1, 3)}, nil); err != nil {
				t.Fatal(err)
			}
			if err := c.Clear(ctx, part, []string{"k2"}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Reclaim(ctx, part, 0); err != nil {
				t.Fatal(err)
			}
			// New keys among existing ones take the base in their order.
			if err := c.BatchPut(ctx, part, []string{"k0", "k5", "k4"}, tq.Batch{"uid": tq.ValuesOf([]string{"u0", "u5", "u4"})},
				[]tq.Tag{nil, nil, {"late": true}}); err != nil {
				t.Fatal(err)
			}
			// A partition cleared whole: its log goes with its cells.
			if err := c.Put(ctx, "gone", "k", map[string]any{"uid": "u"}, nil); err != nil {
				t.Fatal(err)
			}
			if err := c.ClearPartition(ctx, "gone"); err != nil {
				t.Fatal(err)
			}
			// A partition whose name needs escaping in the hash tag,
			// written through Meta (tq does not allow such names).
			const odd = "p{1}%"
			res, err := s.Meta().Prepare(ctx, odd, []string{"k"}, []string{"f"})
			if err != nil {
				t.Fatal(err)
			}
			cell, err := codec.Encode("v")
			if err != nil {
				t.Fatal(err)
			}
			if err := putVals(ctx, s, []string{backends.StorageKey(res[0].Index, "f", res[0].Gens["f"])}, [][]byte{cell}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Meta().Commit(ctx, odd, []backends.RowUpdate{{Key: "k", Index: res[0].Index,
				Fields: map[string]backends.FieldInfo{"f": {Gen: res[0].Gens["f"]}}}}); err != nil {
				t.Fatal(err)
			}

			plain := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
			defer plain.Close()
			want := map[string][]any{ // each listed key's uid and x values
				"k0": {"u0", xs[0:3]}, "k1": {"u1", xs[3:6]}, "k3": {"u3", xs[9:12]}, "k5": {"u5", nil}, "k4": {"u4", nil},
			}
			if recs, err := lrRead(ctx, plain, prefix, "gone"); err != nil || recs != nil {
				t.Errorf("cleared partition: %d records (%v), want no log", len(recs), err)
			}
			for _, p := range []string{part, odd} {
				recs, err := lrRead(ctx, plain, prefix, p)
				if err != nil {
					t.Fatalf("%s: %v", p, err)
				}
				if tc.compactAt > 0 && p == part && (len(recs) == 0 || recs[0][0] != 'S') {
					t.Fatalf("compacted log of %d records does not start with a snapshot", len(recs))
				}
				st, err := lrReplay(recs)
				if err != nil {
					t.Fatalf("%s: %v", p, err)
				}
				rows, err := s.Meta().List(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				got := st.listed()
				if len(got) != len(rows) {
					t.Fatalf("%s: the reader lists %d rows, Meta %d", p, len(got), len(rows))
				}
				for i, row := range rows {
					lr := got[i]
					if lr.key != row.Key || lr.index != row.Index || len(lr.fields) != len(row.Fields) {
						t.Fatalf("%s row %d: reader %q@%d %v, Meta %q@%d %v", p, i, lr.key, lr.index, lr.fields, row.Key, row.Index, row.Fields)
					}
					if !lrSameTag(lr.tag, row.Tag) {
						t.Errorf("%s row %q: reader tag %#v, Meta %#v", p, row.Key, lr.tag, row.Tag)
					}
					for f, fi := range row.Fields {
						c := lr.fields[f]
						if c.dtype != fi.DType || !slices.Equal(c.shape, fi.Shape) || c.gen != fi.Gen || c.backendTag != fi.BackendTag {
							t.Errorf("%s row %q field %q: reader %+v, Meta %+v", p, row.Key, f, c, fi)
						}
						key := prefix + ":d:" + lrStorageKey(lr.index, f, c.gen)
						if key != prefix+":d:"+backends.StorageKey(row.Index, f, fi.Gen) {
							t.Errorf("reader's cell key %q differs from the engine's", key)
						}
						val, err := plain.Get(ctx, key).Bytes()
						if err != nil {
							t.Fatalf("GET %s: %v", key, err)
						}
						v, err := codec.Decode(val)
						if err != nil {
							t.Fatalf("%s: %v", key, err)
						}
						if p == part {
							checkLayoutCell(t, key, f, v, want[row.Key])
						}
					}
				}
				if p == part {
					if len(got) != len(want) {
						t.Fatalf("listed %d rows, want %d", len(got), len(want))
					}
					if got[1].fields["x"].gen != 1 || got[0].fields["uid"].gen != 1 {
						t.Errorf("k1's rewritten x is generation %d, k0's uid %d, want 1", got[1].fields["x"].gen, got[0].fields["uid"].gen)
					}
					if k5, k4 := st.rows["k5"], st.rows["k4"]; k5 == nil || k4 == nil || k4.index != k5.index+1 {
						t.Errorf("new keys k5, k4 of one put got indexes out of their order")
					}
				}
				_, _, _, nKey := lrKeys(prefix, p)
				if n, err := plain.Get(ctx, nKey).Int(); err != nil || n != len(got) {
					t.Errorf("%s: %s = %d (%v), want %d", p, nKey, n, err, len(got))
				}
				if ok, err := plain.SIsMember(ctx, prefix+":{"+prefix+"}:parts", p).Result(); err != nil || !ok {
					t.Errorf("%s: not in the registry (%v)", p, err)
				}
			}
			if next, err := plain.Get(ctx, prefix+":{"+prefix+"}:next").Uint64(); err != nil || next < 6 {
				t.Errorf("index counter %d (%v), want past the 6 indexes handed out", next, err)
			}
		})
	}
}

// checkLayoutCell checks a decoded cell of field f against want (uid,
// then x's three values; nil: no x).
func checkLayoutCell(t *testing.T, key, f string, v any, want []any) {
	t.Helper()
	switch f {
	case "uid":
		if v != want[0] {
			t.Errorf("%s holds %#v, want %q", key, v, want[0])
		}
	case "x":
		x, ok := v.(codec.Tensor)
		wantX, _ := want[1].([]float32)
		if !ok || x.DType != codec.Float32 || len(x.Data) != 4*len(wantX) {
			t.Fatalf("%s holds %#v, want a float32 tensor of %v", key, v, wantX)
		}
		for i, w := range wantX {
			bits := uint32(x.Data[4*i]) | uint32(x.Data[4*i+1])<<8 | uint32(x.Data[4*i+2])<<16 | uint32(x.Data[4*i+3])<<24
			if got := math.Float32frombits(bits); got != w {
				t.Errorf("%s element %d is %v, want %v", key, i, got, w)
			}
		}
	}
}

// lrSameTag compares tags by value and type; no tag equals an empty one
// (as tq's Tag has them).
func lrSameTag(a, b map[string]any) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return reflect.DeepEqual(a, b)
}
