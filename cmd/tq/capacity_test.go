package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"0", 0}, {"1073741824", 1 << 30}, {"512B", 512}, {"4KiB", 4 << 10}, {"512MiB", 512 << 20},
		{"1GiB", 1 << 30}, {"1.5 GiB", 3 << 29}, {"2tib", 2 << 40}, {"0.5KiB", 512}, {" 7 mib ", 7 << 20},
	} {
		if got, err := parseSize(tc.in); err != nil || got != tc.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"", "not a size"}, {"GiB", "not a size"}, {"1.2.3", "not a size"}, {".5KiB", "not a size"}, {"5.", "not a size"},
		{"1GB", `unknown unit "GB"`}, {"1M", `unknown unit "M"`}, {"12x", `unknown unit "x"`}, {"-5", "negative"},
		{"1.3", "whole number"}, {"0.3KiB", "whole number"}, {"8388608TiB", "too large"}, {"99999999999999999999", "too large"},
	} {
		if got, err := parseSize(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseSize(%q) = %d, %v; want an error with %q", tc.in, got, err, tc.want)
		}
	}
}

func TestBytesText(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 B", 1023: "1023 B", 1024: "1 KiB", 1536: "1.5 KiB", 12800: "12.5 KiB",
		1 << 20: "1 MiB", 3 << 29: "1.5 GiB", 1 << 40: "1 TiB", 5 << 40: "5 TiB",
	} {
		if got := bytesText(n); got != want {
			t.Errorf("bytesText(%d) = %q, want %q", n, got, want)
		}
	}
}

// capacityDoc is the capacity command's -json document.
type capacityDoc struct {
	Partition string
	Capacity  *struct {
		Rows, Bytes int64
		ClearAcked  []string `json:"clear_acked"`
	}
	Used struct{ Rows, Bytes int64 }
	Rows int
}

func capacityOfCLI(t *testing.T, url, partition string) capacityDoc {
	t.Helper()
	r := runTQ(t, url, "-json", "capacity", partition)
	var doc capacityDoc
	if err := json.Unmarshal([]byte(r.stdout), &doc); r.code != 0 || err != nil {
		t.Fatalf("capacity -json %s: %+v: %v", partition, r, err)
	}
	return doc
}

// TestCapacityCommand: capacity sets a partition's capacity, part by part,
// before its first put too, and the puts obey it; with no flags it prints
// the capacity and usage, and status shows them; -off lifts it. On the
// embedded engine and on a private redis-server.
func TestCapacityCommand(t *testing.T) {
	t.Run("memory", func(t *testing.T) { testCapacityCommand(t, sharedQueue(t)) })
	t.Run("redis", func(t *testing.T) { testCapacityCommand(t, redistest.Start(t).URL()+"?prefix=clitest") })
}

