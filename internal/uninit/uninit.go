// Package uninit allocates byte slices that the caller overwrites in full
// before anything reads them, without zeroing them first.
package uninit

import (
	"strings"
	"unsafe"
)

// MinSize is the size from which Bytes skips the zeroing; below it Bytes
// is make, whose zeroing costs little next to the rest of a buffer's use.
const MinSize = 64 << 10

// lead is the string the builder holds; the returned bytes lie past it.
// Its length keeps them aligned for any element type: an allocation over
// 32 KiB (MinSize must stay above that) starts on a page.
const lead = "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" +
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" +
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" +
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"

// Bytes returns a slice of n bytes (capacity n) whose contents are
// unspecified: the caller must write every byte before anything reads it.
//
// Go zeroes every make([]byte, n). For a column that the network or a copy
// is about to fill, that is a second pass over the memory: 5 ms of a 22 ms
// read of 64 MiB on this project's 2-core machines, a quarter of the
// client's CPU. strings.Builder.Grow is the one public allocator that does
// not zero. The bytes returned lie past the end of the builder's string,
// so no string's bytes are ever written, and in the same allocation, which
// the returned slice keeps alive.
func Bytes(n int) []byte {
	if n < MinSize {
		return make([]byte, n)
	}
	var b strings.Builder
	b.Grow(len(lead) + n)
	b.WriteString(lead)
	base := unsafe.Pointer(unsafe.StringData(b.String()))
	return unsafe.Slice((*byte)(unsafe.Add(base, len(lead))), n)
}
