package tqserve

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/tqserve/tqpb"
)

// errProtocol is matched by the error of a reply that breaks the protocol
// (a position out of range, a tag of no kind): a server of another
// version, or something that is not a tq server.
var errProtocol = errors.New("tqserve: malformed reply")

// malformed is the error of call op whose reply broke the protocol (err
// says how). A write's matches ErrOutcomeUnknown too: the server may
// have applied it.
func malformed(op string, kind callKind, err error) error {
	if kind == write {
		return fmt.Errorf("tq server: %s: %w: %w: %w", op, errProtocol, err, backends.ErrOutcomeUnknown)
	}
	return fmt.Errorf("tq server: %s: %w: %w", op, errProtocol, err)
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", backends.ErrInvalid, fmt.Sprintf(format, args...))
}

// kinds maps each Failure kind to the errors it matches on the client,
// most specific first (the server classes an error by the first it
// matches).
var kinds = []struct {
	kind tqpb.Failure_Kind
	code codes.Code
	errs []error
}{
	{tqpb.Failure_RESERVATION_LOST, codes.Aborted, []error{backends.ErrReservationLost, backends.ErrConflict}},
	{tqpb.Failure_CONFLICT, codes.Aborted, []error{backends.ErrConflict}},
	{tqpb.Failure_NOT_DURABLE, codes.Unknown, []error{backends.ErrNotDurable, backends.ErrOutcomeUnknown}},
	{tqpb.Failure_OUTCOME_UNKNOWN, codes.Unknown, []error{backends.ErrOutcomeUnknown}},
	{tqpb.Failure_FULL, codes.ResourceExhausted, []error{backends.ErrFull}},
	{tqpb.Failure_CORRUPT, codes.DataLoss, []error{backends.ErrCorrupt}},
	{tqpb.Failure_INVALID, codes.InvalidArgument, []error{backends.ErrInvalid}},
	{tqpb.Failure_UNAVAILABLE, codes.Unavailable, []error{backends.ErrUnavailable}},
	{tqpb.Failure_CLOSED, codes.Unavailable, []error{backends.ErrUnavailable}},
	// Sent to another server more times than a call follows.
	{tqpb.Failure_MOVED, codes.FailedPrecondition, []error{backends.ErrUnavailable}},
}

// failureOf is err as a Failure (of a part of a call that went on).
func failureOf(err error) *tqpb.Failure {
	st, _ := status.FromError(toStatus(err))
	for _, d := range st.Details() {
		if f, ok := d.(*tqpb.Failure); ok {
			return f
		}
	}
	return &tqpb.Failure{Message: err.Error()}
}

// fromFailure is the error a client returns for a Failure of a part of a
// call.
func fromFailure(f *tqpb.Failure) error {
	for _, k := range kinds {
		if k.kind == f.GetKind() {
			return &remoteError{msg: "tq server: " + f.GetMessage(), errs: k.errs}
		}
	}
	return &remoteError{msg: "tq server: " + f.GetMessage()}
}

// toStatus is a call's error as the server sends it: a status whose
// detail is a Failure of the error's kind.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, backends.ErrOutcomeUnknown):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	f := &tqpb.Failure{Message: err.Error()}
	code := codes.Unknown
	var full *metadata.FullError
	var moved *movedError
	if errors.As(err, &moved) {
		f.Kind, f.Owner, code = tqpb.Failure_MOVED, moved.owner, codes.FailedPrecondition
	} else if errors.As(err, &full) {
		f.Kind, code = tqpb.Failure_FULL, codes.ResourceExhausted
		f.Full = &tqpb.Full{Partition: full.Partition, Capacity: toCapacity(full.Capacity),
			Used: toUsage(full.Used), Asked: toUsage(full.Asked), Mark: toMark(full.Mark, 0)}
	} else if errors.Is(err, backends.ErrClosed) && !errors.Is(err, backends.ErrOutcomeUnknown) {
		f.Kind, code = tqpb.Failure_CLOSED, codes.Unavailable
	} else {
		for _, k := range kinds {
			if errors.Is(err, k.errs[0]) {
				f.Kind, code = k.kind, k.code
				break
			}
		}
	}
	st, derr := status.New(code, err.Error()).WithDetails(f)
	if derr != nil {
		return status.Error(code, err.Error())
	}
	return st.Err()
}

// remoteError is a server's error as the client returns it: the server's
// text, matching the errors its kind stands for.
type remoteError struct {
	msg  string
	errs []error
}

func (e *remoteError) Error() string   { return e.msg }
func (e *remoteError) Unwrap() []error { return e.errs }

// callKind says what a failed call may have done: a read changes nothing;
// a write whose request may have reached the server may have applied.
type callKind bool

