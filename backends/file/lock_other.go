//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package file

import (
	"fmt"
	"runtime"

	"github.com/tqgo/tqgo/backends"
)

// lockDir fails: without flock the engine cannot keep a second process
// out of the directory, and two would corrupt it.
func lockDir(dir string) (func() error, error) {
	return nil, fmt.Errorf("%w: file: no directory lock on %s (flock needed: Linux, macOS or a BSD)", backends.ErrInvalid, runtime.GOOS)
}
