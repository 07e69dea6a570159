package tq

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tqgo/tqgo/backends/metadata"
)

// TestSplitRanks: shares are disjoint and cover the units, keep each unit
// whole, differ in weight by no more than the heaviest unit (largest
// differencing's bound: a merge never widens the spread past its inputs'),
// and do not depend on the order the units come in.
func TestSplitRanks(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		ranks := 1 + trial%4
		nUnits := rng.IntN(40)
		var rows []*metadata.Row
		var units [][]int
		maxW := 0.0
		for u := range nUnits {
			size := 1 + rng.IntN(3)
			var unit []int
			w := 0.0
			for range size {
				n := int64(1 + rng.IntN(500))
				w += float64(n)
				unit = append(unit, len(rows))
				rows = append(rows, &metadata.Row{Key: "k", Index: uint64(1000 + len(rows)), Tag: map[string]any{"len": n, "u": int64(u)}})
			}
			maxW = max(maxW, w)
			units = append(units, unit)
		}
		shares := splitRanks(rows, units, ranks, "len")
		if len(shares) != ranks {
			t.Fatalf("%d shares for %d ranks", len(shares), ranks)
		}
		owner := map[int]int{}
		var lo, hi float64
		for r, s := range shares {
			w := 0.0
			for _, p := range s {
				if _, dup := owner[p]; dup {
					t.Fatalf("trial %d: row %d in two shares", trial, p)
				}
				owner[p] = r
				w += tagFloat(rows[p], "len")
			}
			if r == 0 || w < lo {
				lo = w
			}
			if r == 0 || w > hi {
				hi = w
			}
		}
		if len(owner) != len(rows) {
			t.Fatalf("trial %d: shares cover %d rows of %d", trial, len(owner), len(rows))
		}
		for _, u := range units {
			for _, p := range u {
				if owner[p] != owner[u[0]] {
					t.Fatalf("trial %d: a unit split across ranks", trial)
				}
			}
		}
		if hi-lo > maxW {
			t.Fatalf("trial %d: %d ranks weigh %v..%v, apart by more than the heaviest unit %v", trial, ranks, lo, hi, maxW)
		}
		// The same units in another order give the same shares.
		shuffled := slices.Clone(units)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		again := splitRanks(rows, shuffled, ranks, "len")
		for r := range shares {
			if !slices.Equal(shares[r], again[r]) {
				t.Fatalf("trial %d: rank %d's share depends on the units' order: %v, then %v", trial, r, shares[r], again[r])
			}
		}
	}
}

func tagFloat(r *metadata.Row, key string) float64 {
	v, _ := tagNumber(r.Tag[key])
	return v
}