const (
	read  callKind = false
	write callKind = true
)

// fromStatus is the error a client call returns for err, the error of
// its gRPC call made under ctx, naming the call op.
func fromStatus(ctx context.Context, op string, kind callKind, skew time.Duration, err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("tq server: %s: %w", op, err)
	}
	for _, d := range st.Details() {
		f, ok := d.(*tqpb.Failure)
		if !ok {
			continue
		}
		if f.GetKind() == tqpb.Failure_FULL && f.GetFull() != nil {
			fu := f.GetFull()
			return &metadata.FullError{Partition: fu.GetPartition(), Capacity: fromCapacity(fu.GetCapacity()),
				Used: fromUsage(fu.GetUsed()), Asked: fromUsage(fu.GetAsked()), Mark: fromMark(fu.GetMark(), skew)}
		}
		for _, k := range kinds {
			if k.kind == f.GetKind() {
				return &remoteError{msg: "tq server: " + f.GetMessage(), errs: k.errs}
			}
		}
		return &remoteError{msg: "tq server: " + f.GetMessage()}
	}
	// No Failure: the call failed on its way (the network, the server's
	// gRPC layer), or the caller's context ended. The server ends a call
	// past its deadline on its own copy of it, which may reach the client
	// before its context's timer has run: that is the deadline too.
	cerr := ctx.Err()
	if d, ok := ctx.Deadline(); cerr == nil && ok && (st.Code() == codes.DeadlineExceeded || st.Code() == codes.Canceled) &&
		!time.Now().Before(d.Add(-deadlineSlack)) {
		cerr = context.DeadlineExceeded
	}
	if cerr != nil {
		if kind == write {
			return fmt.Errorf("tq server: %s cut off by its context (%w): %w", op, cerr, backends.ErrOutcomeUnknown)
		}
		return cerr
	}
	msg := st.Message()
	switch st.Code() {
	case codes.Unauthenticated, codes.PermissionDenied:
		return fmt.Errorf("tq server: %s: %s (check the token in the tq:// URL): %w", op, msg, backends.ErrInvalid)
	case codes.ResourceExhausted, codes.InvalidArgument:
		if kind == write && strings.Contains(msg, "trying to send") {
			// The server's reply over its limit (this client's is
			// far above it): the call ran.
			return fmt.Errorf("tq server: %s: %s: %w", op, msg, backends.ErrOutcomeUnknown)
		}
		// A request over the size limit, refused before it was applied.
		return fmt.Errorf("tq server: %s: %s: %w", op, msg, backends.ErrInvalid)
	case codes.Unavailable:
		if kind == read || neverSent(msg) {
			return fmt.Errorf("tq server: %s: %s: %w", op, msg, backends.ErrUnavailable)
		}
		return fmt.Errorf("tq server: %s: %s: %w", op, msg, errors.Join(backends.ErrUnavailable, backends.ErrOutcomeUnknown))
	case codes.Canceled, codes.DeadlineExceeded, codes.Unknown, codes.Internal:
		if kind == write {
			return fmt.Errorf("tq server: %s: %s: %w", op, msg, backends.ErrOutcomeUnknown)
		}
		return fmt.Errorf("tq server: %s: %s: %w", op, msg, backends.ErrUnavailable)
	case codes.Unimplemented:
		// A call the server does not know, refused before it ran.
		return fmt.Errorf("tq server: %s: %s (a server of another version?): %w", op, msg, backends.ErrInvalid)
	}
	// A status no tq server sends without a Failure (something between
	// the client and the server, say): a write may have applied.
	if kind == write {
		return fmt.Errorf("tq server: %s: %w: %w", op, st.Err(), backends.ErrOutcomeUnknown)
	}
	return fmt.Errorf("tq server: %s: %s", op, st.Err())
}

// deadlineSlack is how early before its context's deadline a call ended
// by the server's copy of that deadline counts as ended by it (timers run
// late on a loaded machine).
const deadlineSlack = 10 * time.Millisecond

// decided reports whether a call's error carries a Failure: the server's
// decision, not a failure on the way.
func decided(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	for _, d := range st.Details() {
		if _, ok := d.(*tqpb.Failure); ok {
			return true
		}
	}
	return false
}

// neverSent reports whether a transport failure's text says the request
// never left: no connection could be made (a dial, a handshake or the
// HTTP/2 prefaces failed, or no address was resolved). "connection
// error" alone says nothing of the kind: a call in flight on a connection
// that breaks fails with that text too, after the server may have run it.
func neverSent(msg string) bool {
	for _, s := range []string{"while dialing", "connection refused", "name resolver", "handshake failed", "preface"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
