package tqprom

import (
	"context"
	"errors"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/tq"
)

// The classes of a call's outcome, the values of the class label. The set
// is fixed: an error matching none of the sentinels below is "other".
const (
	classOK             = "ok"
	classOutcomeUnknown = "outcome_unknown"
	classClosed         = "closed"
	classCanceled       = "canceled"
	classLeaseLost      = "lease_lost"
	classConflict       = "conflict"
	classNotFound       = "not_found"
	classNotReady       = "not_ready"
	classInvalid        = "invalid"
	classUnavailable    = "unavailable"
	classOther          = "other"
)

// classes lists the classes in the order ErrorClass tries them: an error
// matching several sentinels (a write whose outcome is unknown because the
// server went away, say) takes the first.
var classes = []struct {
	name    string
	targets []error
}{
	{classOutcomeUnknown, []error{tq.ErrOutcomeUnknown}},
	{classClosed, []error{tq.ErrClosed, backends.ErrClosed}},
	{classCanceled, []error{context.Canceled, context.DeadlineExceeded}},
	{classLeaseLost, []error{tq.ErrLeaseLost}},
	{classConflict, []error{tq.ErrConflict}},
	{classNotFound, []error{tq.ErrNotFound}},
	{classNotReady, []error{tq.ErrNotReady}},
	{classInvalid, []error{tq.ErrInvalid, backends.ErrInvalid}},
	{classUnavailable, unavailable},
}

// ErrorClass is the class label a call that returned err is counted under:
//
//	ok               err is nil
//	outcome_unknown  tq.ErrOutcomeUnknown: a write that may or may not have applied
//	closed           tq.ErrClosed (or backends.ErrClosed): the client or engine was closed
//	canceled         context.Canceled or context.DeadlineExceeded: the caller's context ended
//	                 (a Wait that timed out waiting for rows is counted here)
//	lease_lost       tq.ErrLeaseLost
//	conflict         tq.ErrConflict
//	not_found        tq.ErrNotFound
//	not_ready        tq.ErrNotReady
//	invalid          tq.ErrInvalid (or backends.ErrInvalid): a malformed call
//	unavailable      tq.ErrUnavailable: the engine's server could not be reached, or was not
//	                 serving, for longer than the client's RetryPolicy allows
//	other            anything else
//
// The first that matches, in this order, wins: a write whose outcome is
// unknown because the server went away is outcome_unknown, not
// unavailable.
func ErrorClass(err error) string {
	if err == nil {
		return classOK
	}
	for _, c := range classes {
		for _, target := range c.targets {
			if errors.Is(err, target) {
				return c.name
			}
		}
	}
	return classOther
}
