package redis

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tinylib/msgp/msgp"

	"github.com/tqgo/tqgo/backends"
)

// Every normalised tag type comes back from a record with its Go type and
// value, at the boundaries of each msgpack form.
func TestTagRoundTrip(t *testing.T) {
	values := map[string]any{
		"nil": nil, "true": true, "false": false,
		"u0": uint64(0), "u5": uint64(5), "u127": uint64(127), "u128": uint64(128), "u255": uint64(255),
		"u256": uint64(256), "u65535": uint64(65535), "u65536": uint64(65536),
		"u32max": uint64(math.MaxUint32), "u32over": uint64(math.MaxUint32 + 1), "umax": uint64(math.MaxUint64),
		"i0": int64(0), "i5": int64(5), "i127": int64(127), "i128": int64(128), "im1": int64(-1),
		"im32": int64(-32), "im33": int64(-33), "im128": int64(-128), "im129": int64(-129),
		"i32767": int64(32767), "i32768": int64(32768), "i31max": int64(math.MaxInt32), "i31over": int64(math.MaxInt32 + 1),
		"imin": int64(math.MinInt64), "imax": int64(math.MaxInt64),
		"fwhole": float64(2), "ftenth": 0.1, "fneg0": math.Copysign(0, -1), "finf": math.Inf(-1), "ftiny": 5e-324,
		"s": "", "s31": strings.Repeat("a", 31), "s32": strings.Repeat("b", 32), "s256": strings.Repeat("c", 256),
		"s65536": strings.Repeat("d", 65536), "unicode": "héllo, 世界",
		"bin0": []byte{}, "bin1": []byte{0}, "bin300": bytes.Repeat([]byte{7}, 300),
		"list0": []any{}, "list": []any{uint64(1), int64(1), 1.0, "1", []byte("1"), nil, true},
		"list16": make([]any, 16),
		"nested": []any{map[string]any{"a": []any{uint64(3), map[string]any{}}}, []any{[]any{int64(-3)}}},
		"map0":   map[string]any{},
		"map":    map[string]any{"u": uint64(2), "i": int64(2), "b": []byte{2}, "m": map[string]any{"x": 0.5}},
	}
	for _, tag := range []map[string]any{nil, {}, values} {
		rec, err := appendTag([]byte{0xff}, tag)
		if err != nil {
			t.Fatal(err)
		}
		rec = append(rec, 0xc3, 0x01) // what follows the tag in a record
		if rec[0] != 0xff {
			t.Fatal("appendTag changed the bytes before it")
		}
		got, rest, err := decodeTag(rec[1:])
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(rest, []byte{0xc3, 0x01}) {
			t.Fatalf("rest %x, want c301", rest)
		}
		if (got == nil) != (tag == nil) {
			t.Fatalf("got %#v for %#v", got, tag)
		}
		for k, want := range tag {
			if g := got[k]; !reflect.DeepEqual(g, want) || reflect.TypeOf(g) != reflect.TypeOf(want) {
				t.Errorf("%s: got %T %#v, want %T %#v", k, g, g, want, want)
			}
		}
		if len(got) != len(tag) {
			t.Errorf("got %d keys, want %d", len(got), len(tag))
		}
	}
	// -0 stays negative: DeepEqual does not tell it from +0.
	if got, _, _ := decodeTag(must(appendTag(nil, map[string]any{"z": math.Copysign(0, -1)}))); !math.Signbit(got["z"].(float64)) {
		t.Error("-0 came back as +0")
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// The bytes are exactly those appendTag's doc states, whatever the order
// of the Go map.
func TestTagEncoding(t *testing.T) {
	cases := []struct {
		name string
		tag  map[string]any
		hex  string
	}{
		{"nil tag", nil, "c0"},
		{"empty tag", map[string]any{}, "80"},
		{"keys sorted", map[string]any{"b": int64(1), "a": true, "ab": false, "B": nil}, "84" + "a142c0" + "a161c3" + "a26162c2" + "a16201"},
		{"uint64 under 128 is uint8", map[string]any{"u": uint64(5)}, "81a175cc05"},
		{"uint64 zero", map[string]any{"u": uint64(0)}, "81a175cc00"},
		{"uint16", map[string]any{"u": uint64(300)}, "81a175cd012c"},
		{"uint32", map[string]any{"u": uint64(70000)}, "81a175ce00011170"},
		{"uint64", map[string]any{"u": uint64(1 << 40)}, "81a175cf0000010000000000"},
		{"int64 fixint", map[string]any{"i": int64(5)}, "81a16905"},
		{"int64 negative fixint", map[string]any{"i": int64(-32)}, "81a169e0"},
		{"int8", map[string]any{"i": int64(-33)}, "81a169d0df"},
		{"int64 over 127 is int16", map[string]any{"i": int64(200)}, "81a169d100c8"},
		{"int32", map[string]any{"i": int64(1 << 20)}, "81a169d200100000"},
		{"int64", map[string]any{"i": int64(-1 << 40)}, "81a169d3ffffff0000000000"},
		{"float64", map[string]any{"f": 1.0}, "81a166cb3ff0000000000000"},
		{"string", map[string]any{"s": "hi"}, "81a173a26869"},
		{"str8", map[string]any{"s": strings.Repeat("x", 32)}, "81a173d920" + strings.Repeat("78", 32)},
		{"bytes", map[string]any{"b": []byte{1, 2}}, "81a162c4020102"},
		{"empty bytes", map[string]any{"b": []byte{}}, "81a162c400"},
		{"list", map[string]any{"l": []any{int64(1), "a"}}, "81a16c9201a161"},
		{"nested map sorted", map[string]any{"m": map[string]any{"y": nil, "x": uint64(1)}}, "81a16d82a178cc01a179c0"},
	}
	for _, c := range cases {
		for range 10 { // map order varies: the bytes must not
			b, err := appendTag(nil, c.tag)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if got := hex.EncodeToString(b); got != c.hex {
				t.Fatalf("%s: got %s, want %s", c.name, got, c.hex)
			}
		}
	}
}

// Values tq does not store (it normalises tags first) are refused with
// ErrInvalid naming the tag key, and so is nesting past tagDepthLimit.
func TestTagRejectsUnnormalised(t *testing.T) {
	deep := any(int64(1))
	for range tagDepthLimit {
		deep = []any{deep}
	}
	for _, v := range []any{1, int32(1), uint8(1), float32(1), new(int64), time.Now(), complex(1, 2),
		[]string{"a"}, map[string]string{}, map[string]any{"x": []int{1}}, []any{struct{}{}}, deep} {
		_, err := appendTag(nil, map[string]any{"ok": "x", "bad": v})
		if !errors.Is(err, backends.ErrInvalid) || !strings.Contains(err.Error(), `"bad"`) {
			t.Errorf("%T: got %v, want ErrInvalid naming \"bad\"", v, err)
		}
	}
	shallow := any(int64(1))
	for range tagDepthLimit - 1 {
		shallow = []any{shallow}
	}
	if _, err := appendTag(nil, map[string]any{"v": shallow}); err != nil {
		t.Errorf("%d levels of lists: %v", tagDepthLimit-1, err)
	}
}

// decodeTag reads msgpack appendTag does not write: float32 as float64,
// small uints written as fixints (as signed: nothing tells them apart), and
// extension values as msgp gives them; nesting past the limit is an error.
func TestDecodeTagOtherMsgpack(t *testing.T) {
	when := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	b := msgp.AppendMapHeader(nil, 4)
	b = msgp.AppendString(b, "f32")
	b = msgp.AppendFloat32(b, 0.5)
	b = msgp.AppendString(b, "fix")
	b = msgp.AppendUint64(b, 3)
	b = msgp.AppendString(b, "time")
	b = msgp.AppendTime(b, when)
	b = msgp.AppendString(b, "big")
	b = msgp.AppendUint64(b, 1000)
	got, rest, err := decodeTag(b)
	if err != nil || len(rest) != 0 {
		t.Fatal(err, rest)
	}
	if tm, ok := got["time"].(time.Time); !ok || !tm.Equal(when) {
		t.Fatalf("time: got %#v, want %v", got["time"], when)
	}
	delete(got, "time") // msgp gives it in the local zone
	want := map[string]any{"f32": 0.5, "fix": int64(3), "big": uint64(1000)}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v, want %#v", got, want)
	}

	deep := msgp.AppendMapHeader(nil, 1)
	deep = msgp.AppendString(deep, "d")
	for range tagDepthLimit + 1 {
		deep = msgp.AppendArrayHeader(deep, 1)
	}
	deep = msgp.AppendNil(deep)
	if _, _, err := decodeTag(deep); err == nil {
		t.Fatal("decoded lists nested past the limit")
	}
	for _, bad := range [][]byte{{0x81, 0xa1, 'k'}, {0x81, 0x01, 0xc0}, {0x81, 0xa1, 'k', 0x91}, {0x92, 0xc0, 0xc0}} {
		if _, _, err := decodeTag(bad); err == nil {
			t.Errorf("decoded %x", bad)
		}
	}
}
