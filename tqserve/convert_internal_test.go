package tqserve

import (
	"fmt"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/tqserve/tqpb"
)

// Rows decoded together share a Fields map where their fields are alike,
// and only there; every row reads back what was sent.
func TestFromRowsSharesAlikeFields(t *testing.T) {
	f := func(gen uint64, shape ...int64) map[string]metadata.FieldInfo {
		return map[string]metadata.FieldInfo{"x": {DType: "int64", Shape: shape, Gen: gen}}
	}
	in := []*metadata.Row{
		{Key: "a", Index: 1, Fields: f(1, 2)},
		{Key: "b", Index: 2, Fields: f(1, 2)},
		{Key: "c", Index: 3, Fields: f(2, 2)}, // another generation
		{Key: "d", Index: 4, Fields: f(2, 3)}, // another shape
		{Key: "e", Index: 5, Fields: f(2)},    // no shape
		{Key: "f", Index: 6, Fields: f(2)},
	}
	pb, err := toRows(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := fromRows(pb)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range out {
		want := in[i].Fields["x"]
		got := r.Fields["x"]
		if r.Key != in[i].Key || got.Gen != want.Gen || got.DType != want.DType || len(got.Shape) != len(want.Shape) || (got.Shape == nil) != (want.Shape == nil) {
			t.Errorf("row %d: %+v, want %+v", i, r, in[i])
		}
	}
	shared := func(i, j int) bool {
		// Same map: a write through one shows in the other.
		return len(out[i].Fields) > 0 && mapID(out[i].Fields) == mapID(out[j].Fields)
	}
	for _, c := range []struct {
		i, j int
		want bool
	}{{0, 1, true}, {1, 2, false}, {2, 3, false}, {3, 4, false}, {4, 5, true}} {
		if got := shared(c.i, c.j); got != c.want {
			t.Errorf("rows %d and %d share their fields: %v, want %v", c.i, c.j, got, c.want)
		}
	}
}

// A field named twice on the wire: the last counts, as when the list is
// read as a map.
func TestFromFieldsLastWins(t *testing.T) {
	got := fromFields([]*tqpb.FieldEntry{
		{Name: "x", Info: &tqpb.FieldInfo{Gen: 1}},
		{Name: "x", Info: &tqpb.FieldInfo{Gen: 2}},
	})
	if len(got) != 1 || got["x"].Gen != 2 {
		t.Fatalf("fields %v, want x at gen 2", got)
	}
}

// mapID identifies a map by its header's address.
func mapID(m map[string]metadata.FieldInfo) uintptr {
	return reflect.ValueOf(m).Pointer()
}

// Rows of several alike fields, each row with a map of its own, share
// their Fields once they crossed the wire: the fields are listed in one
// order, not each map's iteration order.
func TestFromRowsSharesAlikeFieldsOfSeveral(t *testing.T) {
	var in []*metadata.Row
	for i := range 16 {
		in = append(in, &metadata.Row{Key: fmt.Sprint(i), Index: uint64(i), Fields: map[string]metadata.FieldInfo{
			"input_ids": {DType: "int64", Shape: []int64{4}, Gen: 1},
			"responses": {DType: "int64", Shape: []int64{4}, Gen: 1},
			"rewards":   {DType: "float32", Shape: []int64{}, Gen: 1},
			"mask":      {DType: "bool", Shape: []int64{4}, Gen: 1},
		}})
	}
	pb, err := toRows(in)
	if err != nil {
		t.Fatal(err)
	}
	b, err := proto.Marshal(&tqpb.RowsReply{Rows: pb})
	if err != nil {
		t.Fatal(err)
	}
	var r tqpb.RowsReply
	if err := proto.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	out, err := fromRows(r.GetRows())
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(out); i++ {
		if mapID(out[i].Fields) != mapID(out[i-1].Fields) {
			t.Fatalf("rows %d and %d, alike, do not share their fields", i-1, i)
		}
	}
	if got := out[0].Fields; !reflect.DeepEqual(got, in[0].Fields) {
		t.Fatalf("fields %v, want %v", got, in[0].Fields)
	}
}
