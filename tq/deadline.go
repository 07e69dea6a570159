package tq

import (
	"context"
	"fmt"
	"time"

	"github.com/tqgo/tqgo/backends/metadata"
)

// GroupWait is a group waiting for missing members (see TaskStatus.Groups):
// its ready rows past its whole groups of the task's group size, its
// remainder.
//
// It is metadata.GroupWait, a struct with these fields:
//
//	ID      string    // the group's id: its GroupTag value after a letter for its kind ("sp0" for the
//	                  // string "p0", "i7" for the integer 7), or "k" and its GroupKeyPrefix
//	Rows    int       // ready rows of its remainder (fewer than the group size)
//	Since   time.Time // when the remainder's oldest ready row became ready
//	Overdue bool      // set once the group has waited its GroupDeadline
type GroupWait = metadata.GroupWait

type groupDeadline struct {
	d       time.Duration
	partial bool
}

// GroupDeadline bounds how long a group of a WithGroups task waits
// incomplete, counted by the engine's clock from when its oldest ready
// row became ready (the last commit that gave the row a field: a prompt
// written early and answered late counts from its answer), so that one
// slow rollout does not wedge the step. A group holding more ready rows
// than a whole group (3 of a group of 2) is leased in whole groups, and
// its rows past them (the last by index) wait as an incomplete group of
// their own. Past the deadline the group is overdue, and:
//
//   - with partial, claims lease it as it is, fewer rows than the group
//     size, after the complete groups a claim has room for, and flag its rows in Lease.Partial
//     so the trainer can weight them; a Wait wakes when a group falls due;
//   - without, it keeps waiting and Task.Stragglers lists it, so that its
//     producer writes the missing members (under the keys it would have
//     used, a second producer doing the same rewrites them: no duplicate).
//
// The rule is the engine's: every consumer of the task sees a group
// overdue at the same moment. The engine learns a task's groups from its
// claims: Status and Stragglers list groups once a claim of the task
// (with this option) has run since the partition last held nothing (a
// partition left with no rows and no Wait registered is forgotten, its
// tasks' groups with it: at once on memory://, within seconds on a
// shared engine). With Ranks, every rank's share flags the partial
// groups it holds. A d below a millisecond fails with ErrInvalid.
func GroupDeadline(d time.Duration, partial bool) TaskOption {
	return func(t *Task) error {
		if d < time.Millisecond {
			return fmt.Errorf("%w: group deadline %v, shorter than 1ms", ErrInvalid, d)
		}
		t.deadline = &groupDeadline{d: d, partial: partial}
		return nil
	}
}

// Stragglers lists the task's groups past its GroupDeadline that are
// still incomplete, oldest first: the members a producer should write
// again. A task without a GroupDeadline has none.
func (t *Task) Stragglers(ctx context.Context) ([]GroupWait, error) {
	ts, err := t.summary(ctx, "Stragglers", false)
	if err != nil {
		return nil, err
	}
	var out []GroupWait
	for _, g := range ts.Groups {
		if g.Overdue {
			out = append(out, g)
		}
	}
	return out, nil
}

// partialRows flags each row of got (by position) that is in a unit got
// flags partial; nil when none is.
func partialRows(got metadata.Claimed) []bool {
	var out []bool
	for k, u := range got.Units {
		if k >= len(got.Partial) || !got.Partial[k] {
			continue
		}
		if out == nil {
			out = make([]bool, len(got.Rows))
		}
		for _, p := range u {
			out[p] = true
		}
	}
	return out
}
