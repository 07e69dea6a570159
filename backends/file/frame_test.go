package file

import (
	"bytes"
	"fmt"
	"testing"
	"unsafe"

	"github.com/tqgo/tqgo/backends"
)

// The cells a builder keeps as it lays them in the frame are the ones a
// decode of the frame finds (the same keys and values, lying at the same
// places in the frame), for frames of their own and reused ones, empty
// keys and values, heads and bodies; a frame sized wrong is decoded.
func TestBuiltCells(t *testing.T) {
	var pool framePool
	for _, n := range []int{0, 1, 3, 2000} {
		for _, size := range []int{0, 1, 200, 40 << 10} {
			cells := make([]backends.Cell, n)
			for i := range cells {
				cells[i] = backends.Cell{Key: fmt.Sprintf("k%d", i), Body: bytes.Repeat([]byte{byte(i)}, size)}
				switch i % 4 {
				case 1:
					cells[i].Key = ""
				case 2:
					cells[i].Head, cells[i].Body = cells[i].Body[:size/2], cells[i].Body[size/2:]
				}
			}
			recs := []backends.Record{{ID: 3, Indexes: 2, Data: []byte("rec")}}
			for _, wrong := range []int{0, -1, 1} {
				name := fmt.Sprintf("%d cells of %d, sized %+d", n, size, wrong)
				b := pool.builder(kindCells, cellsLen(cells)+appendLen("p", recs)+wrong)
				b.cells(cells)
				b.appendBody("p", recs)
				if _, err := b.seal(); err != nil {
					t.Fatal(err)
				}
				var got, want op
				if err := b.decode(&got); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if err := want.decodeBody(b.b[frameHeader], b.b[frameHeader+1:]); err != nil {
					t.Fatal(err)
				}
				if got.kind != want.kind || got.part != want.part || len(got.recs) != 1 || !bytes.Equal(got.recs[0].data, want.recs[0].data) {
					t.Fatalf("%s: decoded %c %q %v, want %c %q %v", name, got.kind, got.part, got.recs, want.kind, want.part, want.recs)
				}
				if len(got.cells) != len(want.cells) {
					t.Fatalf("%s: %d cells, want %d", name, len(got.cells), len(want.cells))
				}
				for i, c := range got.cells {
					w := want.cells[i]
					if c.key != w.key || unsafe.StringData(c.key) != unsafe.StringData(w.key) {
						t.Fatalf("%s: cell %d: key %q at %p, decoded %q at %p", name, i, c.key, unsafe.StringData(c.key), w.key, unsafe.StringData(w.key))
					}
					if c.val == nil || len(c.val) != len(w.val) || cap(c.val) != cap(w.val) || (len(c.val) > 0 && &c.val[0] != &w.val[0]) {
						t.Fatalf("%s: cell %d: value of %d (cap %d), decoded %d (cap %d), or elsewhere", name, i, len(c.val), cap(c.val), len(w.val), cap(w.val))
					}
				}
				pool.release(b.fb)
			}
		}
	}
}
