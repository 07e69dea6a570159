package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/tqgo/tqgo/codec"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

// TestMain fails the run if a command leaves a goroutine behind (a client
// it did not close). ants starts its default pool at init; that one is not
// ours.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

// result is one in-process run of the tool.
type result struct {
	code           int
	stdout, stderr string
}

func runTQ(t *testing.T, env string, args ...string) result {
	t.Helper()
	t.Setenv(urlEnv, env)
	var out, errOut bytes.Buffer
	code := run(t.Context(), args, &out, &errOut)
	return result{code, out.String(), errOut.String()}
}

// queue is a private redis-server holding partition "step-1" (three rows:
// a stacked float32 column "obs" [3 4], a jagged int64 column "resp", a
// values column "uid", tags) and partition "other" (one row).
func queue(t *testing.T) string {
	t.Helper()
	srv := redistest.Start(t)
	url := srv.URL() + "?prefix=clitest"
	ctx := context.Background()
	c, err := tq.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	obs := make([]float32, 12)
	for i := range obs {
		obs[i] = float32(i) + 0.5
	}
	err = c.BatchPut(ctx, "step-1", []string{"k0", "k1", "k2"}, tq.Batch{
		"obs":  tq.Stacked(obs, 3, 4),
		"resp": tq.JaggedOf([][]int64{{1, 2, 3}, {4}, {5, 6, 7, 8, 9, 10, 11, 12, 13, 14}}),
		"uid":  tq.ValuesOf([]string{"u0", "u0", "u1"}),
	}, []tq.Tag{{"status": "rollout", "step": 1}, {"status": "rollout", "step": 1}, {"status": "rewarded", "step": 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Put(ctx, "other", "x", map[string]any{"v": []int32{7}, "s": codec.Scalar(2.5)}, nil); err != nil {
		t.Fatal(err)
	}
	return url
}

func TestPartitions(t *testing.T) {
	url := queue(t)
	r := runTQ(t, "", "-url", url, "partitions")
	if r.code != 0 || r.stdout != "other\nstep-1\n" {
		t.Fatalf("partitions: %+v, want other and step-1", r)
	}
	r = runTQ(t, url, "-json", "partitions") // URL from TQ_URL
	var doc struct{ Partitions []string }
	if err := json.Unmarshal([]byte(r.stdout), &doc); r.code != 0 || err != nil {
		t.Fatalf("partitions -json: %+v: %v", r, err)
	}
	if strings.Join(doc.Partitions, ",") != "other,step-1" {
		t.Fatalf("partitions -json = %v", doc.Partitions)
	}
}

func TestRows(t *testing.T) {
	url := queue(t)
	r := runTQ(t, url, "rows", "step-1")
	if r.code != 0 {
		t.Fatalf("rows: %+v", r)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "INDEX") {
		t.Fatalf("rows: want a header and 3 rows, got\n%s", r.stdout)
	}
	for i, want := range []string{
		`"k0"  obs=float32[4] resp=int64[3] uid=value`,
		`"k1"  obs=float32[4] resp=int64[1] uid=value`,
		`"k2"  obs=float32[4] resp=int64[10] uid=value  {"status": "rewarded", "step": 1}`,
	} {
		if !strings.Contains(lines[i+1], want) {
			t.Errorf("row %d: %q lacks %q", i, lines[i+1], want)
		}
	}
	// Columns are aligned: the FIELDS column starts at one offset.
	col := strings.Index(lines[0], "FIELDS")
	for _, l := range lines[1:] {
		if !strings.HasPrefix(l[col:], "obs=") {
			t.Errorf("misaligned row %q (FIELDS at %d)", l, col)
		}
	}

	r = runTQ(t, url, "-json", "rows", "step-1")
	var doc struct {
		Partition string
		Rows      []struct {
			Index  uint64
			Key    string
			Fields map[string]struct {
				Kind  string
				DType string
				Shape []int
			}
			Tag map[string]any
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); r.code != 0 || err != nil {
		t.Fatalf("rows -json: %+v: %v", r, err)
	}
	if doc.Partition != "step-1" || len(doc.Rows) != 3 {
		t.Fatalf("rows -json: %+v", doc)
	}
	k2 := doc.Rows[2]
	if k2.Key != "k2" || k2.Index <= doc.Rows[0].Index {
		t.Errorf("row 2: key %q index %d (row 0's %d)", k2.Key, k2.Index, doc.Rows[0].Index)
	}
	if f := k2.Fields["obs"]; f.Kind != "tensor" || f.DType != "float32" || len(f.Shape) != 1 || f.Shape[0] != 4 {
		t.Errorf("obs = %+v", f)
	}
	if f := k2.Fields["resp"]; f.Kind != "tensor" || f.DType != "int64" || len(f.Shape) != 1 || f.Shape[0] != 10 {
		t.Errorf("resp = %+v", f)
	}
	if f := k2.Fields["uid"]; f.Kind != "value" || f.DType != "" || f.Shape != nil {
		t.Errorf("uid = %+v", f)
	}
	if k2.Tag["status"] != "rewarded" || k2.Tag["step"] != 1.0 {
		t.Errorf("tag = %v", k2.Tag)
	}

	// A 0-d tensor's shape is [], not absent (as a value's is).
	r = runTQ(t, url, "-json", "rows", "other")
	var other struct {
		Rows []struct{ Fields map[string]map[string]any }
	}
	if err := json.Unmarshal([]byte(r.stdout), &other); r.code != 0 || err != nil || len(other.Rows) != 1 {
		t.Fatalf("rows -json other: %+v: %v", r, err)
	}
	if s, ok := other.Rows[0].Fields["s"]["shape"].([]any); !ok || len(s) != 0 || other.Rows[0].Fields["s"]["dtype"] != "float64" {
		t.Errorf("0-d field = %v, want dtype float64 and shape []", other.Rows[0].Fields["s"])
	}
}

func TestDump(t *testing.T) {
	url := queue(t)
	r := runTQ(t, url, "dump", "step-1", "k2")
	if r.code != 0 {
		t.Fatalf("dump: %+v", r)
	}
	for _, want := range []string{
		`partition "step-1" key "k2"`,
		"obs    float32  [4]    [8.5 9.5 10.5 11.5]",
		"resp   int64    [10]   [5 6 7 8 9 10 11 12 …] (8 of 10)",
		`uid    -        -      "u1"`,
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("dump lacks %q:\n%s", want, r.stdout)
		}
	}

	r = runTQ(t, url, "dump", "-n", "2", "step-1", "k2", "resp")
	if r.code != 0 || !strings.Contains(r.stdout, "[5 6 …] (2 of 10)") || strings.Contains(r.stdout, "obs") {
		t.Fatalf("dump -n 2 resp: %+v", r)
	}

	r = runTQ(t, url, "-json", "dump", "-n", "3", "step-1", "k0")
	var doc struct {
		Key    string
		Fields map[string]struct {
			Kind     string
			DType    string
			Shape    []int
			Elements int
			Head     []float64
			Value    any
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); r.code != 0 || err != nil {
		t.Fatalf("dump -json: %+v: %v", r, err)
	}
	obs := doc.Fields["obs"]
	if obs.DType != "float32" || obs.Elements != 4 || len(obs.Head) != 3 || obs.Head[0] != 0.5 || obs.Head[2] != 2.5 {
		t.Errorf("obs = %+v", obs)
	}
	if uid := doc.Fields["uid"]; uid.Kind != "value" || uid.Value != "u0" {
		t.Errorf("uid = %+v", uid)
	}
}

func TestClear(t *testing.T) {
	url := queue(t)
	r := runTQ(t, url, "clear", "step-1")
	if r.code != 2 || !strings.Contains(r.stderr, "-yes") {
		t.Fatalf("clear without -yes: %+v, want exit 2 naming -yes", r)
	}
	if r := runTQ(t, url, "rows", "step-1"); r.code != 0 || strings.Count(r.stdout, "\n") != 4 {
		t.Fatalf("rows after a refused clear: %+v", r)
	}
	r = runTQ(t, url, "clear", "-fields", "uid", "step-1")
	if r.code != 2 || !strings.Contains(r.stderr, "-yes") {
		t.Fatalf("clear -fields without -yes: %+v, want exit 2 naming -yes", r)
	}
	r = runTQ(t, url, "clear", "-yes", "-fields", "nope,", "step-1")
	if r.code != 2 || !strings.Contains(r.stderr, "empty field name") {
		t.Fatalf("clear -fields with an empty name: %+v, want exit 2", r)
	}
	if before := runTQ(t, url, "rows", "step-1"); !strings.Contains(before.stdout, "resp") {
		t.Fatalf("rows before clear -fields: %+v, want resp listed", before)
	}
	r = runTQ(t, url, "clear", "-yes", "-fields", "resp,no-such-field", "step-1")
	if r.code != 0 || !strings.Contains(r.stdout, "cleared fields resp,no-such-field") || !strings.Contains(r.stdout, "3 rows") {
		t.Fatalf("clear -yes -fields: %+v", r)
	}
	after := runTQ(t, url, "rows", "step-1")
	if after.code != 0 || strings.Contains(after.stdout, "resp") || !strings.Contains(after.stdout, "obs") || strings.Count(after.stdout, "\n") != 4 {
		t.Fatalf("rows after clear -fields resp: %+v, want every row, with obs and without resp", after)
	}
	r = runTQ(t, url, "clear", "-yes", "step-1")
	if r.code != 0 || !strings.Contains(r.stdout, "3 rows") {
		t.Fatalf("clear -yes: %+v", r)
	}
	if r := runTQ(t, url, "partitions"); r.stdout != "other\n" {
		t.Fatalf("partitions after clear: %+v", r)
	}
	if r := runTQ(t, url, "rows", "step-1"); r.code != 1 {
		t.Fatalf("rows of the cleared partition: %+v", r)
	}
}

func TestErrors(t *testing.T) {
	url := queue(t)
	for _, tc := range []struct {
		name string
		env  string
		args []string
		code int
		want string
	}{
		{"bad scheme", "", []string{"-url", "nosuch://u:secret@h/", "partitions"}, 1, `unknown`},
		{"no url", "", []string{"partitions"}, 2, "TQ_URL"},
		{"rows: no partition", url, []string{"rows", "nope"}, 1, `no partition "nope"`},
		{"dump: no partition", url, []string{"dump", "nope", "k0"}, 1, `no partition "nope"`},
		{"clear: no partition", url, []string{"clear", "-yes", "nope"}, 1, `no partition "nope"`},
		{"no key", url, []string{"dump", "step-1", "k9"}, 1, `no key "k9"`},
		{"no field", url, []string{"dump", "step-1", "k0", "obs", "rewards"}, 1, `no field "rewards"`},
		{"rows: no argument", url, []string{"rows"}, 2, "usage: tq rows"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runTQ(t, tc.env, tc.args...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
				t.Fatalf("%v: %+v, want exit %d and stderr with %q", tc.args, r, tc.code, tc.want)
			}
			if strings.Contains(r.stderr, "secret") {
				t.Fatalf("stderr shows the password: %s", r.stderr)
			}
		})
	}
}

func TestUsage(t *testing.T) {
	r := runTQ(t, "memory://", "help")
	if r.code != 0 {
		t.Fatalf("help: %+v", r)
	}
	for _, c := range commands {
		if !strings.Contains(r.stdout, c.name+" ") || !strings.Contains(r.stdout, c.summary) {
			t.Errorf("help lacks %s:\n%s", c.name, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, "-url") || !strings.Contains(r.stdout, "-json") {
		t.Errorf("help lacks the global flags:\n%s", r.stdout)
	}
	if r := runTQ(t, "memory://"); r.code != 2 || !strings.Contains(r.stderr, "usage: tq") {
		t.Errorf("no command: %+v, want exit 2 and usage", r)
	}
	r = runTQ(t, "memory://", "frobnicate")
	if r.code != 2 || !strings.Contains(r.stderr, `unknown command "frobnicate"`) {
		t.Errorf("unknown command: %+v, want exit 2", r)
	}
	if r := runTQ(t, "memory://", "partitions"); r.code != 0 || r.stdout != "" {
		t.Errorf("partitions of an empty memory queue: %+v", r)
	}
}
