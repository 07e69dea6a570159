package rules

import (
	"math"

	"github.com/google/btree"

	"github.com/tqgo/tqgo/backends/metadata"
)

// Oldest returns the lowest number (metadata.TagNumber) in tag among the
// committed rows that some of tasks has still to consume (not
// acknowledged, dropped or dead, as of now or the partition's clock if
// later), +Inf with none: metadata.View.Summary's Summary.Oldest, which a
// paced producer looks at after every change. The first call for a tag
// indexes the rows by that number, and commits and deletes keep the index
// after: a call costs the rows below its answer (consumed by every task
// but not deleted yet), not the partition's.
func (p *Partition) Oldest(now int64, tag string, tasks []string) float64 {
	now = max(now, p.now)
	idx := p.byNumber[tag]
	if idx == nil {
		idx = btree.NewG(32, lessVer)
		for _, r := range p.byIndex {
			if r.view != nil {
				if v, ok := metadata.TagNumber(r.view.Tag[tag]); ok {
					idx.ReplaceOrInsert(verKey{v, r.index})
				}
			}
		}
		if p.byNumber == nil {
			p.byNumber = map[string]*btree.BTreeG[verKey]{}
		}
		p.byNumber[tag] = idx
	}
	ts := make([]*task, len(tasks))
	for i, name := range tasks {
		ts[i] = p.tasks[name]
	}
	oldest := math.Inf(1)
	idx.Ascend(func(k verKey) bool {
		for _, t := range ts {
			if t == nil {
				oldest = k.v
				return false
			}
			e := t.entries[k.i]
			if e == nil {
				oldest = k.v
				return false
			}
			switch e.seen(now).state {
			case metadata.Acked, metadata.Dropped, metadata.Dead:
			default:
				oldest = k.v
				return false
			}
		}
		return true
	})
	return oldest
}

func lessVer(a, b verKey) bool {
	if a.v != b.v {
		return a.v < b.v
	}
	return a.i < b.i
}

// numbered keeps the indexes of Oldest in step with a row committed anew
// (old nil), updated, or deleted (next nil).
func (p *Partition) numbered(old, next *metadata.Row) {
	for tag, idx := range p.byNumber {
		if old != nil {
			if v, ok := metadata.TagNumber(old.Tag[tag]); ok {
				idx.Delete(verKey{v, old.Index})
			}
		}
		if next != nil {
			if v, ok := metadata.TagNumber(next.Tag[tag]); ok {
				idx.ReplaceOrInsert(verKey{v, next.Index})
			}
		}
	}
}
