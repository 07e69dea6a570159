package backendtest_test

import (
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest/toylog"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/tq"
)

// exampleToken is the token LOG.md's worked example shows: the engine's
// own is random in its 16 hex digits, which the test puts in their place.
const exampleToken = "w|d633364262250ca1"

// exampleRecords runs LOG.md section 7's example on a real engine (tq's
// client over the toy shared engine, its clock stopped) and returns its
// log's entries: a put, a claim, an ack.
func exampleRecords(t *testing.T) ([]backends.Entry, []byte) {
	t.Helper()
	ctx := t.Context()
	const at = 1_700_000_000_000_000
	srv := toylog.NewServer(func() time.Time { return time.UnixMicro(at) })
	eng := srv.Engine()
	t.Cleanup(func() { _ = eng.Close() })
	c, err := tq.New(backends.Engine{Data: eng.Data, Log: eng.Log}, tq.WithName("w"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Put(ctx, "p", "k", map[string]any{"f": int64(7)}, tq.Tag{"step": int64(3)}); err != nil {
		t.Fatal(err)
	}
	task, err := c.Task("p", "t", []string{"f"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := task.Claim(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	reader := srv.Engine()
	t.Cleanup(func() { _ = reader.Close() })
	tail, err := reader.Log.Read(ctx, "p", backends.Pos{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for k, e := range tail.Entries {
		if e.N != uint64(k+1) || e.Time != at {
			t.Fatalf("entry %d: N %d time %d", k, e.N, e.Time)
		}
	}
	cell := []backends.ReadCell{{Key: backends.StorageKey(1, "f", 0)}}
	if err := eng.Data.Read(ctx, cell); err != nil || !cell[0].Found {
		t.Fatalf("the put's cell: %v %v", cell[0].Found, err)
	}
	return tail.Entries, cell[0].Value
}

// docBlock returns the text of the fenced block after marker in doc.
func docBlock(t *testing.T, doc, marker string) (block, after string) {
	t.Helper()
	begin := "<!-- " + marker + " -->\n```\n"
	i := strings.Index(doc, begin)
	if i < 0 {
		t.Fatalf("LOG.md has no %q block", marker)
	}
	rest := doc[i+len(begin):]
	j := strings.Index(rest, "```\n")
	if j < 0 {
		t.Fatalf("LOG.md: unterminated %q block", marker)
	}
	return rest[:j], rest[j+4:]
}

func logHexDump(b []byte) string {
	var sb strings.Builder
	for off := 0; off < len(b); off += 16 {
		end := min(off+16, len(b))
		parts := make([]string, 0, 16)
		for _, c := range b[off:end] {
			parts = append(parts, fmt.Sprintf("%02x", c))
		}
		fmt.Fprintf(&sb, "%04x: %s\n", off, strings.Join(parts, " "))
	}
	return sb.String()
}

var (
	rowAt    = regexp.MustCompile("^\\| 0x([0-9a-f]+) \\| (.*?) \\| .* \\|$")
	rowBytes = regexp.MustCompile("`([0-9a-f ]+)`( × [0-9]+)?")
)

// annotated reads the table after a block: each row's offset and bytes
// (backquoted hex, "× n" repeating the byte before it), which must
// spell the record byte by byte.
func annotated(t *testing.T, name, after string, data []byte) {
	t.Helper()
	var got []byte
	rows := 0
	for line := range strings.Lines(after) {
		line = strings.TrimRight(line, "\n")
		if rows > 0 && !strings.HasPrefix(line, "|") {
			break
		}
		m := rowAt.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		rows++
		at, _ := strconv.ParseUint(m[1], 16, 32)
		if int(at) != len(got) {
			t.Errorf("%s: a row at 0x%x, the bytes before it end at 0x%x", name, at, len(got))
		}
		for _, b := range rowBytes.FindAllStringSubmatch(m[2], -1) {
			raw, err := hex.DecodeString(strings.ReplaceAll(b[1], " ", ""))
			if err != nil {
				t.Fatalf("%s: row %q: %v", name, line, err)
			}
			if b[2] != "" {
				n, _ := strconv.Atoi(strings.TrimPrefix(b[2], " × "))
				raw = slices.Repeat(raw, n)
			}
			got = append(got, raw...)
		}
	}
	if !slices.Equal(got, data) {
		t.Errorf("LOG.md %s: the table spells\n%s\nthe record is\n%s", name, logHexDump(got), logHexDump(data))
	}
}

// TestLogSpecExample holds LOG.md section 7 to a real engine: the records
// of one put, one claim and one ack are the bytes its blocks show, and
// its tables annotate them byte by byte; the spec decoder reads them as
// the section says.
func TestLogSpecExample(t *testing.T) {
	entries, cell := exampleRecords(t)
	if len(entries) != 4 {
		t.Fatalf("%d entries, want a put's P and C, a claim's Q, an ack's K", len(entries))
	}
	q, err := decodeSpecRecord(entries[2].Data)
	if err != nil || q.Kind != 'Q' {
		t.Fatalf("entry 3: %v %v", q, err)
	}
	token := q.Claim.Token
	if len(token) != len(exampleToken) || specHolder(token) != "w" || metadata.HolderOf(token) != "w" {
		t.Fatalf("token %q, want w| and 16 hex digits", token)
	}
	if _, err := strconv.ParseUint(token[2:], 16, 64); err != nil || token[2] < '8' || strings.ToLower(token) != token {
		t.Fatalf("token %q: not 16 lowercase hex digits of a number whose top bit is set", token)
	}
	raw, err := os.ReadFile("../LOG.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	if block, _ := docBlock(t, doc, "log-hex:cell"); block != logHexDump(cell) {
		t.Errorf("LOG.md cell example is stale; the engine wrote:\n%s", logHexDump(cell))
	}
	for k, name := range []string{"put-P", "put-C", "claim-Q", "ack-K"} {
		data := []byte(strings.ReplaceAll(string(entries[k].Data), token, exampleToken))
		block, after := docBlock(t, doc, "log-hex:"+name)
		if want := logHexDump(data); block != want {
			t.Errorf("LOG.md %s example is stale; the engine wrote:\n%s", name, want)
		}
		annotated(t, name, after, data)
	}
	if entries[0].Base != 1 {
		t.Errorf("the put's base %d, want the toy engine's first index, 1", entries[0].Base)
	}

	// What the section says the records hold.
	p, _ := decodeSpecRecord(entries[0].Data)
	c, _ := decodeSpecRecord(entries[1].Data)
	k, _ := decodeSpecRecord(entries[3].Data)
	if p.N != 1 || !slices.Equal(p.Fields, []string{"f"}) || !slices.Equal(p.Keys, []string{"k"}) || len(p.Sizes) != 1 || p.Sizes[0][0] != int64(len(cell)) {
		t.Errorf("P: %+v", p)
	}
	if u := c.Updates; len(u) != 1 || u[0].Key != "k" || u[0].Index != 1 || u[0].Table["f"].Gen != 0 || u[0].Table["f"].Shape != nil || u[0].Tag["step"] != int64(3) {
		t.Errorf("C: %+v", c.Updates)
	}
	if a := q.Claim; a.Task != "t" || a.Lease != time.Minute.Microseconds() || a.Rows != 1 || a.Min != 1 || !slices.Equal(a.Fields, []string{"f"}) {
		t.Errorf("Q: %+v", a)
	}
	if k.Task != "t" || k.Op != uint64(metadata.Ack) || k.Token != token || !slices.Equal(k.Indexes, []uint64{1}) || k.Delay != 0 {
		t.Errorf("K: %+v", k)
	}
}