func testCapacityCommand(t *testing.T, url string) {
	ctx := t.Context()
	c, err := tq.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	row := func(keys ...string) tq.Batch { return tq.Batch{"x": tq.Stacked(make([]int64, len(keys)), len(keys))} }
	if err := c.BatchPut(ctx, "cap", []string{"k0", "k1", "k2"}, row("k0", "k1", "k2"), nil); err != nil {
		t.Fatal(err)
	}

	r := runTQ(t, url, "capacity", "cap")
	if r.code != 0 || !strings.HasPrefix(r.stdout, `capacity of partition "cap": none (rows 3, bytes `) {
		t.Fatalf("capacity of a partition without one: %+v", r)
	}
	doc := capacityOfCLI(t, url, "cap")
	if doc.Partition != "cap" || doc.Capacity != nil || doc.Used.Rows != 3 || doc.Used.Bytes <= 0 || doc.Rows != 3 {
		t.Fatalf("capacity -json without one: %+v", doc)
	}
	used := bytesText(doc.Used.Bytes)

	// Flags after the partition; SIZE with a unit.
	r = runTQ(t, url, "capacity", "cap", "-rows", "4", "-bytes", "1MiB", "-clear-acked", "train,eval")
	want := `set the capacity of partition "cap": rows 3/4, bytes ` + used + "/1 MiB, cleared once acked by train, eval\n"
	if r.code != 0 || r.stdout != want {
		t.Fatalf("capacity -rows 4 -bytes 1MiB -clear-acked train,eval: %+v, want stdout %q", r, want)
	}
	// A part not given keeps its value.
	if r := runTQ(t, url, "capacity", "-rows", "5", "cap"); r.code != 0 || !strings.Contains(r.stdout, "rows 3/5, bytes "+used+"/1 MiB, cleared once acked by train, eval") {
		t.Fatalf("capacity -rows 5: %+v", r)
	}
	doc = capacityOfCLI(t, url, "cap")
	if cp := doc.Capacity; cp == nil || cp.Rows != 5 || cp.Bytes != 1<<20 || !slices.Equal(cp.ClearAcked, []string{"train", "eval"}) {
		t.Fatalf("capacity -json after -rows 5: %+v, want rows 5, 1 MiB, train and eval", doc.Capacity)
	}
	st, err := c.Status(ctx, "cap")
	if err != nil {
		t.Fatal(err)
	}
	if st.Capacity.Rows != 5 || st.Capacity.Bytes != 1<<20 || !slices.Equal(st.Capacity.ClearAcked, []string{"train", "eval"}) {
		t.Fatalf("the engine's capacity: %+v", st.Capacity)
	}

	// status: the capacity line, and capacity and used in -json.
	r = runTQ(t, url, "status", "cap")
	if r.code != 0 || !strings.Contains(r.stdout, "partition \"cap\": 3 rows\ncapacity: rows 3/5, bytes "+used+"/1 MiB, cleared once acked by train, eval\n") {
		t.Fatalf("status with a capacity: %+v", r)
	}
	r = runTQ(t, url, "-json", "status", "cap")
	var sdoc struct {
		Capacity *struct {
			Rows, Bytes int64
			ClearAcked  []string `json:"clear_acked"`
		}
		Used struct{ Rows, Bytes int64 }
	}
	if err := json.Unmarshal([]byte(r.stdout), &sdoc); r.code != 0 || err != nil {
		t.Fatalf("status -json: %+v: %v", r, err)
	}
	if cp := sdoc.Capacity; cp == nil || cp.Rows != 5 || cp.Bytes != 1<<20 || len(cp.ClearAcked) != 2 || sdoc.Used.Rows != 3 || sdoc.Used.Bytes != doc.Used.Bytes {
		t.Fatalf("status -json: capacity %+v, used %+v", sdoc.Capacity, sdoc.Used)
	}

	// The puts obey it: three more rows do not fit five.
	more := []string{"k3", "k4", "k5"}
	if err := c.BatchPut(tq.WhenFull(ctx, tq.Fail), "cap", more, row(more...), nil); !errors.Is(err, tq.ErrFull) {
		t.Fatalf("put past the bound set by the command: %v, want ErrFull", err)
	}
	// Raised, the bound lets them in.
	if r := runTQ(t, url, "capacity", "-rows", "6", "cap"); r.code != 0 || !strings.Contains(r.stdout, "rows 3/6,") {
		t.Fatalf("capacity -rows 6: %+v", r)
	}
	if err := c.BatchPut(tq.WhenFull(ctx, tq.Fail), "cap", more, row(more...), nil); err != nil {
		t.Fatalf("put within the raised bound: %v", err)
	}

	// Naming one task to clear after clears at once the rows it consumed.
	consume(t, c, "cap", "train", "x")
	if r := runTQ(t, url, "capacity", "-clear-acked", "train", "cap"); r.code != 0 || !strings.Contains(r.stdout, "rows 5/6,") || !strings.HasSuffix(r.stdout, "cleared once acked by train\n") {
		t.Fatalf("capacity -clear-acked train after train consumed a row: %+v, want the row cleared", r)
	}

	// -off lifts it: status has no capacity line, -json none.
	r = runTQ(t, url, "capacity", "-off", "cap")
	if r.code != 0 || !strings.HasPrefix(r.stdout, `lifted the capacity of partition "cap": none (rows 5, bytes `) {
		t.Fatalf("capacity -off: %+v", r)
	}
	if r := runTQ(t, url, "status", "cap"); r.code != 0 || strings.Contains(r.stdout, "capacity") {
		t.Fatalf("status after -off: %+v", r)
	}
	if doc := capacityOfCLI(t, url, "cap"); doc.Capacity != nil || doc.Used.Rows != 5 {
		t.Fatalf("capacity -json after -off: %+v", doc)
	}

	// Set before the first put: status and capacity know the partition.
	r = runTQ(t, url, "capacity", "-rows", "2", "fresh")
	if r.code != 0 || r.stdout != "set the capacity of partition \"fresh\": rows 0/2, bytes 0 B (no bound)\npartition \"fresh\" has no rows yet: the capacity applies to its first puts\n" {
		t.Fatalf("capacity -rows 2 of a partition without rows: %+v", r)
	}
	if r := runTQ(t, url, "status", "fresh"); r.code != 0 || !strings.Contains(r.stdout, "partition \"fresh\": 0 rows\ncapacity: rows 0/2, bytes 0 B (no bound)\n") {
		t.Fatalf("status of a partition with a capacity and no rows: %+v", r)
	}
	if err := c.BatchPut(ctx, "fresh", []string{"a", "b"}, row("a", "b"), nil); err != nil {
		t.Fatal(err)
	}
	if err := c.BatchPut(tq.WhenFull(ctx, tq.Fail), "fresh", []string{"c"}, row("c"), nil); !errors.Is(err, tq.ErrFull) {
		t.Fatalf("a third row into a partition bounded at 2 before its first put: %v, want ErrFull", err)
	}
	// A name with neither rows nor a capacity is unknown, as elsewhere.
	for _, args := range [][]string{{"capacity", "nope"}, {"status", "nope"}} {
		if r := runTQ(t, url, args...); r.code != 1 || !strings.Contains(r.stderr, `no partition "nope" (partitions: cap, fresh)`) || r.stdout != "" {
			t.Errorf("%v: %+v, want exit 1 naming the partitions", args, r)
		}
	}
}

