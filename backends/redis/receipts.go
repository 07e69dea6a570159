package redis

import (
	"strconv"
	"strings"
	"sync"

	"github.com/tqgo/tqgo/backends"
)

// receipts are, for a standalone server, the cell each of the Store's
// data writes wrote last: the writes run their rounds in order on one
// connection (or each round is a receipt of its own), and the server
// replicates in the order it executes, so a server that holds a write's
// receipt holds the whole write. A commit of rows whose cells this Store
// wrote applies only where their receipts are (appendScript checks them):
// after a failover to a replica that missed the cells, the commit is
// refused with ErrCellsMissing instead of committing rows without cells.
//
// A commit drops the receipts it checked, and Delete those of the keys it
// deletes (a failed put's rollback). Receipts no commit takes (cells of
// a Store whose rows another Meta commits) are bounded: past maxReceipts,
// the oldest half is forgotten, which only leaves those cells unchecked.
type receipts struct {
	mu    sync.Mutex
	by    map[uint64]map[string]struct{} // row index -> storage keys
	order []string                       // storage keys, oldest first
}

const maxReceipts = 1 << 14

// add records the storage key of a write's last cell.
func (r *receipts) add(key string) {
	index, ok := keyIndex(key)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.by == nil {
		r.by = map[uint64]map[string]struct{}{}
	}
	if len(r.order) >= maxReceipts {
		old := r.order[:len(r.order)/2]
		r.order = append(r.order[:0:0], r.order[len(r.order)/2:]...)
		r.forgetLocked(old)
	}
	set := r.by[index]
	if set == nil {
		set = map[string]struct{}{}
		r.by[index] = set
	}
	set[key] = struct{}{}
	r.order = append(r.order, key)
}

// forget drops the receipts among keys (storage keys).
func (r *receipts) forget(keys []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forgetLocked(keys)
}

func (r *receipts) forgetLocked(keys []string) {
	if len(r.by) == 0 {
		return
	}
	for _, k := range keys {
		index, ok := keyIndex(k)
		if !ok {
			continue
		}
		if set := r.by[index]; set != nil {
			delete(set, k)
			if len(set) == 0 {
				delete(r.by, index)
			}
		}
	}
}

// of returns the receipts among the cells of updates (storage keys).
func (r *receipts) of(updates []backends.RowUpdate) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.by) == 0 {
		return nil
	}
	var out []string
	for i := range updates {
		u := &updates[i]
		set := r.by[u.Index]
		if set == nil {
			continue
		}
		for f, fi := range u.Fields {
			if k := backends.StorageKey(u.Index, f, fi.Gen); hasKey(set, k) {
				out = append(out, k)
			}
		}
	}
	return out
}

func hasKey(set map[string]struct{}, k string) bool {
	_, ok := set[k]
	return ok
}

// keyIndex is the row index a storage key (see backends.StorageKey)
// starts with.
func keyIndex(key string) (uint64, bool) {
	at := strings.IndexByte(key, '@')
	if at <= 0 {
		return 0, false
	}
	index, err := strconv.ParseUint(key[:at], 10, 64)
	return index, err == nil
}
