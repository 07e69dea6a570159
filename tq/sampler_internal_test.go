package tq

import (
	"math"
	"testing"

	"github.com/tqgo/tqgo/backends/metadata"
)

// A candidate's tag is a number as the rules read one: int64, uint64 or
// a float64 that is not NaN.
func TestCandidateNumber(t *testing.T) {
	row := &metadata.Row{Tag: map[string]any{"i": int64(-3), "u": uint64(7), "f": 2.5, "nan": math.NaN(), "s": "4"}}
	c := Candidate{row: row}
	for key, want := range map[string]float64{"i": -3, "u": 7, "f": 2.5} {
		if v, ok := c.Number(key); !ok || v != want {
			t.Errorf("Number(%q) = %v, %v; want %v", key, v, ok, want)
		}
	}
	for _, key := range []string{"nan", "s", "absent"} {
		if v, ok := c.Number(key); ok {
			t.Errorf("Number(%q) = %v, a number; want none", key, v)
		}
	}
}
