package redis

import (
	"slices"
	"testing"
)

// TestRoundSizes: rounds hold roundKeys keys or maxBytes bytes; read
// rounds carry at least minReadRoundKeys values up to maxRoundGrowth
// times maxBytes; a value larger than that goes alone.
func TestRoundSizes(t *testing.T) {
	s := &Store{opts: defaultOptions()}
	const mib = 1 << 20
	sizes := func(rounds []span) []int {
		var out []int
		for _, r := range rounds {
			out = append(out, r.hi-r.lo)
		}
		return out
	}
	for _, c := range []struct {
		name          string
		n, size, minK int
		want          []int
	}{
		{"1024 x 512 B", 1024, 512, minReadRoundKeys, []int{1024}},
		{"1024 x 8 KiB", 1024, 8 << 10, minReadRoundKeys, slices.Repeat([]int{128}, 8)},
		{"8 x 1 MiB read", 8, mib, minReadRoundKeys, []int{4, 4}},
		{"8 x 1 MiB written", 8, mib, 1, slices.Repeat([]int{1}, 8)},
		{"5 x 2 MiB read", 5, 2 * mib, minReadRoundKeys, []int{2, 2, 1}},
		{"2 x 8 MiB read", 2, 8 * mib, minReadRoundKeys, []int{1, 1}},
		{"2000 x 16 B", 2000, 16, 1, []int{1024, 976}},
	} {
		got := sizes(s.rounds(c.n, mib, c.minK, func(int) int { return c.size }))
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: rounds of %v keys, want %v", c.name, got, c.want)
		}
	}
}
