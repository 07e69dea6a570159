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
// when the process dies (kill -9 included): no stale lock to clear. Once
// it holds the lock it writes its owner (PID, host, time) into LOCK, for
// another process's refusal to name it.
func lockDir(dir string) (unlock func() error, err error) {
	path := filepath.Join(dir, "LOCK")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, lockedError(dir, path)
		}
		return nil, fmt.Errorf("file: locking %s: %w", path, err)
	}
	// Best effort: the owner only names the holder in an error.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt(thisOwner(), 0)
	}
	return f.Close, nil // closing the file releases the lock
}
