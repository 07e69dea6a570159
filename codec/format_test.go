package codec

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

// headerCases are tensor lists whose headers cover every msgp encoding the
// header can take: fixarray, array16 and array32 counts; fixint, int8 …
// int64 dimensions; every dtype name.
func headerCases() [][]Tensor {
	var cases [][]Tensor
	cases = append(cases, nil)
	for _, dt := range DTypes() {
		cases = append(cases, []Tensor{{DType: dt, Shape: []int64{2, 3}}})
	}
	for _, shape := range [][]int64{
		nil, {}, {0}, {127}, {128}, {255}, {256}, {32767}, {32768}, {65535}, {65536},
		{math.MaxInt32}, {math.MaxInt32 + 1}, {math.MaxUint32}, {math.MaxInt64}, {-1}, {-33}, {-129}, {math.MinInt64},
		make([]int64, 15), make([]int64, 16), make([]int64, 70000),
	} {
		cases = append(cases, []Tensor{{DType: Float32, Shape: shape}})
	}
	many := make([]Tensor, 16)
	for i := range many {
		many[i] = Tensor{DType: DTypes()[i%len(DTypes())], Shape: []int64{int64(i), int64(i * 1000)}}
	}
	cases = append(cases, many, make([]Tensor, 70000))
	for i := range cases[len(cases)-1] {
		cases[len(cases)-1][i] = Tensor{DType: Uint8, Shape: []int64{1}}
	}
	return cases
}

func metasOf(ts []Tensor) []tensorMeta {
	var ms []tensorMeta
	for _, t := range ts {
		ms = append(ms, tensorMeta{DType: t.DType.String(), Shape: t.Shape})
	}
	return ms
}

// TestHeaderMatchesMsgp: the hand-written header writer produces exactly the
// bytes of the msgp-generated MarshalMsg, and the hand-written reader reads
// what the generated UnmarshalMsg reads.
func TestHeaderMatchesMsgp(t *testing.T) {
	for i, ts := range headerCases() {
		h := header{Version: formatVersion, Tensors: metasOf(ts)}
		want, err := h.MarshalMsg(nil)
		if err != nil {
			t.Fatal(err)
		}
		got := appendHeader([]byte{0xee}, ts)
		if !bytes.Equal(got[1:], want) {
			t.Fatalf("case %d: appendHeader\n got % x\nwant % x", i, got[1:min(len(got), 64)], want[:min(len(want), 64)])
		}
		var d decoder
		if tooBig := len(ts) > MaxTensors || slices.ContainsFunc(ts, func(x Tensor) bool { return len(x.Shape) > maxDims }); tooBig {
			// Both readers refuse more than the limits.
			var back header
			if _, err := back.UnmarshalMsg(want); err == nil {
				t.Fatalf("case %d: UnmarshalMsg read past its limits", i)
			}
			if _, err := d.readHeader(want, len(ts)); err == nil {
				t.Fatalf("case %d: readHeader read past its limits", i)
			}
			continue
		}
		rest, err := d.readHeader(append(want, 0xc0), len(ts))
		if err != nil {
			t.Fatalf("case %d: readHeader: %v", i, err)
		}
		var back header
		if _, err := back.UnmarshalMsg(want); err != nil {
			t.Fatalf("case %d: UnmarshalMsg: %v", i, err)
		}
		if !bytes.Equal(rest, []byte{0xc0}) || len(d.tensors) != len(back.Tensors) {
			t.Fatalf("case %d: readHeader read %d tensors, rest % x", i, len(d.tensors), rest)
		}
		at := 0
		for j, m := range back.Tensors {
			if d.tensors[j].DType.String() != m.DType || !slices.Equal(d.dims[at:at+d.ndims[j]], m.Shape) {
				t.Fatalf("case %d tensor %d: read %s%v, msgp read %s%v", i, j, d.tensors[j].DType, d.dims[at:at+d.ndims[j]], m.DType, m.Shape)
			}
			at += d.ndims[j]
		}
	}
}

