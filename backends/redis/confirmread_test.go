package redis_test

import (
	"bytes"
	"errors"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/codec"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

// TestConfirmedRead: a reader that has a copy of the partition's rows
// reads with one request (no script through go-redis), and sees every
// change another process made since its copy: a rewritten field, a new
// field, deleted rows, the log replaced by a snapshot, the server's
// scripts flushed.
func TestConfirmedRead(t *testing.T) {
	defer redis.SetCompactAt(8)()
	srv := redistest.Start(t)
	ctx := t.Context()
	url := srv.URL() + "?prefix=confirm"
	writer := openTQ(t, url)
	c, h := commitTQ(t, url, func(int) {})
	keys := keyRange("k", 200)
	put := func(seed byte, field string) []byte {
		t.Helper()
		data, batch := smallBatch(len(keys), seed)
		if field != "x" {
			batch = tq.Batch{field: batch["x"]}
		}
		if err := writer.BatchPut(ctx, "p", keys, batch, nil); err != nil {
			t.Fatal(err)
		}
		return data
	}
	get := func(what, field string, want []byte) {
		t.Helper()
		got, err := c.BatchGet(ctx, "p", keys, field)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if x, ok := got[field].Tensor(); !ok || !bytes.Equal(x.Data, want) {
			t.Fatalf("%s: field %s read back is not the latest put", what, field)
		}
	}

	data := put(1, "x")
	get("first read (looks the rows up)", "x", data)
	before := h.scripts.Load()
	get("read of an unchanged partition", "x", data)
	if got := h.scripts.Load() - before; got != 0 {
		t.Errorf("a read from the copy ran %d scripts through go-redis, want 0", got)
	}

	data = put(2, "x") // another process rewrites the field
	get("after a rewrite", "x", data)
	// A rewrite whose replaced cells are still there (their deletion not
	// done yet): only the confirmation tells the copy is stale.
	data = rewriteKeepingOld(t, open(t, url), "p", keys, 5)
	get("after a rewrite that left the old cells", "x", data)
	y := put(3, "y") // and adds a field
	get("after a new field", "y", y)
	got, err := c.BatchGet(ctx, "p", keys)
	if err != nil || len(got) != 2 {
		t.Fatalf("all fields after a new one: %d fields, %v; want x and y", len(got), err)
	}

	for i := range 6 { // past compactAt: a snapshot replaces the log
		data = put(byte(10+i), "x")
	}
	get("after a snapshot", "x", data)

	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer admin.Close()
	if err := admin.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	data = put(20, "x") // reloads the scripts it needs
	if err := admin.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	get("after SCRIPT FLUSH", "x", data)

	if err := writer.Clear(ctx, "p", keys[:1]); err != nil {
		t.Fatal(err)
	}
	if _, err := c.BatchGet(ctx, "p", keys, "x"); !errors.Is(err, tq.ErrNotFound) {
		t.Fatalf("read of a row another process deleted: %v, want ErrNotFound", err)
	}
}

// rewriteKeepingOld writes new cells of field x of keys' rows through the
// MetaStore and Store directly, and does not delete the cells the commit
// replaced.
func rewriteKeepingOld(t *testing.T, s *redis.Store, p string, keys []string, seed byte) []byte {
	t.Helper()
	ctx := t.Context()
	m := s.Meta()
	res, err := m.Prepare(ctx, p, keys, []string{"x"})
	if err != nil {
		t.Fatal(err)
	}
	data, _ := smallBatch(len(keys), seed)
	prefix, _, err := codec.TensorPrefix(codec.Uint8, []int64{512})
	if err != nil {
		t.Fatal(err)
	}
	cells := make([]backends.Cell, len(keys))
	ups := make([]backends.RowUpdate, len(keys))
	for i, k := range keys {
		g := res[i].Gens["x"]
		cells[i] = backends.Cell{Key: backends.StorageKey(res[i].Index, "x", g), Head: prefix, Body: data[i*512 : (i+1)*512]}
		ups[i] = backends.RowUpdate{Key: k, Index: res[i].Index, Fields: map[string]backends.FieldInfo{"x": {DType: "uint8", Shape: []int64{512}, Gen: g}}}
	}
	if err := s.Write(ctx, cells); err != nil {
		t.Fatal(err)
	}
	cr, err := m.Commit(ctx, p, ups)
	if err != nil || len(cr.Superseded) != len(keys) {
		t.Fatalf("rewrite: %d cells superseded, %v; want %d", len(cr.Superseded), err, len(keys))
	}
	return data
}

// TestConfirmedReadMixed: a read of stacked and packed fields (a GRPO
// batch's tensors and uid strings) also skips the lookup when the copy is
// current, reading the packed cells beside the confirmed read, and sees
// another process's rewrite of the packed field.
func TestConfirmedReadMixed(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	url := srv.URL() + "?prefix=mixed"
	c, h := commitTQ(t, url, func(int) {})
	keys := keyRange("k", 64)
	uids := func(tag string) tq.Column {
		vals := make([]any, len(keys))
		for i := range vals {
			vals[i] = tag + keys[i]
		}
		return tq.Values(vals)
	}
	data, batch := smallBatch(len(keys), 1)
	batch["uid"] = uids("a-")
	if err := c.BatchPut(ctx, "p", keys, batch, nil); err != nil {
		t.Fatal(err)
	}
	check := func(what, tag string) {
		t.Helper()
		got, err := c.BatchGet(ctx, "p", keys)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if x, ok := got["x"].Tensor(); !ok || !bytes.Equal(x.Data, data) {
			t.Fatalf("%s: field x read back is not what was put", what)
		}
		vals := got["uid"].Values()
		if len(vals) != len(keys) || vals[3] != tag+keys[3] {
			t.Fatalf("%s: uid %v; want %q at row 3", what, vals, tag+keys[3])
		}
	}
	check("first read (the server learns the read script)", "a-")
	before := h.scripts.Load()
	check("read of the client's own put", "a-")
	if got := h.scripts.Load() - before; got != 0 {
		t.Errorf("a mixed read from the copy ran %d scripts through go-redis, want 0", got)
	}
	other := openTQ(t, url)
	if err := other.BatchPut(ctx, "p", keys, tq.Batch{"uid": uids("b-")}, nil); err != nil {
		t.Fatal(err)
	}
	check("after another process rewrote uid", "b-")
}

// TestConfirmedReadMixedVanishedCell: a packed cell read beside the
// confirmed read is gone from the server (deleted behind tq's back): the
// read falls back to the usual path, which names the row and field.
func TestConfirmedReadMixedVanishedCell(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	url := srv.URL() + "?prefix=mixgone"
	c, _ := commitTQ(t, url, func(int) {})
	keys := keyRange("k", 16)
	_, batch := smallBatch(len(keys), 1)
	vals := make([]any, len(keys))
	for i := range vals {
		vals[i] = "uid-" + keys[i]
	}
	batch["uid"] = tq.Values(vals)
	if err := c.BatchPut(ctx, "p", keys, batch, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.BatchGet(ctx, "p", keys); err != nil { // the copy is current
		t.Fatal(err)
	}
	m, err := c.Lookup(ctx, "p", keys[3:4])
	if err != nil {
		t.Fatal(err)
	}
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer admin.Close()
	cell := "mixgone:d:" + backends.StorageKey(m.Rows[0].Index, "uid", 0) // first put: generation 0
	if n, err := admin.Del(ctx, cell).Result(); err != nil || n != 1 {
		t.Fatalf("deleting %s: %d, %v", cell, n, err)
	}
	_, err = c.BatchGet(ctx, "p", keys)
	var ke *tq.KeyError
	if !errors.As(err, &ke) || ke.Key != keys[3] || ke.Field != "uid" {
		t.Fatalf("BatchGet with a vanished uid cell: %v, want a KeyError for %s/uid", err, keys[3])
	}
}
