package tqtest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/tqgo/tqgo/codec"
)

// The values of the model's histories: what a caller hands a put (in) and
// what every client must read back (want), written out by hand from the
// documented rules (tq.Tag for tags, package codec's value model for
// general field values), with no code shared with the client's own
// normalisation.

// pair is one value as a caller passes it and as it reads back.
type pair struct{ in, want any }

var negZero = math.Copysign(0, -1)

// tensorWant is a tensor cell as it must read back: dtype name, shape and
// bytes (little-endian elements).
type tensorWant struct {
	dtype string
	shape []int64
	data  []byte
}

// fieldPairs are general values of a field cell (codec: signed integers
// read back as int64, unsigned as uint64, float32 stays float32).
func fieldPairs() []pair {
	return []pair{
		{negZero, negZero},
		{0.0, 0.0},
		{float32(negZero), float32(negZero)},
		{float32(1.5), float32(1.5)},
		{math.MaxFloat64, math.MaxFloat64},
		{math.Inf(-1), math.Inf(-1)},
		{int(-5), int64(-5)},
		{int32(7), int64(7)},
		{int64(math.MinInt64), int64(math.MinInt64)},
		{uint64(math.MaxUint64), uint64(math.MaxUint64)},
		{uint8(7), uint64(7)},
		{uint(1 << 40), uint64(1 << 40)},
		{"", ""},
		{"héllo", "héllo"},
		{true, true},
		{nil, nil},
		{[]byte{0, 255}, []byte{0, 255}},
		{[]any{int64(1), "x", negZero}, []any{int64(1), "x", negZero}},
		{[]any{uint16(3), []any{int8(-1)}}, []any{uint64(3), []any{int64(-1)}}},
		{map[string]any{"k": uint64(3), "z": negZero, "l": []any{}}, map[string]any{"k": uint64(3), "z": negZero, "l": []any{}}},
		{map[string]any{"m": map[string]any{"i": int64(math.MaxInt64)}}, map[string]any{"m": map[string]any{"i": int64(math.MaxInt64)}}},
	}
}

// tagPairs are tag values (tq.Tag: signed integers become int64, unsigned
// uint64, floats float64, typed lists []any, typed maps map[string]any).
func tagPairs() []pair {
	return []pair{
		{int(3), int64(3)},
		{uint(3), uint64(3)},
		{int64(math.MaxInt64), int64(math.MaxInt64)},
		{int64(math.MinInt64), int64(math.MinInt64)},
		{uint64(math.MaxUint64), uint64(math.MaxUint64)},
		{negZero, negZero},
		{0.0, 0.0},
		{float32(negZero), negZero},
		{float32(1.5), 1.5},
		{1e300, 1e300},
		{math.Inf(1), math.Inf(1)},
		{"s", "s"},
		{"", ""},
		{nil, nil},
		{true, true},
		{[]byte{1, 2}, []byte{1, 2}},
		{[]int32{1, -2}, []any{int64(1), int64(-2)}},
		{[]string{}, []any{}},
		{map[string]float64{"a": negZero}, map[string]any{"a": negZero}},
		{[]any{[]any{"n"}, map[string]any{"m": uint8(1)}}, []any{[]any{"n"}, map[string]any{"m": uint64(1)}}},
		{map[string]any{"deep": []any{map[string]any{"z": float32(negZero)}}}, map[string]any{"deep": []any{map[string]any{"z": negZero}}}},
	}
}

// uidPairs are group ids: strings and int64s only, so that whether two
// ids are one group never depends on a choice the contract leaves open
// (is int64(1) the group of uint64(1)?).
func uidPairs() []pair {
	return []pair{{"u0", "u0"}, {"u1", "u1"}, {int(1), int64(1)}}
}

// verPairs are staleness versions: numbers of each kind, and values that
// are no number (never stale).
func verPairs() []pair {
	return []pair{
		{int(0), int64(0)}, {int(1), int64(1)}, {int(2), int64(2)}, {int(3), int64(3)},
		{uint8(2), uint64(2)}, {negZero, negZero}, {2.5, 2.5}, {"3", "3"},
	}
}

// jaggedCell is a float32 row of 1 to 3 elements (-0 among them).
func jaggedCell(rng *rand.Rand) pair {
	n := 1 + rng.IntN(3)
	row := make([]float32, n)
	data := make([]byte, 0, 4*n)
	for i := range row {
		switch rng.IntN(3) {
		case 0:
			row[i] = float32(negZero)
		case 1:
			row[i] = float32(rng.IntN(100)) / 4
		default:
			row[i] = -float32(rng.IntN(100))
		}
		data = binary.LittleEndian.AppendUint32(data, math.Float32bits(row[i]))
	}
	return pair{row, tensorWant{dtype: "float32", shape: []int64{int64(n)}, data: data}}
}

