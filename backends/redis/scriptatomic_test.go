package redis_test

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

// fenceRecord is a record fenceScript appends: kind F and the fence's id,
// no body.
var fenceRecord = regexp.MustCompile(`^F[0-9a-f]{16}$`)

// TestScriptChecksBeforeWriting: the append script checks every key it
// may write before its first write. With the committed-row counter or the
// index counter not a number, a put fails at its Prepare or at its
// commit, and the script changed nothing: the log holds no record of the
// failed write (the settle that follows the script's error may append a
// fence: a record of no write, which stops the failed one from ever
// applying), and every other key stays as it was. Afterwards, with the
// counter repaired, the rows that were there read back.
func TestScriptChecksBeforeWriting(t *testing.T) {
	srv := redistest.Start(t)
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer admin.Close()
	n := 0
	for _, query := range []string{"", "direct=false"} {
		for _, counter := range []string{"n", "next"} {
			for _, at := range []int{1, 2} { // the put's metadata write: 1 Prepare, 2 commit
				n++
				prefix := fmt.Sprintf("sa%d", n)
				name := fmt.Sprintf("%s/%s/write%d", query, counter, at)
				t.Run(name, func(t *testing.T) {
					testScriptChecks(t, admin, srv.URL()+"?prefix="+prefix+"&"+query, prefix, counter, at)
				})
			}
		}
	}
}

func testScriptChecks(t *testing.T, admin *goredis.Client, url, prefix, counter string, at int) {
	ctx := t.Context()
	keys := map[string]string{
		"n":    prefix + ":{" + prefix + ":" + part + "}:n",
		"next": prefix + ":{" + prefix + "}:next",
	}
	logKey := prefix + ":{" + prefix + ":" + part + "}:l"
	headKey := prefix + ":{" + prefix + ":" + part + "}:h"
	base := proxyTQ(t, url)
	if err := base.BatchPut(ctx, part, baseRows, batchOf(baseRows, oldSeed, false), nil); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if n, err := admin.Exists(ctx, k).Result(); err != nil || n != 1 {
			t.Fatalf("key %s: exists %d, %v: the test names the wrong keys", k, n, err)
		}
	}
	good, err := admin.Get(ctx, keys[counter]).Result()
	if err != nil {
		t.Fatal(err)
	}
	var before map[string]string
	var logBefore []string
	corrupt := func() {
		if err := admin.Set(ctx, keys[counter], "abc", 0).Err(); err != nil {
			t.Error(err)
		}
		before = keyDump(t, admin, prefix)
		var err error
		if logBefore, err = admin.LRange(ctx, logKey, 0, -1).Result(); err != nil {
			t.Error(err)
		}
	}
	c, _ := commitTQ(t, url, func(write int) {
		if write == at {
			corrupt()
		}
	})
	if _, err := c.List(ctx, part); err != nil { // its view is current: write 1 is the Prepare's append
		t.Fatal(err)
	}
	putKeys := slices.Concat(putReplaced, putNew)
	err = c.BatchPut(ctx, part, putKeys, batchOf(putKeys, newSeed, false), nil)
	if before == nil {
		t.Fatalf("the put made no metadata write %d (BatchPut: %v)", at, err)
	}
	if err == nil {
		t.Fatalf("BatchPut with the %s counter %q succeeded", counter, "abc")
	}
	if errors.Is(err, tq.ErrOutcomeUnknown) {
		t.Fatalf("BatchPut: %v: the server replied, the outcome is known", err)
	}
	t.Logf("BatchPut: %v", err)

	logAfter, err := admin.LRange(ctx, logKey, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(logAfter) < len(logBefore) || !slices.Equal(logAfter[:len(logBefore)], logBefore) {
		t.Fatalf("the log changed: %d records before, %d after", len(logBefore), len(logAfter))
	}
	for _, r := range logAfter[len(logBefore):] {
		if !fenceRecord.MatchString(r) {
			t.Fatalf("the failed write left a record of kind %q in the log", r[:1])
		}
	}
	t.Logf("the settle appended %d fence(s)", len(logAfter)-len(logBefore))
	after := keyDump(t, admin, prefix)
	if len(logAfter) > len(logBefore) {
		// The fence moved the log's head; nothing else may differ.
		delete(before, headKey)
		delete(after, headKey)
	}
	delete(before, logKey)
	delete(after, logKey)
	for k := range before {
		if _, ok := after[k]; !ok && strings.HasPrefix(k, prefix+":d:") && at == 2 {
			// A cell this put wrote before its commit failed, rolled
			// back by tq.
			delete(before, k)
		}
	}
	if !maps.Equal(before, after) {
		for k, v := range after {
			if before[k] != v {
				t.Errorf("key %s: %q before the failed write, %q after", k, before[k], v)
			}
		}
		for k := range before {
			if _, ok := after[k]; !ok {
				t.Errorf("key %s: gone after the failed write", k)
			}
		}
		t.FailNow()
	}

	// Repaired, the partition reads as before the failed put.
	if err := admin.Set(ctx, keys[counter], good, 0).Err(); err != nil {
		t.Fatal(err)
	}
	fresh := proxyTQ(t, url)
	m, err := fresh.List(ctx, part)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Keys(); !slices.Equal(got, baseRows) {
		t.Fatalf("rows %q after the failed put, want %q", got, baseRows)
	}
	wantStacked(t, fresh, part, baseRows, batchData(baseRows, oldSeed))
}

// batchData is the x column of batchOf(keys, seed, ...).
func batchData(keys []string, seed byte) []byte {
	var b []byte
	for _, k := range keys {
		b = append(b, cellOf(k, seed)...)
	}
	return b
}

// keyDump is every key under prefix without an expiry (a put's marker
// expires: it is left out), as its type and value.
func keyDump(t *testing.T, c *goredis.Client, prefix string) map[string]string {
	t.Helper()
	ctx := t.Context()
	all, err := c.Keys(ctx, prefix+":*").Result()
	if err != nil {
		t.Fatal(err)
	}
	keys, err := redistest.Persistent(ctx, c, all)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		typ, err := c.Type(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		var v any
		switch typ {
		case "string":
			v, err = c.Get(ctx, k).Result()
		case "list":
			v, err = c.LRange(ctx, k, 0, -1).Result()
		case "set":
			var m []string
			m, err = c.SMembers(ctx, k).Result()
			slices.Sort(m)
			v = m
		case "stream":
			v, err = c.XRange(ctx, k, "-", "+").Result()
		default:
			t.Fatalf("key %s is a %s", k, typ)
		}
		if err != nil {
			t.Fatal(err)
		}
		out[k] = fmt.Sprintf("%s %q", typ, v)
	}
	return out
}
