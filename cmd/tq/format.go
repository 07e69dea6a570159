package main

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/tqgo/tqgo/codec"
)

func strconvQuote(s string) string { return strconv.Quote(s) }

func sortedKeys[M ~map[string]V, V any](m M) []string {
	return slices.Sorted(maps.Keys(m))
}

// shapeText is a shape as "[2 3]" ("[]" for a 0-d tensor).
func shapeText(shape []int) string {
	parts := make([]string, len(shape))
	for i, d := range shape {
		parts[i] = strconv.Itoa(d)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// formatValue prints a general value as Go would write it, compactly:
// strings quoted, lists in brackets, maps with sorted keys.
func formatValue(v any) string {
	switch v := v.(type) {
	case nil:
		return "nil"
	case string:
		return strconv.Quote(v)
	case []byte:
		return fmt.Sprintf("[]byte(%q)", v)
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = formatValue(e)
		}
		return "[" + strings.Join(parts, " ") + "]"
	case map[string]any:
		parts := make([]string, 0, len(v))
		for _, k := range sortedKeys(v) {
			parts = append(parts, strconv.Quote(k)+": "+formatValue(v[k]))
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case codec.Tensor:
		return v.DType.String() + shapeText(intShape(v.Shape))
	}
	return fmt.Sprintf("%v", v)
}

// jsonSafe is v with what encoding/json cannot encode replaced: a
// non-finite float becomes its name ("NaN", "+Inf"), a complex number and
// a tensor their text.
func jsonSafe(v any) any {
	switch v := v.(type) {
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Sprint(v)
		}
	case float32:
		return jsonSafe(float64(v))
	case complex64, complex128:
		return fmt.Sprint(v)
	case codec.Tensor:
		return formatValue(v)
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = jsonSafe(e)
		}
		return out
	case map[string]any:
		return jsonSafeMap(v)
	}
	return v
}

func jsonSafeMap[M ~map[string]any](m M) map[string]any {
	out := make(map[string]any, len(m))
	for k, e := range m {
		out[k] = jsonSafe(e)
	}
	return out
}

func intShape(s []int64) []int {
	out := make([]int, len(s))
	for i, d := range s {
		out[i] = int(d)
	}
	return out
}

// cellOf describes a cell read back: a tensor's dtype, shape, element
// count and first n elements, or a value.
func cellOf(v any, n int) cellJSON {
	t, ok := v.(codec.Tensor)
	if !ok {
		return cellJSON{Kind: "value", Value: jsonSafe(v)}
	}
	head, total := tensorHead(t, n)
	for i := range head {
		head[i] = jsonSafe(head[i])
	}
	return cellJSON{Kind: "tensor", DType: t.DType.String(), Shape: intShape(t.Shape), Elements: &total, Head: head}
}

// cellText is a cell as the dump table's DTYPE, SHAPE and VALUES columns.
func cellText(c cellJSON) string {
	if c.Kind == "value" {
		return "-\t-\t" + formatValue(c.Value)
	}
	parts := make([]string, len(c.Head))
	for i, e := range c.Head {
		parts[i] = fmt.Sprint(e)
	}
	vals := "[" + strings.Join(parts, " ")
	if len(c.Head) < *c.Elements {
		vals += fmt.Sprintf(" …] (%d of %d)", len(c.Head), *c.Elements)
	} else {
		vals += "]"
	}
	return c.DType + "\t" + shapeText(c.Shape) + "\t" + vals
}

// tensorHead returns t's first n elements as Go values (float16,
// bfloat16 and float8 as float64) and its element count.
func tensorHead(t codec.Tensor, n int) ([]any, int) {
	total, err := codec.NumElements(t.Shape)
	if err != nil || t.Validate() != nil {
		return nil, 0
	}
	n = min(n, total)
	switch t.DType {
	case codec.Bool:
		return head[bool](t, n), total
	case codec.Uint8:
		return head[uint8](t, n), total
	case codec.Int8:
		return head[int8](t, n), total
	case codec.Int16:
		return head[int16](t, n), total
	case codec.Int32:
		return head[int32](t, n), total
	case codec.Int64:
		return head[int64](t, n), total
	case codec.Uint16:
		return head[uint16](t, n), total
	case codec.Uint32:
		return head[uint32](t, n), total
	case codec.Uint64:
		return head[uint64](t, n), total
	case codec.Float32:
		return head[float32](t, n), total
	case codec.Float64:
		return head[float64](t, n), total
	case codec.Complex64:
		return head[complex64](t, n), total
	case codec.Complex128:
		return head[complex128](t, n), total
	case codec.Float16, codec.BFloat16:
		raw, err := codec.ViewAs[uint16](t)
		if err != nil {
			return nil, total
		}
		out := make([]any, n)
		for i, h := range raw[:n] {
			if t.DType == codec.BFloat16 {
				out[i] = float64(math.Float32frombits(uint32(h) << 16))
			} else {
				out[i] = minifloat(uint32(h), 5, 10, 15, ieee)
			}
		}
		return out, total
	}
	out := make([]any, n)
	for i, b := range t.Data[:n] {
		out[i] = float8(t.DType, b)
	}
	return out, total
}

func head[T codec.Element](t codec.Tensor, n int) []any {
	v, err := codec.View[T](t)
	if err != nil {
		return nil
	}
	out := make([]any, n)
	for i, e := range v[:n] {
		out[i] = e
	}
	return out
}

// nanRule says which bit patterns of a small float are NaN or infinite.
type nanRule uint8

const (
	ieee nanRule = iota // all-ones exponent: infinity (zero mantissa) or NaN
	fn                  // no infinity; all-ones exponent and mantissa is NaN (e4m3fn)
	fnuz                // no infinity, no negative zero; the negative-zero pattern is NaN
)

// minifloat decodes bits of a float with ebits exponent bits, mbits
// mantissa bits and exponent bias (sign above them).
func minifloat(bits uint32, ebits, mbits uint, bias int, rule nanRule) float64 {
	sign := bits >> (ebits + mbits) & 1
	exp := int(bits >> mbits & (1<<ebits - 1))
	man := bits & (1<<mbits - 1)
	maxExp := 1<<ebits - 1
	switch {
	case rule == fnuz && sign == 1 && exp == 0 && man == 0:
		return math.NaN()
	case rule == ieee && exp == maxExp:
		if man != 0 {
			return math.NaN()
		}
		return math.Inf(1 - 2*int(sign))
	case rule == fn && exp == maxExp && man == 1<<mbits-1:
		return math.NaN()
	}
	var f float64
	if exp == 0 {
		f = math.Ldexp(float64(man), 1-bias-int(mbits))
	} else {
		f = math.Ldexp(float64(man|1<<mbits), exp-bias-int(mbits))
	}
	if sign == 1 {
		f = -f
	}
	return f
}

// float8 decodes one byte of a float8 dtype.
func float8(dt codec.DType, b byte) float64 {
	switch dt {
	case codec.Float8E4M3FN:
		return minifloat(uint32(b), 4, 3, 7, fn)
	case codec.Float8E4M3FNUZ:
		return minifloat(uint32(b), 4, 3, 8, fnuz)
	case codec.Float8E5M2:
		return minifloat(uint32(b), 5, 2, 15, ieee)
	case codec.Float8E5M2FNUZ:
		return minifloat(uint32(b), 5, 2, 16, fnuz)
	case codec.Float8E8M0FNU: // an exponent only: 2^(b-127), 0xff NaN
		if b == 0xff {
			return math.NaN()
		}
		return math.Ldexp(1, int(b)-127)
	}
	return math.NaN()
}
