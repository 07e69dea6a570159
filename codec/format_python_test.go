package codec

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"github.com/tqgo/tqgo/internal/childproc"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// packRaw packs a header and a body (MessagePack, payload 0) and tensor
// payloads as FORMAT.md section 1 lays them out, checking nothing: for
// buffers Encode would not write.
func packRaw(payload0 []byte, tensors ...[]byte) []byte {
	count := 1 + len(tensors)
	end := 4 + 8*count
	buf := binary.LittleEndian.AppendUint32(nil, uint32(count))
	offs := []int{end}
	end += len(payload0)
	for _, t := range tensors {
		offs = append(offs, end)
		end += len(t)
	}
	sizes := []int{len(payload0)}
	for _, t := range tensors {
		sizes = append(sizes, len(t))
	}
	for i := range count {
		buf = binary.LittleEndian.AppendUint32(buf, uint32(offs[i]))
		buf = binary.LittleEndian.AppendUint32(buf, uint32(sizes[i]))
	}
	buf = append(buf, payload0...)
	for _, t := range tensors {
		buf = append(buf, t...)
	}
	return buf
}

// TestFormatPythonReader runs FORMAT.md section 8's reader (with
// python3, when installed) on buffers Decode accepts and on buffers it
// rejects, and finds it agrees with Decode on each: the sketch applies
// the rules it says it applies.
func TestFormatPythonReader(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	doc := readFile(t, "FORMAT.md")
	_, rest, ok := strings.Cut(doc, "```python\n")
	src, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("FORMAT.md has no python block")
	}
	dir := t.TempDir()
	script := src + `
import sys
for arg in sys.argv[1:]:
    try:
        decode(bytes.fromhex(arg))
        print("ok")
    except Corrupt:
        print("corrupt")
`
	path := filepath.Join(dir, "reader.py")
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	uint8Tensor := func(dims ...[]byte) []byte {
		h := []byte{0x92, 0x01, 0x91, 0x92, 0xa5, 'u', 'i', 'n', 't', '8', 0x90 | byte(len(dims))}
		for _, d := range dims {
			h = append(h, d...)
		}
		return append(h, 0xd6, 0x11, 0, 0, 0, 0) // the body: tensor 0
	}
	tensor, err := FromSlice([]float32{1.5, -2, 0.25})
	if err != nil {
		t.Fatal(err)
	}
	huge := binary.BigEndian.AppendUint64([]byte{0xd3}, 1<<62)
	cases := map[string][]byte{
		"an int":                                 mustEncode(t, int64(7)),
		"a tensor":                               mustEncode(t, tensor),
		"an empty tensor of a shape that fits":   packRaw(uint8Tensor([]byte{0}, []byte{0x05}), nil),
		"zero first, the others past 2^63 - 1":   packRaw(uint8Tensor([]byte{0}, huge, []byte{0x04}), nil),
		"zero last, the others past 2^63 - 1":    packRaw(uint8Tensor(huge, []byte{0x04}, []byte{0}), nil),
		"a payload that does not match the size": packRaw(uint8Tensor([]byte{0x02}), []byte{1}),
		"a map, a list, signed and unsigned":     mustEncode(t, map[string]any{"ok": []any{true, int64(-1)}, "step": uint64(3), "s": "x"}),
		"a bool tensor holding 2":                packRaw([]byte{0x92, 0x01, 0x91, 0x92, 0xa4, 'b', 'o', 'o', 'l', 0x91, 0x01, 0xd6, 0x11, 0, 0, 0, 0}, []byte{2}),
		"a tensor never referenced":              packRaw([]byte{0x92, 0x01, 0x91, 0x92, 0xa5, 'u', 'i', 'n', 't', '8', 0x91, 0x01, 0xc0}, []byte{1}),
	}
	var names, args []string
	for name, buf := range cases {
		names = append(names, name)
		args = append(args, hex.EncodeToString(buf))
	}
	cmd := exec.Command(py, append([]string{path}, args...)...)
	childproc.Tie(cmd)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3: %v\n%s", err, out)
	}
	got := strings.Fields(string(out))
	if len(got) != len(names) {
		t.Fatalf("python3 said %q", out)
	}
	for k, name := range names {
		_, err := Decode(cases[name])
		want := "ok"
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%s: %v", name, err)
			}
			want = "corrupt"
		}
		if got[k] != want {
			t.Errorf("%s: the sketch says %s, Decode %v", name, got[k], err)
		}
	}
}