// TestCapacityBadFlags: a bad flag value fails with exit 2 and a message
// naming it, before the queue is touched: the capacity stays as it was.
func TestCapacityBadFlags(t *testing.T) {
	url := sharedQueue(t)
	if r := runTQ(t, url, "capacity", "-rows", "3", "-clear-acked", "t", "p"); r.code != 0 {
		t.Fatalf("capacity -rows 3: %+v", r)
	}
	tooMany := make([]string, 17)
	for i := range tooMany {
		tooMany[i] = fmt.Sprintf("t%d", i)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-rows", "-1"}, "-rows -1 is negative"},
		{[]string{"-rows", "many"}, `invalid value "many" for flag -rows`},
		{[]string{"-bytes", "1GB"}, `-bytes "1GB": unknown unit "GB" (want B, KiB, MiB, GiB or TiB)`},
		{[]string{"-bytes", "-5"}, `-bytes "-5" is negative`},
		{[]string{"-bytes", "1.3"}, `-bytes "1.3" is not a whole number of bytes`},
		{[]string{"-bytes", ""}, `-bytes "" is not a size`},
		{[]string{"-clear-acked", "a,,b"}, `-clear-acked "a,,b" has an empty task name`},
		{[]string{"-clear-acked", "a,a"}, `task "a" named twice`},
		{[]string{"-clear-acked", strings.Join(tooMany, ",")}, "17 tasks to clear after, at most 16"},
		{[]string{"-off", "-rows", "4"}, "-off lifts the whole capacity"},
	} {
		r := runTQ(t, url, append(append([]string{"capacity"}, tc.args...), "p")...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
			t.Errorf("capacity %v p: %+v, want exit 2 and stderr with %q", tc.args, r, tc.want)
		}
	}
	doc := capacityOfCLI(t, url, "p")
	if cp := doc.Capacity; cp == nil || cp.Rows != 3 || cp.Bytes != 0 || !slices.Equal(cp.ClearAcked, []string{"t"}) {
		t.Errorf("capacity after the refused commands: %+v, want rows 3 and task t", doc.Capacity)
	}
	if r := runTQ(t, url, "capacity", "p", "q"); r.code != 2 || !strings.Contains(r.stderr, "usage: tq capacity") {
		t.Errorf("capacity p q: %+v, want the usage", r)
	}
	// -clear-acked "" names none: the rows stay.
	if r := runTQ(t, url, "capacity", "-clear-acked", "", "p"); r.code != 0 || strings.Contains(r.stdout, "cleared once") {
		t.Errorf("capacity -clear-acked \"\": %+v", r)
	}
}
