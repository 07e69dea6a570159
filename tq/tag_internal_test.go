package tq

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

type status string

// TestNormalizeTagValueAccepts: each accepted type becomes its normalised
// type and value (see Tag).
func TestNormalizeTagValueAccepts(t *testing.T) {
	cases := []struct {
		name string
		in   any
		want any
	}{
		{"nil", nil, nil},
		{"bool", true, true},
		{"string", "héllo", "héllo"},
		{"empty string", "", ""},
		{"int", -3, int64(-3)},
		{"int8", int8(-128), int64(-128)},
		{"int16", int16(300), int64(300)},
		{"int32", int32(7), int64(7)},
		{"int64 min", int64(math.MinInt64), int64(math.MinInt64)},
		{"uint", uint(3), uint64(3)},
		{"uint8", uint8(200), uint64(200)},
		{"uint16", uint16(65535), uint64(65535)},
		{"uint32", uint32(1), uint64(1)},
		{"uint64 max", uint64(math.MaxUint64), uint64(math.MaxUint64)},
		{"float32 exact", float32(0.5), 0.5},
		{"float32 inexact", float32(0.1), float64(float32(0.1))},
		{"float64", 1e-300, 1e-300},
		{"+Inf", math.Inf(1), math.Inf(1)},
		{"-Inf float32", float32(math.Inf(-1)), math.Inf(-1)},
		{"bytes", []byte{1, 2}, []byte{1, 2}},
		{"nil bytes", []byte(nil), []byte{}},
		{"list", []any{int32(1), "x", nil, []any{uint8(2)}}, []any{int64(1), "x", nil, []any{uint64(2)}}},
		{"nil list", []any(nil), []any{}},
		{"map", map[string]any{"a": int16(1), "b": map[string]any{"c": float32(2)}}, map[string]any{"a": int64(1), "b": map[string]any{"c": float64(2)}}},
		{"nil map", map[string]any(nil), map[string]any{}},
		{"nested Tag", Tag{"b": 1}, map[string]any{"b": int64(1)}},
		{"[]string", []string{"a", "b"}, []any{"a", "b"}},
		{"nil []string", []string(nil), []any{}},
		{"[]int32", []int32{1, -2}, []any{int64(1), int64(-2)}},
		{"[]uint16", []uint16{1}, []any{uint64(1)}},
		{"[][]float32", [][]float32{{1}, {}}, []any{[]any{1.0}, []any{}}},
		{"[][]byte", [][]byte{{9}, nil}, []any{[]byte{9}, []byte{}}},
		{"[]map[string]any", []map[string]any{{"x": 1}}, []any{map[string]any{"x": int64(1)}}},
		{"map[string]float32", map[string]float32{"r": 0.5}, map[string]any{"r": 0.5}},
		{"map[string][]int", map[string][]int{"ids": {1, 2}}, map[string]any{"ids": []any{int64(1), int64(2)}}},
		{"[]Tag", []Tag{{"s": "x"}}, []any{map[string]any{"s": "x"}}},
		{"32 deep", nested(maxTagDepth), nestedWant(maxTagDepth)},
		{"[][][]int", [][][]int{{{1}}}, []any{[]any{[]any{int64(1)}}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, bad := normalizeTagValue(c.in, 1)
			if bad != nil {
				t.Fatalf("rejected: %s", bad.tagError("k"))
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %#v, want %#v", got, c.want)
			}
		})
	}
}

// nested is n lists around an int: []any{[]any{...{1}}}, the int at level
// n+1.
func nested(n int) any {
	var v any = 1
	for range n {
		v = []any{v}
	}
	return v
}

func nestedWant(n int) any {
	var v any = int64(1)
	for range n {
		v = []any{v}
	}
	return v
}

