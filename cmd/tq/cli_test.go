package main

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/tq"
)

// hangScheme opens an engine only when the context ends: a server that
// never answers.
const hangScheme = "tqtest-hang"

func init() {
	backends.Register(hangScheme, func(ctx context.Context, _ *url.URL) (backends.Engine, error) {
		<-ctx.Done()
		return backends.Engine{}, ctx.Err()
	})
}

// namesQueue is a shared memory queue with partition "p" (15 rows k00 to
// k14 with field x, one of them consumed by task "work") and partitions
// q00 to q11 of a row each.
func namesQueue(t *testing.T) string {
	t.Helper()
	url := sharedQueue(t)
	c, err := tq.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	keys := make([]string, 15)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%02d", i)
	}
	if err := c.BatchPut(t.Context(), "p", keys, tq.Batch{"x": tq.Stacked(make([]int64, 15))}, nil); err != nil {
		t.Fatal(err)
	}
	consume(t, c, "p", "work", "x")
	for i := range 12 {
		if err := c.Put(t.Context(), fmt.Sprintf("q%02d", i), "r", map[string]any{"y": []int32{1}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	return url
}

// TestUnknownNames: a partition, task, field or key that does not exist
// fails the command (exit 1) with an error naming the ones that do, the
// first ten of them; nothing is created.
func TestUnknownNames(t *testing.T) {
	url := namesQueue(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"dead", "p", "nosuchtask"}, `no task "nosuchtask" in partition "p" (tasks: work)`},
		{[]string{"reset", "-yes", "p", "nosuchtask"}, `no task "nosuchtask" in partition "p" (tasks: work)`},
		{[]string{"reset", "-yes", "q00", "work"}, `no task "work" in partition "q00" (no task has consumed from it)`},
		{[]string{"drop", "-yes", "p", "nosuchtask", "k01"}, `no task "nosuchtask"`},
		{[]string{"retry", "p", "nosuchtask", "k01"}, `no task "nosuchtask"`},
		{[]string{"status", "-task", "work", "-fields", "x,nosuchfield", "p"}, `no field "nosuchfield" in partition "p" (fields: x)`},
		{[]string{"dead", "-fields", "nosuchfield", "p", "work"}, `no field "nosuchfield" in partition "p" (fields: x)`},
		{[]string{"drop", "-yes", "-fields", "nosuchfield", "p", "work", "k01"}, `no field "nosuchfield"`},
		{[]string{"dump", "p", "k00", "nosuchfield"}, `no field "nosuchfield" in key "k00" of partition "p" (it has: x)`},
		{[]string{"dump", "p", "zz"}, `no key "zz" in partition "p" (keys: "k00", "k01", "k02", "k03", "k04", "k05", "k06", "k07", "k08", "k09" and 5 more)`},
		{[]string{"retry", "p", "work", "zz"}, `no key "zz" in partition "p" (keys: "k00", `},
		{[]string{"drop", "-yes", "p", "work", "k01", "zz"}, `no key "zz" in partition "p" (keys: "k00", `},
		{[]string{"reset", "-yes", "p", "work", "zz"}, `no key "zz" in partition "p" (keys: "k00", `},
		{[]string{"rows", "nope"}, `no partition "nope" (partitions: p, q00, q01, q02, q03, q04, q05, q06, q07, q08 and 3 more)`},
		{[]string{"status", "nope"}, `no partition "nope" (partitions: p, q00,`},
	} {
		r := runTQ(t, url, tc.args...)
		if r.code != 1 || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
			t.Errorf("%v: %+v, want exit 1 and stderr with %q", tc.args, r, tc.want)
		}
	}
	// Neither the drop nor the retry made a task of the name.
	doc := status(t, url, "p")
	if names := sortedKeys(doc.Tasks); !slices.Equal(names, []string{"work"}) {
		t.Errorf("tasks after the refused commands: %v, want work alone", names)
	}
	if w := doc.Tasks["work"]; w.Acked != 1 || w.Dropped != 0 {
		t.Errorf("work after the refused commands: %+v, want 1 acked, nothing dropped", w)
	}
	// Fewer names than the bound: no "more".
	if r := runTQ(t, "memory://", "rows", "nope"); r.code != 1 || !strings.Contains(r.stderr, `no partition "nope" (the queue has none)`) {
		t.Errorf("rows of an empty queue: %+v", r)
	}
}

