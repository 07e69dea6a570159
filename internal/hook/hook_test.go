package hook

import (
	"slices"
	"testing"
)

// Hooks set by tests side by side all run, and each restore takes away
// its own alone, in any order.
func TestHooksStack(t *testing.T) {
	var got []string
	rec := func(name string) func(string) {
		return func(p string) { got = append(got, name+":"+p) }
	}
	ra := SetWaiting(rec("a"))
	rb := SetWaiting(rec("b"))
	Waiting("p")
	if want := []string{"a:p", "b:p"}; !slices.Equal(got, want) {
		t.Fatalf("both set: ran %v, want %v", got, want)
	}
	got = nil
	ra() // the first set is taken away first: b stays
	Waiting("q")
	if want := []string{"b:q"}; !slices.Equal(got, want) {
		t.Fatalf("a taken away: ran %v, want %v", got, want)
	}
	got = nil
	rb()
	Waiting("r")
	Served("r")
	if got != nil {
		t.Fatalf("none set: ran %v", got)
	}
	if r := SetServed(nil); r == nil {
		t.Fatal("SetServed(nil) returned no restore")
	} else {
		r()
	}
}
