//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package file

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes an exclusive flock on dir/LOCK, which the OS releases
// when the process dies (kill -9 included): no stale lock to clear.
func lockDir(dir string) (unlock func() error, err error) {
	path := filepath.Join(dir, "LOCK")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked (flock on %s)", ErrLocked, dir, path)
		}
		return nil, fmt.Errorf("file: locking %s: %w", path, err)
	}
	return f.Close, nil // closing the file releases the lock
}