// TestSingleTensorFastPath: a bare tensor's payload 0 is the general path's
// header followed by the general path's body.
func TestSingleTensorFastPath(t *testing.T) {
	for i, ts := range headerCases() {
		if len(ts) != 1 {
			continue
		}
		x := ts[0]
		n, err := NumElements(x.Shape)
		if err != nil || n > 1<<20 || len(x.Shape) > maxDims {
			continue
		}
		x.Data = make([]byte, n*x.DType.ItemSize())
		var be bodyEncoder
		body, err := be.appendValue(nil, x, 0)
		if err != nil {
			t.Fatal(err)
		}
		h := header{Version: formatVersion, Tensors: metasOf(ts)}
		want, _ := h.MarshalMsg(nil)
		want = append(want, body...)
		if got := appendSingleHeader(nil, &x); !bytes.Equal(got, want) {
			t.Fatalf("case %d: fast path\n got % x\nwant % x", i, got[:min(len(got), 64)], want[:min(len(want), 64)])
		}
	}
	// And through Encode: a tensor packs as the general path packs it.
	x := mustFromSlice(t, []int16{1, 2, 3, 4, 5, 6}, 3, 2)
	fast := mustEncode(t, x)
	var e encoder
	e.be.tensors = nil
	body, _ := e.be.appendValue(nil, x, 0)
	head := append(appendHeader(nil, e.be.tensors), body...)
	if slow := craft(head, x.Data); !bytes.Equal(fast, slow) {
		t.Fatalf("fast % x\nslow % x", fast, slow)
	}
}

// formatExamples are the values FORMAT.md shows byte by byte.
func formatExamples(t *testing.T) map[string]any {
	x := mustFromSlice(t, []float32{1.5, -2, 0.25})
	y := mustFromSlice(t, []uint8{7, 8, 9, 10}, 2, 2)
	return map[string]any{
		"tensor": x,
		"nested": map[string]any{"step": uint64(3), "t": y, "ok": []any{true, int64(-1)}},
	}
}

// TestFormatDocExamples keeps FORMAT.md honest: its hex dumps are what
// Encode produces, and they decode back to the examples.
func TestFormatDocExamples(t *testing.T) {
	doc := readFile(t, "FORMAT.md")
	for name, v := range formatExamples(t) {
		buf := mustEncode(t, v)
		begin := fmt.Sprintf("<!-- hex:%s -->\n```\n", name)
		i := strings.Index(doc, begin)
		if i < 0 {
			t.Fatalf("FORMAT.md has no %q block; it should read:\n%s", name, hexDump(buf))
		}
		rest := doc[i+len(begin):]
		j := strings.Index(rest, "```")
		if j < 0 {
			t.Fatalf("FORMAT.md: unterminated %q block", name)
		}
		if got, want := rest[:j], hexDump(buf); got != want {
			t.Fatalf("FORMAT.md %q example is stale; Encode gives:\n%s", name, want)
		}
		if got, err := Decode(buf); err != nil || !equal(normalize(v), got) {
			t.Fatalf("%s example: decode gave %v, %v", name, got, err)
		}
	}
}

// TestFormatRules checks the layout rules FORMAT.md states on encoded
// buffers of many shapes: table, contiguous payload 0, 16-byte-aligned
// tensor payloads, zero padding, nothing after the last payload.
func TestFormatRules(t *testing.T) {
	vals := append(batchValues(t), []any{Scalar(int8(1)), Tensor{DType: Float64, Shape: []int64{0}}, Scalar(2.0)})
	for i, v := range vals {
		buf := mustEncode(t, v)
		count := int(binary.LittleEndian.Uint32(buf))
		if off := int(binary.LittleEndian.Uint32(buf[4:])); off != 4+8*count {
			t.Fatalf("value %d: payload 0 at %d, want right after the table", i, off)
		}
		end := 0
		for p := range count {
			off := int(binary.LittleEndian.Uint32(buf[4+8*p:]))
			size := int(binary.LittleEndian.Uint32(buf[8+8*p:]))
			if p > 0 {
				if off%tensorAlign != 0 || off != align(end) {
					t.Fatalf("value %d payload %d at %d after %d", i, p, off, end)
				}
				if !bytes.Equal(buf[end:off], make([]byte, off-end)) {
					t.Fatalf("value %d: padding before payload %d not zero", i, p)
				}
			}
			end = off + size
		}
		if end != len(buf) {
			t.Fatalf("value %d: last payload ends at %d of %d", i, end, len(buf))
		}
	}
}
