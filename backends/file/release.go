package file

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/internal/rules"
)

// releaseClaims ends the claims of the engine's former lives: the
// directory's lock, just taken, proves every process that held them is
// gone, so its leased rows need not wait for their leases to run out.
// The rules say which records end them (rules.Partition.Release); this
// appends them to each partition's log, as any client would, once the
// writer runs. A partition whose log does not decode is left to the
// rules' readers, which report it.
func (e *engine) releaseClaims() error {
	e.mu.RLock()
	type release struct {
		part string
		from backends.Pos
		recs []backends.Record
	}
	var todo []release
	for _, name := range slices.Sorted(maps.Keys(e.st.logs)) {
		l := e.st.logs[name]
		p := rules.New()
		if l.Snap != nil {
			var err error
			if p, err = rules.Restore(l.Snap); err != nil {
				continue
			}
		}
		for i := range l.Entries {
			en := l.Entries[i]
			p.Replay(&en)
		}
		var recs []backends.Record
		for _, data := range p.Release() {
			recs = append(recs, backends.Record{ID: rand.Uint64() | 1, Data: data})
		}
		if len(recs) > 0 {
			last := l.Last()
			todo = append(todo, release{name, backends.Pos{N: last.N, ID: last.ID}, recs})
		}
	}
	e.mu.RUnlock()
	h := newHandle(e)
	for _, r := range todo {
		b := e.frames.builder(kindAppend, appendLen(r.part, r.recs))
		b.appendBody(r.part, r.recs)
		if err := h.submit(context.Background(), &b, &op{from: r.from}); err != nil {
			return fmt.Errorf("releasing the claims of partition %q: %w", r.part, err)
		}
	}
	return nil
}
