package codec

//go:generate go tool msgp -io=false -tests=false -unexported -o header_gen.go

// The header limits bound what a hostile buffer can make the decoder
// allocate before the payload table is cross-checked.
//msgp:limit arrays:65536 maps:65536

//msgp:tuple header tensorMeta

// header is the msgp document at the start of payload 0. It describes the
// tensor payloads; the value's body follows it in the same payload.
//
// This type is the schema. The hot paths write and read it by hand
// (appendHeader, decoder.readHeader in pack.go) to skip Msgsize and
// allocations and to bound allocations by the bytes present;
// TestHeaderMatchesMsgp holds them to the generated code byte for byte.
type header struct {
	// Version of the layout; decoders reject versions they do not know.
	Version uint8
	// Tensors describes payloads 1..n in order.
	Tensors []tensorMeta
}

// tensorMeta describes one tensor payload.
type tensorMeta struct {
	DType string // torch's dtype name
	Shape []int64
}

// formatVersion is the header Version this package writes and reads.
const formatVersion = 1

// MaxTensors is the most tensors one object may hold.
const MaxTensors = 65535
