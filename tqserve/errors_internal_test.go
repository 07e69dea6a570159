package tqserve

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tqgo/tqgo/backends"
)

// A transport failure is classed by whether the request may have reached
// the server: a call in flight on a connection that broke (whose text
// says "connection error" too) may have applied; one that found no
// connection (a refused dial, a failed handshake) applied nothing.
func TestTransportFailureClass(t *testing.T) {
	for _, c := range []struct {
		msg        string
		kind       callKind
		outcomeUnk bool
	}{
		{`connection error: desc = "error reading from server: EOF"`, write, true},
		{`error reading from server: EOF`, write, true},
		{`connection error: desc = "transport is closing"`, write, true},
		{`write tcp 127.0.0.1:1->127.0.0.1:2: write: broken pipe`, write, true},
		{`connection error: desc = "error reading from server: EOF"`, read, false},
		{`connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`, write, false},
		{`connection error: desc = "transport: authentication handshake failed: EOF"`, write, false},
		{`connection error: desc = "error reading server preface: EOF"`, write, false},
		{`name resolver error: produced zero addresses`, write, false},
	} {
		err := fromStatus(context.Background(), "commit", c.kind, 0, status.Error(codes.Unavailable, c.msg))
		if !errors.Is(err, backends.ErrUnavailable) {
			t.Errorf("%q (write %v): %v, want ErrUnavailable", c.msg, c.kind, err)
		}
		if got := errors.Is(err, backends.ErrOutcomeUnknown); got != c.outcomeUnk {
			t.Errorf("%q (write %v): %v: outcome unknown %v, want %v", c.msg, c.kind, err, got, c.outcomeUnk)
		}
	}
}

// A status without a Failure is classed too: a call the server does not
// know (Unimplemented) applied nothing and is not worth retrying
// (ErrInvalid); any other status a tq server never sends leaves a write's
// outcome unknown.
func TestBareStatusClass(t *testing.T) {
	for _, c := range []struct {
		code          codes.Code
		kind          callKind
		invalid, unkn bool
	}{
		{codes.Unimplemented, write, true, false},
		{codes.Unimplemented, read, true, false},
		{codes.Aborted, write, false, true},
		{codes.FailedPrecondition, write, false, true},
		{codes.NotFound, write, false, true},
		{codes.Aborted, read, false, false},
		{codes.Internal, write, false, true},
		{codes.Unknown, write, false, true},
	} {
		err := fromStatus(context.Background(), "settle", c.kind, 0, status.Error(c.code, "x"))
		if errors.Is(err, backends.ErrInvalid) != c.invalid || errors.Is(err, backends.ErrOutcomeUnknown) != c.unkn {
			t.Errorf("%v (write %v): %v, want invalid %v, outcome unknown %v", c.code, c.kind, err, c.invalid, c.unkn)
		}
	}
}

// A request over the server's size limit was refused before it ran
// (ErrInvalid); a write whose reply was over it ran (ErrOutcomeUnknown).
func TestSizeLimitClass(t *testing.T) {
	err := fromStatus(context.Background(), "commit", write, 0, status.Error(codes.ResourceExhausted, "grpc: received message larger than max (2000 vs. 1024)"))
	if !errors.Is(err, backends.ErrInvalid) || errors.Is(err, backends.ErrOutcomeUnknown) {
		t.Errorf("request over the limit: %v, want ErrInvalid alone", err)
	}
	err = fromStatus(context.Background(), "delete partition", write, 0, status.Error(codes.ResourceExhausted, "trying to send message larger than max (2000 vs. 1024)"))
	if !errors.Is(err, backends.ErrOutcomeUnknown) || errors.Is(err, backends.ErrInvalid) {
		t.Errorf("reply over the limit: %v, want ErrOutcomeUnknown", err)
	}
}