// TestFlagsAnywhere: a command's flags, and the global ones, work after
// and among its arguments; "--" ends them.
func TestFlagsAnywhere(t *testing.T) {
	url := namesQueue(t)
	doc := status(t, url, "p", "-task", "work", "-fields", "x")
	if w := doc.Tasks["work"]; !w.Exact || w.Ready != 14 || w.Acked != 1 {
		t.Fatalf("status p -task work -fields x: %+v", w)
	}
	if r := runTQ(t, url, "status", "p", "-task", "work"); r.code != 2 || !strings.Contains(r.stderr, "-task and -fields go together") {
		t.Errorf("status p -task work: %+v, want the -fields usage error", r)
	}
	if r := runTQ(t, "", "partitions", "-url", url); r.code != 0 || !strings.HasPrefix(r.stdout, "p\nq00\n") {
		t.Errorf("partitions -url URL: %+v", r)
	}
	if r := runTQ(t, url, "rows", "q00", "-json"); r.code != 0 || !strings.HasPrefix(r.stdout, "{") {
		t.Errorf("rows q00 -json: %+v", r)
	}
	if r := runTQ(t, url, "dump", "p", "-n", "1", "k03", "x"); r.code != 0 || !strings.Contains(r.stdout, `key "k03"`) {
		t.Errorf("dump p -n 1 k03 x: %+v", r)
	}
	if r := runTQ(t, url, "drop", "p", "work", "k01", "-yes", "k02"); r.code != 0 || !strings.Contains(r.stdout, "dropped 2 rows") {
		t.Errorf("drop p work k01 -yes k02: %+v", r)
	}
	if r := runTQ(t, url, "clear", "q00", "-yes=false"); r.code != 2 || !strings.Contains(r.stderr, "-yes") {
		t.Errorf("clear q00 -yes=false: %+v", r)
	}
	// A key that starts with "-" goes after "--"; before it, it is a flag.
	c, err := tq.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Put(t.Context(), "p", "-neg", map[string]any{"x": int64(7)}, nil); err != nil {
		t.Fatal(err)
	}
	if r := runTQ(t, url, "dump", "p", "-n", "1", "--", "-neg"); r.code != 0 || !strings.Contains(r.stdout, `key "-neg"`) {
		t.Errorf("dump p -- -neg: %+v", r)
	}
	if r := runTQ(t, url, "dump", "p", "-neg"); r.code != 2 || !strings.Contains(r.stderr, "-neg") {
		t.Errorf("dump p -neg: %+v, want a usage error", r)
	}
}

func TestParseInterleaved(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		pos      []string
		s        string
		b        bool
		mistaken bool
	}{
		{[]string{"a", "-s", "v", "b", "-b"}, []string{"a", "b"}, "v", true, false},
		{[]string{"-b", "a", "--", "-s", "v"}, []string{"a", "-s", "v"}, "", true, false},
		{[]string{"a", "-s", "--", "b"}, []string{"a", "b"}, "--", false, false}, // "--" as -s's value
		{[]string{"a", "-s=x", "--", "-b"}, []string{"a", "-b"}, "x", false, false},
		{[]string{"a", "--s", "v", "-"}, []string{"a", "-"}, "v", false, false},
		{[]string{"a", "-nosuch"}, nil, "", false, true},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(&strings.Builder{})
		s := fs.String("s", "", "")
		b := fs.Bool("b", false, "")
		pos, err := parseInterleaved(fs, tc.args)
		if (err != nil) != tc.mistaken || !slices.Equal(pos, tc.pos) || *s != tc.s || *b != tc.b {
			t.Errorf("%q: positional %q, -s %q, -b %v, error %v; want %q, %q, %v", tc.args, pos, *s, *b, err, tc.pos, tc.s, tc.b)
		}
	}
}

// TestTimeout: -timeout, before or after the command's arguments, bounds
// every command, opening the queue included, and the error says so.
func TestTimeout(t *testing.T) {
	url := hangScheme + "://"
	for _, c := range commands {
		args := map[string][]string{
			"partitions": nil,
			"rows":       {"p"},
			"dump":       {"p", "k"},
			"clear":      {"-yes", "p"},
			"status":     {"p"},
			"capacity":   {"-rows", "1", "p"},
			"reset":      {"-yes", "p", "t"},
			"dead":       {"p", "t"},
			"retry":      {"p", "t", "k"},
			"drop":       {"-yes", "p", "t", "k"},
			"leases":     {"p", "t"},
			"top":        {"-once", "p"},
		}[c.name]
		for _, line := range [][]string{
			append([]string{"-timeout", "100ms", c.name}, args...),
			append(append([]string{c.name}, args...), "-timeout", "100ms"),
		} {
			start := time.Now()
			r := runTQ(t, url, line...)
			if r.code != 1 || !strings.Contains(r.stderr, "timed out after 100ms") {
				t.Errorf("%v: %+v, want exit 1 and a timeout", line, r)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("%v took %v", line, d)
			}
		}
	}
	r := runTQ(t, "memory://", "help")
	if !strings.Contains(r.stdout, "-timeout") || !strings.Contains(r.stdout, "30s") {
		t.Errorf("help does not show -timeout and its default:\n%s", r.stdout)
	}
}

