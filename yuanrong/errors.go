package yuanrong

import (
	"errors"
	"fmt"

	"github.com/tqgo/tqgo/backends"
)

// aliasError is a sentinel of this package that also matches a sentinel of
// package backends, so tq (which knows only backends) and a caller of this
// package (which knows ErrClosed here) can both test for it with errors.Is.
type aliasError struct {
	msg    string
	parent error
}

func (e *aliasError) Error() string { return e.msg }

func (e *aliasError) Is(target error) bool { return target == e.parent }

// Sentinel errors. Match them with errors.Is.
var (
	// ErrInvalid: a malformed call (slices of different lengths, an empty,
	// too long or repeated key, a negative size, a bad option, a buffer
	// that is not this datasystem's or is no longer publishable). Nothing
	// was written. It also matches backends.ErrInvalid.
	ErrInvalid error = &aliasError{"yuanrong: invalid argument", backends.ErrInvalid}
	// ErrClosed: the Client, Backend or DataSystem was closed. It also
	// matches backends.ErrClosed.
	ErrClosed error = &aliasError{"yuanrong: closed", backends.ErrClosed}
	// ErrKeyExists: MPublish found a value already published under the key.
	// The datasystem does not overwrite, which is why every put deletes its
	// keys before publishing.
	ErrKeyExists = errors.New("yuanrong: key already exists")
	// ErrUnknownStrategy: a strategy tag on Get or Clear that no strategy of
	// this build handles (data written by a strategy this process lacks,
	// or a corrupted tag). TransferQueue raises the same condition as
	// "the backend that originally stored it is unavailable".
	ErrUnknownStrategy = errors.New("yuanrong: unknown storage strategy tag")
	// ErrNoSDK: a "yuanrong://host:port" URL, which needs a binding of the
	// datasystem SDK that this build does not have (see README.md) and a
	// MetaStore the processes sharing the datasystem share; the error also
	// matches ErrInvalid.
	ErrNoSDK = errors.New("yuanrong: no datasystem SDK binding in this build")
)

// KeyError names the key a call failed on.
type KeyError struct {
	Key string
	Err error // ErrInvalid, ErrKeyExists, ErrUnknownStrategy or a codec error
}

func (e *KeyError) Error() string { return fmt.Sprintf("%v: key %q", e.Err, e.Key) }

func (e *KeyError) Unwrap() error { return e.Err }

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}
