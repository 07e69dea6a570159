package tq_test

import (
	"context"
	"errors"
	"testing"

	"github.com/tqgo/tqgo/codec"
	"github.com/tqgo/tqgo/tq"
)

func TestSmoke(t *testing.T) {
	ctx := context.Background()
	c, err := tq.Open(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	keys := []string{"a", "b", "c"}
	ids := []int64{1, 2, 3, 4, 5, 6}
	resp := [][]int32{{1}, {2, 3}, {4, 5, 6}}
	err = c.BatchPut(ctx, "p", keys, tq.Batch{
		"ids":  tq.Stacked(ids, 3, 2),
		"resp": tq.JaggedOf(resp),
		"uid":  tq.ValuesOf([]string{"x", "y", "z"}),
	}, []tq.Tag{{"s": 1}, {"s": 1}, {"s": 1}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.BatchGet(ctx, "p", []string{"c", "a"})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := tq.As[int64](b["ids"])
	if len(got) != 4 || got[0] != 5 || got[3] != 2 {
		t.Fatalf("ids %v", got)
	}
	if b["resp"].Kind() != tq.KindJagged || b["uid"].Values()[0] != "z" {
		t.Fatalf("resp %v uid %v", b["resp"].Kind(), b["uid"].Values())
	}
	if err := c.Put(ctx, "p", "a", map[string]any{"rew": codec.Scalar(float32(1))}, nil); err != nil {
		t.Fatal(err)
	}
	_, err = c.BatchGet(ctx, "p", keys, "rew")
	var ke *tq.KeyError
	if !errors.Is(err, tq.ErrNotReady) || !errors.As(err, &ke) || ke.Key != "b" {
		t.Fatalf("err %v", err)
	}
	if err := c.Put(ctx, "p", "a", map[string]any{"ids": codec.Scalar(float32(1))}, nil); err != nil {
		t.Fatal(err)
	}
	b, err = c.BatchGet(ctx, "p", []string{"a"}, "ids")
	if err != nil || b["ids"].Kind() != tq.KindStacked {
		t.Fatal(err)
	}
	if err := c.Clear(ctx, "p", keys); err != nil {
		t.Fatal(err)
	}
	m, _ := c.List(ctx, "p")
	if len(m.Rows) != 0 {
		t.Fatal(m.Rows)
	}
}
