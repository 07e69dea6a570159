//go:build unix

package codec

import (
	"errors"
	"syscall"
	"testing"
	"unsafe"
)

// reserve maps n bytes of address space that can never be read or written
// (PROT_NONE, not backed by memory). A slice over it is honest about its
// length, and any attempt to copy from it would crash the test: so a test
// that passes proves the codec rejected the value before touching a byte.
func reserve(t *testing.T, n int) []byte {
	t.Helper()
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_NONE, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
	if err != nil {
		t.Skipf("cannot reserve %d bytes of address space: %v", n, err)
	}
	t.Cleanup(func() { syscall.Munmap(b) })
	return b
}

func TestPayloadOver4GiB(t *testing.T) {
	if unsafe.Sizeof(0) < 8 {
		t.Skip("needs a 64-bit address space")
	}
	const four = 1 << 32 // one byte more than a payload may hold
	mem := reserve(t, four+(1<<31))
	half := mem[:3<<30]                // 3 GiB: fits alone
	other := mem[1<<31 : four+(1<<31)] // 4 GiB
	cases := []struct {
		name string
		v    any
	}{
		{"tensor of 4 GiB", Tensor{DType: Uint8, Shape: []int64{four}, Data: mem[:four]}},
		{"*tensor of 4 GiB", &Tensor{DType: Uint16, Shape: []int64{2, four / 4}, Data: mem[:four]}},
		{"tensor of 4 GiB in a list", []any{1, Tensor{DType: Float32, Shape: []int64{four / 4}, Data: mem[:four]}}},
		{"two tensors of 3 GiB", []any{Tensor{DType: Uint8, Shape: []int64{3 << 30}, Data: half}, Tensor{DType: Uint8, Shape: []int64{3 << 30}, Data: half}}},
		{"[]byte of 4 GiB", map[string]any{"b": other}},
		{"string of 4 GiB", unsafe.String(&mem[0], four)},
		{"packed object over 4 GiB", Tensor{DType: Uint8, Shape: []int64{four - 1}, Data: mem[:four-1]}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := Encode(c.v); !errors.Is(err, ErrTooLarge) {
				t.Fatalf("Encode: %v", err)
			}
			called := false
			p := NewPacker(Options{})
			defer p.Close()
			_, err := p.BatchEncodeInto([]any{"ok", c.v}, func(s []int) ([][]byte, error) { called = true; return nil, nil })
			var oe *ObjectError
			if !errors.As(err, &oe) || oe.Index != 1 || !errors.Is(err, ErrTooLarge) || called {
				t.Fatalf("BatchEncodeInto: %v (alloc called: %v)", err, called)
			}
		})
	}
	// A payload of exactly 4 GiB - 1 passes validation (the packed object,
	// with its table, is then one too many for the offsets).
	x := Tensor{DType: Uint8, Shape: []int64{four - 1}, Data: mem[:four-1]}
	if err := x.Validate(); err != nil {
		t.Fatalf("4 GiB - 1: %v", err)
	}
	if err := (Tensor{DType: Uint8, Shape: []int64{four}, Data: mem[:four]}).Validate(); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("4 GiB: %v", err)
	}
}