// TestNormalizeTagValueRejects: every other type is rejected, with the
// path to the bad value and a reason naming it.
func TestNormalizeTagValueRejects(t *testing.T) {
	n := 1
	cyclic := []any{nil}
	cyclic[0] = cyclic
	cyclicMap := map[string]any{}
	cyclicMap["self"] = cyclicMap
	cases := []struct {
		name     string
		in       any
		path     string
		inReason string
	}{
		{"pointer", &n, "", "*int"},
		{"nil pointer", (*int)(nil), "", "*int"},
		{"struct", struct{ A int }{1}, "", "struct"},
		{"time.Time", time.Now(), "", "time.Time"},
		{"time.Duration", time.Second, "", "time.Duration"},
		{"named string", status("ok"), "", "tq.status"},
		{"complex128", complex(1, 2), "", "complex128"},
		{"complex64", complex64(1), "", "complex64"},
		{"uintptr", uintptr(1), "", "uintptr"},
		{"chan", make(chan int), "", "chan int"},
		{"func", func() {}, "", "func()"},
		{"error", errors.New("x"), "", "errors"},
		{"array", [2]int{1, 2}, "", "[2]int"},
		{"int keys", map[int]string{1: "a"}, "", "map[int]string"},
		{"named keys", map[status]int{}, "", "map[tq.status]int"},
		{"NaN", math.NaN(), "", "NaN"},
		{"float32 NaN", float32(math.NaN()), "", "NaN"},
		{"empty []time.Time", []time.Time{}, "", "[]time.Time"},
		{"[]*int", []*int{&n}, "", "[]*int"},
		{"[]error", []error{}, "", "[]error"},
		{"map of chans", map[string]chan int{}, "", "map[string]chan int"},
		{"named slice", []status{"a"}, "", "[]tq.status"},
		{"in a list", []any{1, []any{"ok", &n}}, "[1][1]", "*int"},
		{"in a map", map[string]any{"a": 1, "b": map[string]any{"c": math.NaN()}}, `["b"]["c"]`, "NaN"},
		{"first bad entry by key", map[string]any{"z": &n, "m": time.Now(), "a": 1}, `["m"]`, "time.Time"},
		{"in a typed map", map[string][]any{"x": {struct{}{}}}, `["x"][0]`, "struct {}"},
		{"in a Tag", Tag{"t": complex(0, 1)}, `["t"]`, "complex128"},
		{"too deep", nested(maxTagDepth + 1), strings.Repeat("[0]", maxTagDepth), "nested more than 32"},
		{"cyclic list", cyclic, strings.Repeat("[0]", maxTagDepth), "containing themselves"},
		{"cyclic map", cyclicMap, strings.Repeat(`["self"]`, maxTagDepth), "containing themselves"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, bad := normalizeTagValue(c.in, 1)
			if bad == nil {
				t.Fatalf("accepted %#v", c.in)
			}
			te := bad.tagError("k")
			if te.Tag != "k" || te.Path != c.path || !strings.Contains(te.Reason, c.inReason) {
				t.Fatalf("got %+v, want tag \"k\", path %q, reason containing %q", te, c.path, c.inReason)
			}
		})
	}
}

// TestNormalizeTagsErrors: a bad value fails the call with ErrInvalid, a
// *KeyError naming partition and row key, and a *TagError naming the tag
// key (the first bad one in sorted order, whatever the map's order).
func TestNormalizeTagsErrors(t *testing.T) {
	tags := []Tag{{"ok": 1}, {"z": 1, "when": time.Now(), "ptr": new(int), "a": "x"}}
	for range 20 { // map iteration varies from run to run
		out, err := normalizeTags("p", []string{"k0", "k1"}, tags)
		if out != nil || !errors.Is(err, ErrInvalid) {
			t.Fatalf("got %v, %v; want ErrInvalid", out, err)
		}
		var ke *KeyError
		var te *TagError
		if !errors.As(err, &ke) || ke.Partition != "p" || ke.Key != "k1" || ke.Field != "" {
			t.Fatalf("KeyError %+v in %v", ke, err)
		}
		if !errors.As(err, &te) || te.Tag != "ptr" || te.Path != "" || !strings.Contains(te.Reason, "*int") {
			t.Fatalf("TagError %+v in %v", te, err)
		}
		for _, s := range []string{`"p"`, `"k1"`, `"ptr"`, "*int"} {
			if !strings.Contains(err.Error(), s) {
				t.Fatalf("message %q does not name %s", err, s)
			}
		}
	}
}

