package codec

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"testing"
	"unsafe"

	"go.uber.org/goleak"
)

// preexisting ignores the goroutines running before any test: ants starts
// its package-level default pool at init, and that one is not ours.
var preexisting goleak.Option

// TestMain fails the run if any test leaves a goroutine behind (a Packer's
// pool that Close did not release, say).
func TestMain(m *testing.M) {
	preexisting = goleak.IgnoreCurrent()
	goleak.VerifyTestMain(m, preexisting)
}

// normalize is what decoding v gives back: signed integers as int64,
// unsigned as uint64, *Tensor as Tensor, nil containers as nil.
func normalize(v any) any {
	switch x := v.(type) {
	case int:
		return int64(x)
	case int8:
		return int64(x)
	case int16:
		return int64(x)
	case int32:
		return int64(x)
	case uint:
		return uint64(x)
	case uint8:
		return uint64(x)
	case uint16:
		return uint64(x)
	case uint32:
		return uint64(x)
	case uintptr:
		return uint64(x)
	case *Tensor:
		if x == nil {
			return nil
		}
		return *x
	case []byte:
		if x == nil {
			return nil
		}
		return x
	case []any:
		if x == nil {
			return nil
		}
		out := make([]any, len(x))
		for i, el := range x {
			out[i] = normalize(el)
		}
		return out
	case map[string]any:
		if x == nil {
			return nil
		}
		out := make(map[string]any, len(x))
		for k, el := range x {
			out[k] = normalize(el)
		}
		return out
	default:
		return v
	}
}

// equal compares decoded values exactly: same dynamic types, floats by
// bits (so NaN equals itself), tensors by dtype, shape and bytes (a nil and
// an empty shape or data are the same tensor).
func equal(a, b any) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case float32:
		y, ok := b.(float32)
		return ok && math.Float32bits(x) == math.Float32bits(y)
	case float64:
		y, ok := b.(float64)
		return ok && math.Float64bits(x) == math.Float64bits(y)
	case []byte:
		y, ok := b.([]byte)
		return ok && bytes.Equal(x, y)
	case Tensor:
		y, ok := b.(Tensor)
		return ok && tensorEqual(x, y)
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equal(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, xv := range x {
			yv, ok := y[k]
			if !ok || !equal(xv, yv) {
				return false
			}
		}
		return true
	case bool, int64, uint64, string:
		return a == b
	default:
		panic(fmt.Sprintf("equal: unexpected decoded type %T", a))
	}
}

func tensorEqual(a, b Tensor) bool {
	if a.DType != b.DType || len(a.Shape) != len(b.Shape) || !bytes.Equal(a.Data, b.Data) {
		return false
	}
	for i := range a.Shape {
		if a.Shape[i] != b.Shape[i] {
			return false
		}
	}
	return true
}

// within reports whether inner's bytes lie inside outer's memory.
func within(inner, outer []byte) bool {
	if len(inner) == 0 || len(outer) == 0 {
		return false
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(outer)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(inner)))
	return p >= lo && p+uintptr(len(inner)) <= lo+uintptr(len(outer))
}

// mustFromSlice is FromSlice for tests.
func mustFromSlice[T Element](tb testing.TB, s []T, shape ...int64) Tensor {
	tb.Helper()
	t, err := FromSlice(s, shape...)
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

// mustEncode is Encode for tests.
func mustEncode(tb testing.TB, v any) []byte {
	tb.Helper()
	b, err := Encode(v)
	if err != nil {
		tb.Fatalf("Encode(%#v): %v", v, err)
	}
	return b
}

// hexDump formats b as FORMAT.md shows buffers: 16 bytes a line, each line
// led by its offset in hex.
func hexDump(b []byte) string {
	var sb bytes.Buffer
	for off := 0; off < len(b); off += 16 {
		fmt.Fprintf(&sb, "%04x:", off)
		for _, c := range b[off:min(off+16, len(b))] {
			fmt.Fprintf(&sb, " %02x", c)
		}
		sb.WriteByte('\n')
	}
	return sb.String()
}

func readFile(tb testing.TB, name string) string {
	tb.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// verifyNoLeaks fails t if goroutines other than the test's own remain.
func verifyNoLeaks(t *testing.T) {
	t.Helper()
	goleak.VerifyNone(t, preexisting)
}
