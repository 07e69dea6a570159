package rules

import (
	"maps"
	"slices"

	"github.com/tqgo/tqgo/backends/metadata"
)

// Release returns the records that end every claim held in the partition:
// for each task (by name), a K unwait per registered claim's token (so
// that none can lease the rows released next to its gone holder), a K
// end-batch per open batch (so that the next process's ranks open a new
// batch together, rather than one rank taking a dead batch's share while
// another leases its rows afresh), then a
// K nack (no delay) per lease token of the rows still leased to it, then
// a K unwait per served claim's token (its rows, nacked already, are not
// handed back: its holder may have received them). A log whose every
// writer is known to be gone (an embedded engine reopened under its
// directory's lock) appends them, so that the rows of a dead consumer are
// ready at once, not when its leases run out; each row keeps its
// deliveries (a nack), so the next claim counts one more, and a row at
// its max deliveries is dead.
func (p *Partition) Release() [][]byte {
	var out [][]byte
	unwait := func(name string, tokens []string) {
		slices.Sort(tokens)
		for _, token := range slices.Compact(tokens) {
			out = append(out, SettleRecord(&SettleArgs{Task: name, Op: metadata.Unwait, Lease: token}))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(p.tasks)) {
		t := p.tasks[name]
		var waits []string
		for _, s := range t.standing {
			waits = append(waits, s.a.Token)
		}
		unwait(name, waits)
		for _, b := range t.batches {
			out = append(out, SettleRecord(&SettleArgs{Task: name, Op: metadata.EndBatch, Lease: b.lease}))
		}
		leased := map[string][]uint64{}
		for i, e := range t.entries {
			if e.state == metadata.Leased {
				leased[e.lease] = append(leased[e.lease], i)
			}
		}
		for _, token := range slices.Sorted(maps.Keys(leased)) {
			idx := leased[token]
			slices.Sort(idx)
			out = append(out, SettleRecord(&SettleArgs{Task: name, Op: metadata.Nack, Lease: token, Indexes: idx}))
		}
		unwait(name, slices.Collect(maps.Keys(t.served)))
	}
	return out
}

// Unheld returns the records that cancel the standing claims (registered
// by claims that leased nothing, see ClaimArgs.Hold) whose token held
// reports false: a K unwait each. Claims already fulfilled are left (a
// served claim's lease may be in its caller's hands); one fulfilled
// between this state and where its unwait lands is handed back by it. A
// writer that
// takes a partition over from one that died appends them, for the
// claims that writer held for callers whose Waits ended with it, so
// that no row is leased to a claim nobody waits on.
func (p *Partition) Unheld(held func(token string) bool) [][]byte {
	var out [][]byte
	for _, name := range slices.Sorted(maps.Keys(p.tasks)) {
		var tokens []string
		for _, s := range p.tasks[name].standing {
			if s.until > p.now && !held(s.a.Token) {
				tokens = append(tokens, s.a.Token)
			}
		}
		slices.Sort(tokens)
		for _, token := range slices.Compact(tokens) {
			out = append(out, SettleRecord(&SettleArgs{Task: name, Op: metadata.Unwait, Lease: token}))
		}
	}
	return out
}
