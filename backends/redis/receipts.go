package redis

import (
	"strings"
	"sync"
)

// receipts are, on a standalone server, the storage keys of the cell each
// of the Store's data writes wrote last, since the Log's last append
// (LAYOUT.md section 10, "Receipts"): the Log's next append requires them
// all, and is refused with ErrCellsMissing after a failover to a replica
// that missed the cells. An append that ran drops the receipts it
// checked, found or not, so one failover fails one append; Delete drops
// those of the keys it deletes (a failed put's rollback). Past
// maxReceipts (cells no append follows), the oldest half is forgotten,
// which only leaves those cells unchecked.
type receipts struct {
	mu    sync.Mutex
	set   map[string]struct{} // storage keys
	order []string            // storage keys, oldest first (some may be forgotten)
}

const maxReceipts = 1 << 12

// add records the storage key of a write's last cell.
func (r *receipts) add(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.set == nil {
		r.set = map[string]struct{}{}
	}
	if len(r.set) >= maxReceipts {
		for _, k := range r.order[:len(r.order)/2] {
			delete(r.set, k)
		}
		r.order = append(r.order[:0:0], r.order[len(r.order)/2:]...)
	}
	if _, ok := r.set[key]; !ok {
		r.set[key] = struct{}{}
		r.order = append(r.order, key)
	}
}

// forget drops the receipts among keys (storage keys).
func (r *receipts) forget(keys []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.set) == 0 {
		return
	}
	for _, k := range keys {
		delete(r.set, k)
	}
	if len(r.set) == 0 {
		r.order = r.order[:0]
	}
}

// all returns the receipts held now, oldest first.
func (r *receipts) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.set) == 0 {
		return nil
	}
	out := make([]string, 0, len(r.set))
	for _, k := range r.order {
		if _, ok := r.set[k]; ok {
			out = append(out, k)
		}
	}
	return out
}

// isCellsMissing reports whether err is the append script's refusal for
// a missing receipt.
func isCellsMissing(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOCELLS")
}
