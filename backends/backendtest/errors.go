package backendtest

import "errors"

// ErrInjected is the error a [Faulty] fault returns when it was given no
// error of its own.
var ErrInjected = errors.New("backendtest: injected fault")
