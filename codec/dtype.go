package codec

import "fmt"

// DType names a tensor element type. Names follow torch (the wire carries the
// name), so a tensor written by a Python worker reads here unchanged.
type DType uint8

// The dtypes. The zero DType is invalid, so an unset field is caught.
const (
	Bool DType = iota + 1
	Uint8
	Int8
	Int16
	Int32
	Int64
	Uint16
	Uint32
	Uint64
	Float16
	BFloat16
	Float32
	Float64
	Complex64
	Complex128
	Float8E4M3FN
	Float8E4M3FNUZ
	Float8E5M2
	Float8E5M2FNUZ
	Float8E8M0FNU
	numDTypes
)

type dtypeInfo struct {
	name     string
	itemsize int
}

var dtypeTable = [numDTypes]dtypeInfo{
	Bool:           {"bool", 1},
	Uint8:          {"uint8", 1},
	Int8:           {"int8", 1},
	Int16:          {"int16", 2},
	Int32:          {"int32", 4},
	Int64:          {"int64", 8},
	Uint16:         {"uint16", 2},
	Uint32:         {"uint32", 4},
	Uint64:         {"uint64", 8},
	Float16:        {"float16", 2},
	BFloat16:       {"bfloat16", 2},
	Float32:        {"float32", 4},
	Float64:        {"float64", 8},
	Complex64:      {"complex64", 8},
	Complex128:     {"complex128", 16},
	Float8E4M3FN:   {"float8_e4m3fn", 1},
	Float8E4M3FNUZ: {"float8_e4m3fnuz", 1},
	Float8E5M2:     {"float8_e5m2", 1},
	Float8E5M2FNUZ: {"float8_e5m2fnuz", 1},
	Float8E8M0FNU:  {"float8_e8m0fnu", 1},
}

var dtypeByName = func() map[string]DType {
	m := make(map[string]DType, numDTypes)
	for d := Bool; d < numDTypes; d++ {
		m[dtypeTable[d].name] = d
	}
	return m
}()

// lookupDType finds a dtype by its wire name. A scan of the table beats a
// map lookup here: nearly every name differs from the others in length.
func lookupDType(name []byte) (DType, bool) {
	for d := Bool; d < numDTypes; d++ {
		if string(name) == dtypeTable[d].name {
			return d, true
		}
	}
	return 0, false
}

// DTypes lists every supported dtype, in declaration order.
func DTypes() []DType {
	out := make([]DType, 0, numDTypes-1)
	for d := Bool; d < numDTypes; d++ {
		out = append(out, d)
	}
	return out
}

// Valid reports whether d is one of the declared dtypes.
func (d DType) Valid() bool { return d >= Bool && d < numDTypes }

// String returns torch's name for d.
func (d DType) String() string {
	if !d.Valid() {
		return fmt.Sprintf("DType(%d)", uint8(d))
	}
	return dtypeTable[d].name
}

// ItemSize is the size of one element in bytes, or 0 for an invalid dtype.
func (d DType) ItemSize() int {
	if !d.Valid() {
		return 0
	}
	return dtypeTable[d].itemsize
}

// ParseDType returns the dtype with torch's name s ("float32", "bfloat16" …).
// A leading "torch." is accepted. Unknown names give ErrUnknownDType.
func ParseDType(s string) (DType, error) {
	if len(s) > 6 && s[:6] == "torch." {
		s = s[6:]
	}
	if d, ok := dtypeByName[s]; ok {
		return d, nil
	}
	return 0, fmt.Errorf("%w: %q", ErrUnknownDType, s)
}
