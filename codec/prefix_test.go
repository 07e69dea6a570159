package codec

import (
	"bytes"
	"errors"
	"testing"
)

// TestTensorPrefix: the prefix is exactly what Encode writes before the
// data, for every dtype and for shapes whose dims take every integer form.
func TestTensorPrefix(t *testing.T) {
	shapes := [][]int64{{}, {0}, {3}, {2, 5}, {1, 200}, {40000, 1}, {3, 0, 2}}
	for _, dt := range DTypes() {
		for _, shape := range shapes {
			prefix, n, err := TensorPrefix(dt, shape)
			if err != nil {
				t.Fatalf("%v %v: %v", dt, shape, err)
			}
			data := make([]byte, n)
			for i := range data {
				data[i] = byte(i)
			}
			if dt == Bool {
				clear(data)
			}
			packed, err := Encode(Tensor{DType: dt, Shape: shape, Data: data})
			if err != nil {
				t.Fatalf("%v %v: Encode: %v", dt, shape, err)
			}
			if len(packed) != len(prefix)+n || !bytes.Equal(packed[:len(prefix)], prefix) {
				t.Fatalf("%v %v: prefix %x (+%d data bytes), Encode wrote %x", dt, shape, prefix, n, packed)
			}
			if len(prefix)%16 != 0 {
				t.Fatalf("%v %v: prefix of %d bytes leaves the data unaligned", dt, shape, len(prefix))
			}
		}
	}
	if _, _, err := TensorPrefix(Float32, []int64{-1}); !errors.Is(err, ErrNegativeDim) {
		t.Errorf("negative dim: %v, want ErrNegativeDim", err)
	}
	if _, _, err := TensorPrefix(DType(200), []int64{1}); !errors.Is(err, ErrUnknownDType) {
		t.Errorf("bad dtype: %v, want ErrUnknownDType", err)
	}
	if _, _, err := TensorPrefix(Float64, []int64{1 << 30}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("8 GiB tensor: %v, want ErrTooLarge", err)
	}
}
