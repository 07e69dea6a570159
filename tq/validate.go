package tq

import (
	"hash/maphash"
	"net/url"

	"github.com/tqgo/tqgo/backends/metadata"
)

// The bounds of partition and field names: see metadata.ValidName.
const (
	maxNameLen  = metadata.MaxPartitionName
	maxFieldLen = metadata.MaxFieldName
)

func parseURL(raw string) (*url.URL, error) { return url.Parse(raw) }

func checkPartition(p string) error {
	if !metadata.ValidName(p, maxNameLen) {
		return invalidf("partition name %q (want 1-%d bytes of [A-Za-z0-9_.:/-])", p, maxNameLen)
	}
	return nil
}

func checkField(f string) error {
	if !metadata.ValidName(f, maxFieldLen) {
		return invalidf("field name %q (want 1-%d bytes of [A-Za-z0-9_.:/-])", f, maxFieldLen)
	}
	return nil
}

// checkKeys: keys are non-empty and unique within one call.
func checkKeys(partition string, keys []string) error {
	// An open-addressing set of key positions (plus one; 0 is free) at most
	// half full: a batch of keys costs one allocation and a hash each, a few
	// times less than a map[string]struct{}.
	size := 1
	for size < 2*len(keys) {
		size <<= 1
	}
	set := make([]int, size)
	mask := uint64(size - 1)
	for i, k := range keys {
		if k == "" {
			return invalidf("partition %q: key %d is empty", partition, i)
		}
		for j := maphash.String(keySeed, k) & mask; ; j = (j + 1) & mask {
			if set[j] == 0 {
				set[j] = i + 1
				break
			}
			if keys[set[j]-1] == k {
				return invalidf("partition %q: key %q appears twice (a call names each key once)", partition, k)
			}
		}
	}
	return nil
}

var keySeed = maphash.MakeSeed()

// Bounds of a task's options and claims, the same on every engine (a
// shared engine's log record holds them as 32-bit numbers; the bounds keep
// well within that and within what a claim allocates). Beyond them, the
// option or the claim fails with ErrInvalid.
const (
	// MaxClaim is the most rows one Claim or Wait may ask for (its n).
	MaxClaim = metadata.MaxClaimRows
	// MaxGroupSize is the largest group of WithGroups (a group must fit
	// a claim).
	MaxGroupSize = MaxClaim
	// MaxRanks is the most ranks of Ranks.
	MaxRanks = metadata.MaxRanks
	// MaxDeliveryLimit is the largest n of MaxDeliveries.
	MaxDeliveryLimit = metadata.MaxDeliveryLimit
)
