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
