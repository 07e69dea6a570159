package metadata_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
)

// A claim or settle past the bounds every engine can hold (a shared
// engine's record: 32-bit counts, microseconds) is refused by Check, so
// that no engine takes what another would call a corrupt record.
func TestCheckBounds(t *testing.T) {
	ok := func() metadata.ClaimRequest {
		return metadata.ClaimRequest{Task: "w", Lease: time.Minute, Rows: 4, Min: 1}
	}
	good := ok()
	good.Rows, good.Batch = metadata.MaxClaimRows, &metadata.Batch{Ranks: metadata.MaxRanks, Rank: metadata.MaxRanks - 1}
	good.MaxDeliveries = metadata.MaxDeliveryLimit
	good.Holder = "w0"
	good.Token = metadata.NewLease("w0")
	if err := good.Check(); err != nil {
		t.Fatalf("a claim at the bounds: %v", err)
	}
	for name, change := range map[string]func(*metadata.ClaimRequest){
		"rows past MaxClaimRows": func(r *metadata.ClaimRequest) { r.Rows = metadata.MaxClaimRows + 1 },
		"rows 2^31":              func(r *metadata.ClaimRequest) { r.Rows = math.MaxInt },
		"ranks past MaxRanks":    func(r *metadata.ClaimRequest) { r.Batch = &metadata.Batch{Ranks: metadata.MaxRanks + 1} },
		"ranks 2^31-1":           func(r *metadata.ClaimRequest) { r.Batch = &metadata.Batch{Ranks: 1<<31 - 1} },
		"group past the rows": func(r *metadata.ClaimRequest) {
			r.Select.Group = metadata.Group{Tag: "uid", Size: math.MaxInt}
		},
		"max deliveries past the limit": func(r *metadata.ClaimRequest) { r.MaxDeliveries = math.MaxInt },
		"token of another holder":       func(r *metadata.ClaimRequest) { r.Holder, r.Token = "a", metadata.NewLease("b") },
		"token without its digits":      func(r *metadata.ClaimRequest) { r.Token = "|" },
		"token of 15 digits":            func(r *metadata.ClaimRequest) { r.Token = "|800000000000000" },
		"token of upper-case digits":    func(r *metadata.ClaimRequest) { r.Token = "|8ABCDEF000000000" },
		"token whose first digit is 7":  func(r *metadata.ClaimRequest) { r.Token = "|7000000000000000" },
		"lease under a microsecond":     func(r *metadata.ClaimRequest) { r.Lease = 500 * time.Nanosecond },
		"group deadline under a microsecond": func(r *metadata.ClaimRequest) {
			r.Select.Group = metadata.Group{Tag: "uid", Size: 2, Deadline: 500 * time.Nanosecond}
		},
	} {
		r := ok()
		change(&r)
		if err := r.Check(); !errors.Is(err, backends.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	s := metadata.SettleRequest{Task: "w", Op: metadata.Extend, Lease: "x|1", Delay: 500 * time.Nanosecond}
	if err := s.Check(); !errors.Is(err, backends.ErrInvalid) {
		t.Errorf("extend by 500ns: %v, want ErrInvalid", err)
	}
}