// TestURLMistakes: a URL without a scheme says so, and no error shows its
// password, in whatever form it was typed.
func TestURLMistakes(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"127.0.0.1:1", `URL "127.0.0.1:1" has no scheme`},
		{"localhost:1/0", "registered schemes: "},
		{"u:secret@127.0.0.1:1/0", "has no scheme"},
		{"redis://u:secret@127.0.0.1:1/0?dial_timeout=1s&dial_timeout=2s", `"dial_timeout" given twice`},
	} {
		r := runTQ(t, "", "-url", tc.url, "partitions")
		if r.code != 1 || !strings.Contains(r.stderr, tc.want) || strings.Contains(r.stderr, "secret") {
			t.Errorf("%s: %+v, want exit 1 and %q, without the password", tc.url, r, tc.want)
		}
	}
	// Nor does usage, the URL from $TQ_URL or -url.
	if r := runTQ(t, "redis://:secret@h:1/0", "status", "-h"); r.code != 0 || strings.Contains(r.stderr, "secret") {
		t.Errorf("status -h: %+v", r)
	}
	if r := runTQ(t, "", "-url", "redis://:secret@h:1/0", "status", "-h"); r.code != 0 || strings.Contains(r.stderr, "secret") || !strings.Contains(r.stderr, "-timeout") {
		t.Errorf("-url URL status -h: %+v", r)
	}
}

// TestBadInputChangesNothing: a command line the docs refuse exits 2 with
// a message naming the bad flag or argument, before touching the queue:
// its rows and consumption stay as they were.
func TestBadInputChangesNothing(t *testing.T) {
	url := sharedQueue(t)
	c, err := tq.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.BatchPut(t.Context(), "p", []string{"a", "b"}, tq.Batch{"x": tq.Stacked([]int64{1, 2}), "y": tq.Stacked([]int64{3, 4})}, nil); err != nil {
		t.Fatal(err)
	}
	consume(t, c, "p", "t", "x")
	state := func() string {
		m, err := c.List(t.Context(), "p")
		if err != nil {
			t.Fatal(err)
		}
		st, err := c.Status(t.Context(), "p")
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%+v %+v", m.Rows, st)
	}
	before := state()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"clear", "-yes", "-fields", "", "p"}, `invalid value "" for flag -fields: names no field`},
		{[]string{"clear", "-yes", "-fields=", "p"}, `invalid value "" for flag -fields`},
		{[]string{"clear", "-yes", "-fields", "x,", "p"}, `-fields "x," has an empty field name`},
		{[]string{"clear", "-fields", "x", "p"}, "without -yes"},
		{[]string{"clear", "p"}, "without -yes"},
		{[]string{"-timeout", "-1s", "clear", "-yes", "p"}, `invalid value "-1s" for flag -timeout: -1s is negative`},
		{[]string{"clear", "-yes", "p", "-timeout", "-1s"}, `invalid value "-1s" for flag -timeout`},
		{[]string{"-timeout", "soon", "partitions"}, `invalid value "soon" for flag -timeout`},
		{[]string{"rows", "-timeout=-5m", "p"}, `invalid value "-5m" for flag -timeout`},
		{[]string{"status", "-task", "t", "-fields", "", "p"}, `invalid value "" for flag -fields`},
		{[]string{"status", "-task", "t", "p"}, "-task and -fields go together"},
		{[]string{"dead", "-fields", "", "p", "t"}, `invalid value "" for flag -fields`},
		{[]string{"retry", "-fields", "", "p", "t", "a"}, `invalid value "" for flag -fields`},
		{[]string{"drop", "-yes", "-fields", "", "p", "t", "a"}, `invalid value "" for flag -fields`},
		{[]string{"drop", "p", "t", "a"}, "without -yes"},
		{[]string{"reset", "p", "t"}, "without -yes"},
		{[]string{"dump", "-n", "-1", "p", "a"}, "-n -1 is negative"},
		{[]string{"capacity", "-rows", "-1", "p"}, "-rows -1 is negative"},
		{[]string{"rows", "-bogus", "p"}, "flag provided but not defined: -bogus"},
		{[]string{"rows"}, "wrong number of arguments"},
	} {
		r := runTQ(t, url, tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
			t.Errorf("%q: %+v, want exit 2 and stderr with %q", tc.args, r, tc.want)
		}
		if after := state(); after != before {
			t.Fatalf("%q changed the queue:\nbefore %s\nafter  %s", tc.args, before, after)
		}
	}
	// Given, -fields and -timeout still work.
	if r := runTQ(t, url, "-timeout", "0", "clear", "-yes", "-fields", "y", "p"); r.code != 0 {
		t.Fatalf("clear -fields y: %+v", r)
	}
	if m, err := c.List(t.Context(), "p"); err != nil || len(m.Rows) != 2 || len(m.Rows[0].Fields) != 1 {
		t.Fatalf("after clear -fields y: %+v, %v", m, err)
	}
}
