package codec

import (
	"errors"
	"testing"
)

// badBools are bool tensors holding a byte other than 0 or 1, at every
// place the word-at-a-time scan treats differently: in a full word, in the
// tail after the words, and in the only byte of a scalar.
func badBools() map[string]Tensor {
	word := make([]byte, 16)
	word[5] = 2
	tail := make([]byte, 11)
	tail[10] = 0x80
	return map[string]Tensor{
		"in a word":   {DType: Bool, Shape: []int64{16}, Data: word},
		"in the tail": {DType: Bool, Shape: []int64{11}, Data: tail},
		"scalar":      {DType: Bool, Shape: []int64{}, Data: []byte{0xff}},
	}
}

// The encoder rejects a bool tensor with a byte other than 0 or 1,
// whether bare, nested in a value, or in a batch (before allocating).
func TestEncodeRejectsInvalidBools(t *testing.T) {
	for name, bad := range badBools() {
		t.Run(name, func(t *testing.T) {
			if err := bad.ValidateBools(); !errors.Is(err, ErrInvalidBool) {
				t.Fatalf("ValidateBools: %v, want ErrInvalidBool", err)
			}
			for _, v := range []any{bad, &bad, map[string]any{"m": []any{bad}}} {
				if _, err := Encode(v); !errors.Is(err, ErrInvalidBool) {
					t.Fatalf("Encode(%T): %v, want ErrInvalidBool", v, err)
				}
			}
			allocated := false
			_, err := BatchEncodeInto([]any{Scalar(true), bad}, func(sizes []int) ([][]byte, error) {
				allocated = true
				return HeapAllocator(sizes)
			}, Options{})
			var oe *ObjectError
			if !errors.As(err, &oe) || oe.Index != 1 || !errors.Is(err, ErrInvalidBool) || allocated {
				t.Fatalf("BatchEncodeInto: %v (allocated %v), want ErrInvalidBool for object 1 before allocating", err, allocated)
			}
		})
	}
	good := mustFromSlice(t, []bool{true, false, true, true, false, false, true, false, true})
	if err := good.ValidateBools(); err != nil {
		t.Fatal(err)
	}
	if _, err := Encode(good); err != nil {
		t.Fatal(err)
	}
}

// A packed bool tensor whose bytes were changed to another value is
// corrupt on every decoding path, also after a valid cell of the same
// header (the batch decoders skip parsing a header seen just before).
func TestDecodeRejectsInvalidBools(t *testing.T) {
	for name, bad := range badBools() {
		t.Run(name, func(t *testing.T) {
			valid := Tensor{DType: Bool, Shape: bad.Shape, Data: make([]byte, len(bad.Data))}
			good := mustEncode(t, valid)
			buf := mustEncode(t, valid)
			copy(buf[len(buf)-len(bad.Data):], bad.Data) // the tensor's bytes end the buffer
			if _, err := Decode(good); err != nil {
				t.Fatal(err)
			}
			if _, err := Decode(buf); !errors.Is(err, ErrCorrupt) || !errors.Is(err, ErrInvalidBool) {
				t.Fatalf("Decode: %v, want ErrCorrupt and ErrInvalidBool", err)
			}
			nested := mustEncode(t, []any{valid})
			copy(nested[len(nested)-len(bad.Data):], bad.Data)
			if _, err := Decode(nested); !errors.Is(err, ErrInvalidBool) {
				t.Fatalf("Decode of a nested tensor: %v, want ErrInvalidBool", err)
			}
			for _, bufs := range [][][]byte{{buf}, {good, buf}} {
				if _, ok := BatchDecodeTensors(bufs); ok {
					t.Fatalf("BatchDecodeTensors took the invalid cell of %d", len(bufs))
				}
				if _, ok := BatchDecodeStack(bufs); ok {
					t.Fatalf("BatchDecodeStack took the invalid cell of %d", len(bufs))
				}
			}
			bufs := [][]byte{good, buf}
			var oe *ObjectError
			if _, err := BatchDecodeFrom(bufs); !errors.As(err, &oe) || oe.Index != 1 || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("BatchDecodeFrom: %v, want ErrCorrupt for object 1", err)
			}
		})
	}
}
