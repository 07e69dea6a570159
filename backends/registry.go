package backends

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
)

// Engine is what an Opener returns: its Store, and its metadata: a Log
// (a shared engine's), or a metadata store of its own (Meta).
//
// Metadata must be as shared as the data: an engine whose data other
// processes can reach (a server, a shared file system) gives the Log they
// all append to (or a metadata store they all use), or two processes would
// hand out the same global indexes and overwrite each other's cells. tq
// applies the rules to a Log in each process. Only an engine whose data
// lives in this process alone sets Local, and may then give neither: tq
// gives it an in-process metadata store. tq.Open and tq.New refuse an
// engine with neither that is not Local, and one whose Meta is not a
// metadata.MetaStore (ErrInvalid).
type Engine struct {
	Data  Store
	Log   Log
	Meta  Meta
	Local bool // the data is this process's alone
}

// Meta is an engine's own metadata store: a metadata.MetaStore. It is
// declared here by the one method this package calls, as package metadata
// imports this one; metadata.Of checks it is a MetaStore.
type Meta interface {
	Close() error
}

// Check reports whether e is an engine tq can use: a Store, and a Log or
// a Meta (not both) unless the engine is Local. Its error wraps ErrInvalid. That Meta
// is a metadata.MetaStore is metadata.Of's check, which makes this one too.
func (e Engine) Check() error {
	switch {
	case e.Data == nil:
		return fmt.Errorf("%w: engine without a Store", ErrInvalid)
	case e.Meta == nil && e.Log == nil && !e.Local:
		return fmt.Errorf("%w: engine without a Log or MetaStore whose data is not process-local: processes sharing its data would hand out the same global indexes", ErrInvalid)
	case e.Meta != nil && e.Log != nil:
		return fmt.Errorf("%w: engine with both a Log and a MetaStore: its metadata is one or the other", ErrInvalid)
	}
	return nil
}

// Opener opens an engine for a URL of its scheme.
type Opener func(ctx context.Context, u *url.URL) (Engine, error)

var (
	registryMu sync.RWMutex
	registry   = map[string]Opener{}
)

// Register makes an engine available under scheme. It panics if open is nil
// or the scheme is registered twice, as database/sql.Register does: both are
// programming errors found at init.
func Register(scheme string, open Opener) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if open == nil {
		panic("backends: Register opener is nil")
	}
	if _, dup := registry[scheme]; dup {
		panic("backends: Register called twice for scheme " + scheme)
	}
	registry[scheme] = open
}

// Schemes returns the registered schemes, sorted.
func Schemes() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	out := make([]string, 0, len(registry))
	for s := range registry {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Open parses rawURL and opens it with the opener of its scheme. A URL
// without a scheme ("127.0.0.1:6379", "localhost:6379/0") fails with an
// error matching ErrInvalid that lists the registered schemes; one whose
// scheme nobody registered, with ErrUnknownScheme.
func Open(ctx context.Context, rawURL string) (Engine, error) {
	u, err := url.Parse(rawURL)
	if noScheme(rawURL, u, err) {
		return Engine{}, &noSchemeError{url: redactRaw(rawURL), schemes: Schemes()}
	}
	if err != nil {
		// Not url.Parse's own error: it quotes the URL, password included.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return Engine{}, fmt.Errorf("%w: parse URL: %w", ErrInvalid, err)
	}
	registryMu.RLock()
	open := registry[u.Scheme]
	registryMu.RUnlock()
	if open == nil {
		return Engine{}, fmt.Errorf("%w %q (forgotten import?)", ErrUnknownScheme, u.Scheme)
	}
	eng, err := open(ctx, u)
	if err != nil {
		return Engine{}, err
	}
	if err := eng.Check(); err != nil {
		_ = eng.Close()
		return Engine{}, fmt.Errorf("scheme %q: %w", u.Scheme, err)
	}
	return eng, nil
}

// noScheme reports whether rawURL, which url.Parse made u of (or failed
// on with err), lacks a scheme: it has no "://", and it did not parse
// (a host:port: "first path segment in URL cannot contain colon"), or
// parsed with no scheme ("redis-host", ""), or with an unregistered one
// followed by what reads as a port or a password ("localhost:6379/0" is
// scheme "localhost", opaque "6379/0"). "nosuch:thing" keeps its scheme.
func noScheme(rawURL string, u *url.URL, err error) bool {
	if strings.Contains(rawURL, "://") {
		return false
	}
	if err != nil || u.Scheme == "" {
		return true
	}
	registryMu.RLock()
	_, known := registry[u.Scheme]
	registryMu.RUnlock()
	if known {
		return false
	}
	return u.Opaque != "" && ('0' <= u.Opaque[0] && u.Opaque[0] <= '9' || strings.Contains(u.Opaque, "@"))
}

// redactRaw drops what could be a password from a URL that did not parse
// as one: everything before its last "@".
func redactRaw(rawURL string) string {
	if at := strings.LastIndexByte(rawURL, '@'); at >= 0 {
		return "xxxxx" + rawURL[at:]
	}
	return rawURL
}

// noSchemeError is Open's error for a URL without a scheme. It matches
// ErrInvalid.
type noSchemeError struct {
	url     string // redacted
	schemes []string
}

func (e *noSchemeError) Error() string {
	registered := "none (forgotten import?)"
	if len(e.schemes) > 0 {
		registered = strings.Join(e.schemes, ", ")
	}
	return fmt.Sprintf("backends: URL %q has no scheme (want redis://host:port/db, memory://, …: registered schemes: %s)", e.url, registered)
}

func (e *noSchemeError) Unwrap() error { return ErrInvalid }

// Close closes what the engine holds: its Meta, its Log and its Store
// (those that are set), returning their errors joined.
func (e Engine) Close() error {
	var errs []error
	if e.Meta != nil {
		errs = append(errs, e.Meta.Close())
	}
	if e.Log != nil {
		errs = append(errs, e.Log.Close())
	}
	if e.Data != nil {
		errs = append(errs, e.Data.Close())
	}
	return errors.Join(errs...)
}
