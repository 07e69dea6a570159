package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/redis/internal/resp"
)

// Sentinel errors. Every error of a failed call to the server is an *Error
// naming the operation and the server address; it matches one of these
// with errors.Is when the cause is known, and wraps the cause (so
// errors.Is(err, context.DeadlineExceeded) works too).
var (
	// ErrUnavailable: the server could not be reached or dropped the
	// connection (connection refused, reset, closed mid-reply).
	ErrUnavailable = errors.New("redis: server unavailable")
	// ErrAuth: the server refused the credentials (WRONGPASS, NOAUTH,
	// NOPERM).
	ErrAuth = errors.New("redis: authentication failed")
	// ErrTimeout: a network read or write took longer than the client's
	// timeout (read_timeout, write_timeout, dial_timeout).
	ErrTimeout = errors.New("redis: timeout")
	// ErrCorrupt: metadata read from the server does not decode, or a
	// script replied in a way this package does not expect (another program
	// writing under the same prefix?), or a reply on a direct connection
	// does not follow the protocol.
	ErrCorrupt = resp.ErrCorrupt
	// ErrNotReplicated: a metadata write applied on the master, but fewer
	// replicas than WithReplicas asks for acknowledged it in time. The
	// error also matches backends.ErrOutcomeUnknown: a failover may still
	// lose the write.
	ErrNotReplicated = errors.New("redis: write not acknowledged by enough replicas")
	// ErrCellsMissing: a commit was refused because the server lacks cells
	// this Store wrote for it: a failover moved the clients to a replica
	// that missed them (see CellLog.AppendCells). Nothing of the commit
	// applied.
	ErrCellsMissing = errors.New("redis: the commit's cells are not on the server")
)

// errAckLost is why a write counts as not replicated when it applied on
// a send whose WAIT reply was lost (see Log.appended).
var errAckLost = errors.New("redis: the write applied on a send whose WAIT reply was lost")

// unknownOutcome marks a metadata write that may or may not have been
// applied, after the engine could not settle it: it matches
// backends.ErrOutcomeUnknown (and tq.ErrOutcomeUnknown) besides its cause.
type unknownOutcome struct{ err error }

func (e *unknownOutcome) Error() string {
	return "outcome unknown: " + e.err.Error()
}
func (e *unknownOutcome) Unwrap() error { return e.err }
func (e *unknownOutcome) Is(target error) bool {
	return target == backends.ErrOutcomeUnknown
}

// notReplicated is a write that applied but that too few replicas
// acknowledged; it matches ErrNotReplicated.
type notReplicated struct {
	want    int
	got     int64
	timeout time.Duration
	err     error // the WAIT's own failure, if any
}

func (e *notReplicated) Error() string {
	if e.err != nil {
		return fmt.Sprintf("%v: WAIT %d failed: %v", ErrNotReplicated, e.want, e.err)
	}
	return fmt.Sprintf("%v: %d of %d replicas within %v", ErrNotReplicated, e.got, e.want, e.timeout)
}
func (e *notReplicated) Unwrap() error { return e.err }
func (e *notReplicated) Is(target error) bool {
	return target == ErrNotReplicated || target == backends.ErrNotDurable
}

// Error is a failed call to the server: the operation, the address of the
// server (or the cluster's seed addresses) and the cause. When the
// caller's context had ended, it wraps the context's error and matches
// none of ErrUnavailable, ErrAuth and ErrTimeout.
type Error struct {
	Op   string // "put", "get", "delete", "prepare", "commit", ...
	Addr string // "host:port", or "h1:p1,h2:p2" for a cluster
	Err  error

	callerDone bool // the caller's context had ended
}

func (e *Error) Error() string {
	return fmt.Sprintf("redis: %s on %s: %v", e.Op, e.Addr, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Timeout reports a request whose reply did not come in time (the
// client's timeout or the caller's deadline). Whether a metadata write
// applied is not told by this but by backends.ErrOutcomeUnknown.
func (e *Error) Timeout() bool {
	return resp.IsTimeout(e.Err) || errors.Is(e.Err, context.DeadlineExceeded)
}

// Is classifies the cause, so callers can tell a server that is down from
// one that refuses them without parsing messages.
func (e *Error) Is(target error) bool {
	if e.callerDone {
		return false
	}
	switch target {
	case ErrUnavailable:
		return isUnavailable(e.Err)
	case backends.ErrUnavailable:
		// A client closed by its owner stays closed: not worth retrying.
		return (isUnavailable(e.Err) || resp.IsTimeout(e.Err) || isNotServing(e.Err)) && !errors.Is(e.Err, goredis.ErrClosed)
	case backends.ErrFull:
		return isOOM(e.Err)
	case ErrAuth:
		return isAuth(e.Err)
	case ErrTimeout:
		return resp.IsTimeout(e.Err)
	}
	return false
}

func isAuth(err error) bool {
	var re goredis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return strings.HasPrefix(msg, "WRONGPASS") || strings.HasPrefix(msg, "NOAUTH") ||
		strings.HasPrefix(msg, "NOPERM") || strings.Contains(msg, "invalid password")
}

func isUnavailable(err error) bool {
	if resp.IsTimeout(err) || isAuth(err) {
		return false
	}
	return resp.IsConnLost(err) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, goredis.ErrClosed) || errors.Is(err, goredis.ErrPoolTimeout)
}

// isOOM reports the refusal of a server at its maxmemory with the
// noeviction policy: the command did not run.
func isOOM(err error) bool {
	var re goredis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "OOM ")
}

// isNotServing reports an error reply of a server that is up but not
// serving requests yet: loading its data after a restart, a replica
// without its master, a cluster mid-failover. Nothing ran.
func isNotServing(err error) bool {
	var re goredis.Error
	if !errors.As(err, &re) {
		return false
	}
	for _, p := range []string{"LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "BUSY "} {
		if strings.HasPrefix(re.Error(), p) {
			return true
		}
	}
	return false
}

// isCellsMissing reports whether err is the append script's refusal for
// a missing receipt (see CellLog.AppendCells).
func isCellsMissing(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOCELLS")
}
