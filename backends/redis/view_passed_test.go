package redis

import "testing"

// fences returns n fence records with distinct ids.
func fences(n int, tag byte) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = string(recFence) + string([]byte{'0', '0', '0', '0', '0', '0', '0', '0', '0', '0', '0', '0', '0', tag, '0' + byte(i/10), '0' + byte(i%10)})
	}
	return out
}

// TestCatchUpPassedReply: a reply the view has moved past since it was
// asked for (another goroutine's write or read came first) changes
// nothing, and the view stays where it is, rows and all; a reply of a
// log shorter than the view was when it asked, or one whose head the view
// never had at that length, resets it to be read again.
func TestCatchUpPassedReply(t *testing.T) {
	log := fences(5, 'a')
	at := func(n int) *view {
		v := newView()
		if _, err := v.catchUp(v.era, 0, "e", 0, headOf("", log[:3]), log[:3]); err != nil {
			t.Fatal(err)
		}
		for i := 3; i < n; i++ { // one at a time, as a client's own writes
			if _, err := v.catchUp(v.era, int64(i), "e", int64(i), headOf(v.head, log[i:i+1]), log[i:i+1]); err != nil {
				t.Fatal(err)
			}
		}
		return v
	}
	for _, tc := range []struct {
		name       string
		asked      int64    // the view's length when it asked
		from       int64    // the reply's
		recs       []string // the reply's records from from on
		head       string   // the reply's head
		wantPassed bool     // the view keeps its place
	}{
		{"asked at 3, the log then at 4", 3, 3, log[3:4], headOf("", log[:4]), true},
		{"asked at 3, nothing new then", 3, 3, nil, headOf("", log[:3]), true},
		{"asked at 0, the log then at 4", 0, 0, log[:4], headOf("", log[:4]), true},
		{"asked at 5, the log shorter", 5, 0, log[:4], headOf("", log[:4]), false},
		{"asked at 3, another log at 4", 3, 3, fences(1, 'b'), headOf(headOf("", log[:3]), fences(1, 'b')), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := at(5)
			era, head := v.era, v.head
			moved, err := v.catchUp(era, tc.asked, "e", tc.from, tc.head, tc.recs)
			if err != nil {
				t.Fatal(err)
			}
			passed := !moved && v.era == era && v.n == 5 && v.head == head && v.epoch == "e"
			if passed != tc.wantPassed {
				t.Fatalf("after the reply: moved %v, era %d (was %d), n %d, epoch %q; want the view kept: %v", moved, v.era, era, v.n, v.epoch, tc.wantPassed)
			}
			if !tc.wantPassed && (!moved || v.epoch != badEpoch) {
				t.Fatalf("moved %v, epoch %q: want the view reset to be read again", moved, v.epoch)
			}
		})
	}
}
