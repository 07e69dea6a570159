package main

import (
	"math"
	"testing"

	"github.com/tqgo/tqgo/codec"
)

// TestTensorHeadSmallFloats checks the decoding of the dtypes Go has no
// type for against known bit patterns.
func TestTensorHeadSmallFloats(t *testing.T) {
	for _, tc := range []struct {
		dt   codec.DType
		data []byte // little-endian elements
		want []float64
	}{
		{codec.Float16, []byte{0x00, 0x3c, 0xff, 0x7b, 0x01, 0x00, 0x00, 0xc0, 0x00, 0x7c}, []float64{1, 65504, math.Ldexp(1, -24), -2, math.Inf(1)}},
		{codec.BFloat16, []byte{0x80, 0x3f, 0x40, 0xc0}, []float64{1, -3}},
		{codec.Float8E4M3FN, []byte{0x38, 0x7e, 0x01, 0xb8}, []float64{1, 448, math.Ldexp(1, -9), -1}},
		{codec.Float8E4M3FNUZ, []byte{0x40, 0x00}, []float64{1, 0}},
		{codec.Float8E5M2, []byte{0x3c, 0x7b, 0xfc}, []float64{1, 57344, math.Inf(-1)}},
		{codec.Float8E5M2FNUZ, []byte{0x40}, []float64{1}},
		{codec.Float8E8M0FNU, []byte{127, 130, 0}, []float64{1, 8, math.Ldexp(1, -127)}},
	} {
		n := len(tc.data) / tc.dt.ItemSize()
		got, total := tensorHead(codec.Tensor{DType: tc.dt, Shape: []int64{int64(n)}, Data: tc.data}, 8)
		if total != n || len(got) != n {
			t.Fatalf("%s: %d of %d elements, want %d", tc.dt, len(got), total, n)
		}
		for i, w := range tc.want {
			if got[i] != w {
				t.Errorf("%s element %d = %v, want %v", tc.dt, i, got[i], w)
			}
		}
	}
	for _, tc := range []struct {
		dt codec.DType
		b  byte
	}{{codec.Float8E4M3FN, 0x7f}, {codec.Float8E4M3FNUZ, 0x80}, {codec.Float8E5M2, 0x7e}, {codec.Float8E5M2FNUZ, 0x80}, {codec.Float8E8M0FNU, 0xff}} {
		if f := float8(tc.dt, tc.b); !math.IsNaN(f) {
			t.Errorf("%s %#x = %v, want NaN", tc.dt, tc.b, f)
		}
	}
}

func TestFormatValue(t *testing.T) {
	v := map[string]any{"b": []any{"x", int64(2), nil}, "a": 1.5, "c": []byte("hi")}
	if got, want := formatValue(v), `{"a": 1.5, "b": ["x" 2 nil], "c": []byte("hi")}`; got != want {
		t.Errorf("formatValue = %s, want %s", got, want)
	}
	safe := jsonSafe([]any{math.NaN(), math.Inf(1), 2.0}).([]any)
	if safe[0] != "NaN" || safe[1] != "+Inf" || safe[2] != 2.0 {
		t.Errorf("jsonSafe = %v", safe)
	}
}
