package backends

import "errors"

var (
	// ErrClosed is returned by any call on a closed backend or store.
	ErrClosed = errors.New("backends: closed")
	// ErrUnknownScheme is returned by Open for a scheme nobody registered.
	ErrUnknownScheme = errors.New("backends: unknown scheme")
	// ErrInvalid reports a malformed argument (mismatched lengths, bad URL).
	ErrInvalid = errors.New("backends: invalid argument")
	// ErrConflict is returned by MetaStore.Commit when a row it was asked to
	// commit was cleared (or re-created with another index) after Prepare.
	ErrConflict = errors.New("backends: row changed since prepare")
)
