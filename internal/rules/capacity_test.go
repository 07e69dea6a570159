package rules

import (
	"errors"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
)

func fieldsOf(r metadata.Reservation) map[string]metadata.FieldInfo {
	f := map[string]metadata.FieldInfo{}
	for name, g := range r.Gens {
		f[name] = metadata.FieldInfo{Gen: g}
	}
	return f
}

func refsOf(index uint64, r metadata.Reservation) []metadata.Ref {
	var out []metadata.Ref
	for name, g := range r.Gens {
		out = append(out, metadata.Ref{Index: index, Field: name, Gen: g})
	}
	return out
}

// A row a tag-only put prepared and never committed holds room until an
// abort past its age lets it go; the change wakes blocked puts.
func TestCapacityTagOnlyHoldReleased(t *testing.T) {
	p := New()
	p.SetCapacity(1, metadata.Capacity{Rows: 1})
	if _, err := p.Prepare(2, []string{"k"}, nil, nil, 0, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Prepare(3, []string{"other"}, nil, nil, 1, 1); !errors.Is(err, backends.ErrFull) {
		t.Fatalf("second row past a bound of 1: %v", err)
	}
	seq := p.Seq()
	p.Abort(100_000_000, 99_000_000)
	if _, u := p.Capacity(); u.Rows != 0 || p.Seq() == seq {
		t.Fatalf("after the abort: %d rows held, seq %d -> %d", u.Rows, seq, p.Seq())
	}
}

// The bytes never count less than the partition may hold: a write given
// up keeps counting (an upper bound) and a write committed after a newer
// one was given up counts its own size.
func TestCapacityBytesNeverUnder(t *testing.T) {
	p := New()
	k, a := []string{"k"}, []string{"a"}
	res, _ := p.Prepare(1, k, a, []int64{100}, 0, 1)
	if _, err := p.Commit(1, []metadata.RowUpdate{{Key: "k", Index: res[0].Index, Fields: fieldsOf(res[0])}}); err != nil {
		t.Fatal(err)
	}
	r3, _ := p.Prepare(4, k, a, []int64{9000}, 0, 0)
	r4, _ := p.Prepare(5, k, a, []int64{1}, 0, 0)
	p.Abandon(6, refsOf(res[0].Index, r4[0]))
	if _, err := p.Commit(7, []metadata.RowUpdate{{Key: "k", Index: res[0].Index, Fields: fieldsOf(r3[0])}}); err != nil {
		t.Fatal(err)
	}
	if _, u := p.Capacity(); u.Bytes < 9000 {
		t.Fatalf("a 9000-byte cell committed counts %d bytes", u.Bytes)
	}
	// A smaller rewrite, committed, counts its own size.
	r5, _ := p.Prepare(8, k, a, []int64{10}, 0, 0)
	if _, err := p.Commit(9, []metadata.RowUpdate{{Key: "k", Index: res[0].Index, Fields: fieldsOf(r5[0])}}); err != nil {
		t.Fatal(err)
	}
	if _, u := p.Capacity(); u.Bytes != 10 {
		t.Fatalf("after a 10-byte rewrite: %d bytes", u.Bytes)
	}
}

// An overdue partial group does not keep complete groups from a claim
// that needs them to reach its minimum; a mark wakes at the next group
// falling due, past one already overdue.
func TestGroupDeadlinePartialAfterComplete(t *testing.T) {
	p := New()
	var next uint64
	put := func(now int64, key, uid string) {
		res := prepare(t, p, &next, now, []string{key}, []string{"a"})
		if _, err := p.Commit(now, []metadata.RowUpdate{{Key: key, Index: res[0].Index, Fields: fieldsOf(res[0]), Tag: map[string]any{"uid": uid}}}); err != nil {
			t.Fatal(err)
		}
	}
	sel := Select{Fields: []string{"a"}, Group: Group{Tag: "uid", Size: 4, Deadline: time.Second, Partial: true}}
	for i, k := range []string{"a0", "a1", "a2"} {
		put(int64(i+1), k, "a")
	}
	for i, k := range []string{"b0", "b1", "b2", "b3"} {
		put(int64(10+i), k, "b")
	}
	c := p.Claim(3_000_000, &ClaimArgs{Task: "t", Token: "x", Lease: time.Minute, Rows: 4, Min: 4, Select: sel})
	if len(c.Rows) != 4 || c.Rows[0].Key != "b0" || c.Partial[0] {
		t.Fatalf("claim of 4 with an overdue group of 3: %d rows %v", len(c.Rows), c.Partial)
	}
	// Group c falls due at 4.5 s, behind the overdue group a.
	put(3_500_000, "c0", "c")
	c = p.Claim(3_600_000, &ClaimArgs{Task: "t", Token: "y", Lease: time.Minute, Rows: 4, Min: 4, Select: sel})
	if len(c.Rows) != 0 || c.Mark.Wake.UnixMicro() != 4_500_000 {
		t.Fatalf("claim needing 4 with groups of 3 and 1: %d rows, wake %d, want none and 4.5 s", len(c.Rows), c.Mark.Wake.UnixMicro())
	}
}