// TestNormalizeTagsCopies: the result shares nothing with the input, keeps
// nil tags nil, and shares one copy between consecutive rows given one map.
func TestNormalizeTagsCopies(t *testing.T) {
	raw := []byte{1, 2}
	list := []any{int32(1), raw}
	inner := map[string]any{"n": 1}
	shared := Tag{"list": list, "inner": inner, "ids": []string{"a"}}
	tags := []Tag{shared, shared, nil, {"x": uint8(1)}}
	out, err := normalizeTags("p", []string{"a", "b", "c", "d"}, tags)
	if err != nil {
		t.Fatal(err)
	}
	want := Tag{"list": []any{int64(1), []byte{1, 2}}, "inner": map[string]any{"n": int64(1)}, "ids": []any{"a"}}
	if !reflect.DeepEqual(out[0], want) || out[2] != nil || !reflect.DeepEqual(out[3], Tag{"x": uint64(1)}) {
		t.Fatalf("got %#v", out)
	}
	if reflect.ValueOf(out[0]).UnsafePointer() != reflect.ValueOf(out[1]).UnsafePointer() {
		t.Fatal("rows given one map got two copies")
	}
	raw[0], list[0], inner["n"], shared["new"] = 9, "changed", "changed", 1
	tags[0]["ids"].([]string)[0] = "changed"
	if !reflect.DeepEqual(out[0], want) || !reflect.DeepEqual(out[1], want) {
		t.Fatalf("changing the input changed the copy: %#v", out[0])
	}
}

// TestNormalizeTagsSharesEqualScalarTags: consecutive rows whose distinct
// maps hold equal scalars share one copy; a row differing in a value, a
// value's type, a key, or holding a list gets its own, each the
// normalisation of its own tag.
func TestNormalizeTagsSharesEqualScalarTags(t *testing.T) {
	tags := []Tag{
		{"step": 1, "status": "done"},
		{"step": 1, "status": "done"},        // equal: shares
		{"step": int64(1), "status": "done"}, // another type: own copy, equal value
		{"step": int64(2), "status": "done"},
		{"step": int64(2), "other": "done"},
		{"step": int64(2), "other": []string{"a"}},
		{"step": int64(2), "other": []string{"a"}}, // a list: own copy
		{"step": int64(2), "other": uint8(1)},
		{"step": int64(2), "other": int8(1)}, // another type: own copy
		{"step": math.NaN()},                 // invalid
	}
	keys := make([]string, len(tags)+1)
	for i := range keys {
		keys[i] = string(rune('a' + i))
	}
	out, err := normalizeTags("p", keys[:len(tags)-1], tags[:len(tags)-1])
	if err != nil {
		t.Fatal(err)
	}
	for i, tag := range tags[:len(tags)-1] {
		want, err := normalizeTag(tag)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(out[i], want) {
			t.Errorf("row %d: %v, want %v", i, out[i], want)
		}
	}
	same := func(i, j int) bool { return reflect.ValueOf(out[i]).Pointer() == reflect.ValueOf(out[j]).Pointer() }
	if !same(0, 1) {
		t.Error("rows 0 and 1, equal tags, do not share a copy")
	}
	for _, i := range []int{2, 4, 6, 8} {
		if same(i-1, i) {
			t.Errorf("row %d shares the copy of row %d, whose tag differs or is not all scalars", i, i-1)
		}
	}
	if _, err := normalizeTags("p", keys, append(tags[:len(tags)-1:len(tags)-1], Tag{"step": math.NaN()}, Tag{"step": math.NaN()})); !errors.Is(err, ErrInvalid) {
		t.Errorf("a NaN tag after another row: err %v, want ErrInvalid", err)
	}
}
