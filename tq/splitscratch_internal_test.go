package tq

import (
	"runtime"
	"testing"
)

// A huge stacked read's scratch is not pooled: otherwise it would stay for
// as long as reads keep taking it between collections, every later small
// read holding it.
func TestSplitScratchPoolDropsHugeScratch(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops Puts at random under -race")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1)) // one P: the pool's per-P slots do not hide it
	big := testPlan(1 << 20)
	big.allocate()
	big.release()
	for round := range 20 {
		runtime.GC() // a collection between two reads of a steady reader
		small := testPlan(4)
		small.allocate()
		if round == 19 && cap(small.scratch.cells) >= 1<<20 {
			t.Errorf("after %d collections, a 4-row read holds the 1Mi-row read's scratch (%d destinations, %d MiB of heads)",
				round+1, cap(small.scratch.cells), cap(small.scratch.heads)>>20)
		}
		small.release()
	}
}

// A read of usual size takes the scratch the last one released, cleared
// of the last read's columns.
func TestSplitScratchPoolReusesScratch(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops Puts at random under -race")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	first := testPlan(1024)
	first.allocate()
	sc := first.scratch
	first.release()
	for i, d := range sc.cells[:cap(sc.cells)] {
		if d.Body != nil || d.Head != nil {
			t.Fatalf("released destination %d still points at %p", i, d.Body)
		}
	}
	second := testPlan(512)
	second.allocate()
	if second.scratch != sc {
		t.Error("a read after a release of the same size allocated new scratch")
	}
	second.release()
}

// testPlan is a read of one stacked field of n rows.
func testPlan(n int) *readPlan {
	return &readPlan{plans: []stackPlan{{prefix: make([]byte, 40), size: 8}}, n: n, skeys: make([]string, n), tags: make([]string, n)}
}
