package redis

import (
	"maps"
	"reflect"
	"testing"

	"github.com/tqgo/tqgo/backends"
)

// TestRowDecoderShares: consecutive rows with the same field section share
// one decoded map, and every row still decodes to what was encoded.
func TestRowDecoderShares(t *testing.T) {
	x := map[string]backends.FieldInfo{"x": {DType: "uint8", Shape: []int64{4}, Gen: 2}}
	y := map[string]backends.FieldInfo{"x": {DType: "uint8", Shape: []int64{4}, Gen: 3}}
	many := map[string]backends.FieldInfo{}
	for _, f := range []string{"input_ids", "responses", "mask", "logp", "rewards", "uid"} {
		many[f] = backends.FieldInfo{DType: "float32", Shape: []int64{512}}
	}
	rows := []*backends.Row{
		{Key: "a", Index: 1, Fields: x},
		{Key: "b", Index: 2, Fields: x, Tag: map[string]any{"n": int64(1)}},
		{Key: "c", Index: 3, Fields: y},
		{Key: "d", Index: 4, Fields: x},
		{Key: "e", Index: 5, Fields: many},
		{Key: "f", Index: 6, Fields: maps.Clone(many)}, // equal, not the same map: encoded alike all the same
	}
	var d rowDecoder
	var got []*backends.Row
	for _, r := range rows {
		e, err := encodeEntry(nil, []byte(preparedEntry(r.Index, "")[:indexLen+2]), 1, r, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, dr, err := d.decode(e)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(dr, r) {
			t.Fatalf("decoded %+v, want %+v", dr, r)
		}
		got = append(got, dr)
	}
	if reflect.ValueOf(got[0].Fields).UnsafePointer() != reflect.ValueOf(got[1].Fields).UnsafePointer() {
		t.Error("rows a and b have the same field section but separate maps")
	}
	if reflect.ValueOf(got[2].Fields).UnsafePointer() == reflect.ValueOf(got[3].Fields).UnsafePointer() {
		t.Error("rows c and d have different field sections but share a map")
	}
	if reflect.ValueOf(got[4].Fields).UnsafePointer() != reflect.ValueOf(got[5].Fields).UnsafePointer() {
		t.Error("rows e and f have equal fields but were encoded differently (field order?)")
	}
}