// stackedCell is an int64 row of 2 elements, of a stacked [rows, 2] column.
func stackedCell(rng *rand.Rand) pair {
	row := []int64{rng.Int64N(1000) - 500, math.MinInt64 + rng.Int64N(3)}
	data := binary.LittleEndian.AppendUint64(nil, uint64(row[0]))
	data = binary.LittleEndian.AppendUint64(data, uint64(row[1]))
	return pair{row, tensorWant{dtype: "int64", shape: []int64{2}, data: data}}
}

// same reports whether got is exactly want: the same Go types all the way
// down (int64 is not uint64, float32 is not float64), floats by their
// bits (so -0 is not +0), tensors by dtype, shape and bytes.
func same(want, got any) bool {
	switch w := want.(type) {
	case nil:
		return got == nil
	case tensorWant:
		g, ok := got.(codec.Tensor)
		return ok && g.DType.String() == w.dtype && slices.Equal(g.Shape, w.shape) && bytes.Equal(g.Data, w.data)
	case float64:
		g, ok := got.(float64)
		return ok && math.Float64bits(g) == math.Float64bits(w)
	case float32:
		g, ok := got.(float32)
		return ok && math.Float32bits(g) == math.Float32bits(w)
	case []byte:
		g, ok := got.([]byte)
		return ok && bytes.Equal(g, w)
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !same(w[i], g[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		g, ok := asMap(got)
		return ok && sameMap(w, g)
	case int64, uint64, bool, string:
		return want == got
	}
	panic(fmt.Sprintf("tqtest: model value of type %T", want))
}

func asMap(v any) (map[string]any, bool) {
	m, ok := v.(map[string]any)
	return m, ok
}

func sameMap(want, got map[string]any) bool {
	if len(want) != len(got) {
		return false
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok || !same(w, g) {
			return false
		}
	}
	return true
}

// show prints a value with its Go types, -0 as -0, for failure messages.
func show(v any) string {
	var b strings.Builder
	showTo(&b, v)
	return b.String()
}

func showTo(b *strings.Builder, v any) {
	switch x := v.(type) {
	case nil:
		b.WriteString("nil")
	case float64:
		b.WriteString("float64(" + showFloat(x, 64) + ")")
	case float32:
		b.WriteString("float32(" + showFloat(float64(x), 32) + ")")
	case int64:
		fmt.Fprintf(b, "int64(%d)", x)
	case uint64:
		fmt.Fprintf(b, "uint64(%d)", x)
	case string:
		b.WriteString(strconv.Quote(x))
	case bool:
		fmt.Fprint(b, x)
	case []byte:
		fmt.Fprintf(b, "[]byte%v", []byte(x))
	case []any:
		b.WriteString("[")
		for i, e := range x {
			if i > 0 {
				b.WriteString(" ")
			}
			showTo(b, e)
		}
		b.WriteString("]")
	case map[string]any:
		showMap(b, x)
	case tensorWant:
		fmt.Fprintf(b, "%s%v%x", x.dtype, x.shape, x.data)
	case codec.Tensor:
		fmt.Fprintf(b, "%s%v%x", x.DType, x.Shape, x.Data)
	default:
		fmt.Fprintf(b, "%T(%v)", v, v)
	}
}

func showMap(b *strings.Builder, m map[string]any) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b.WriteString("{")
	for i, k := range keys {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(k + ":")
		showTo(b, m[k])
	}
	b.WriteString("}")
}

func showFloat(f float64, bits int) string {
	if f == 0 && math.Signbit(f) {
		return "-0"
	}
	return strconv.FormatFloat(f, 'g', -1, bits)
}

// showIn prints a value as a caller passed it (its own Go types).
func showIn(v any) string {
	switch x := v.(type) {
	case nil:
		return "nil"
	case float64:
		return "float64(" + showFloat(x, 64) + ")"
	case float32:
		return "float32(" + showFloat(float64(x), 32) + ")"
	case string:
		return strconv.Quote(x)
	case []float32:
		parts := make([]string, len(x))
		for i, f := range x {
			parts[i] = showFloat(float64(f), 32)
		}
		return "[]float32{" + strings.Join(parts, ",") + "}"
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = showIn(e)
		}
		return "[]any{" + strings.Join(parts, ",") + "}"
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + ":" + showIn(x[k])
		}
		return "map{" + strings.Join(parts, ",") + "}"
	}
	return fmt.Sprintf("%T(%v)", v, v)
}
