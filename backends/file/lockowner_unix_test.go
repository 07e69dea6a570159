//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package file_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tqgo/tqgo/backends/file"
)

// A lock whose holder wrote no owner record (an older version, or one
// that has just taken it) is refused all the same, naming nobody.
func TestLockedWithoutOwner(t *testing.T) {
	dir := t.TempDir()
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	_, err = file.Open(t.Context(), dir, file.Options{})
	var le *file.LockedError
	if !errors.Is(err, file.ErrLocked) || !errors.As(err, &le) || le.PID != 0 || !strings.Contains(err.Error(), "another process") {
		t.Fatalf("Open of a directory locked with no owner record: %v", err)
	}
	// A view opens it all the same.
	eng, err := file.Open(t.Context(), dir, file.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := file.ViewOf(eng); !ok || v.Segment != "" || !v.AsOf.IsZero() {
		t.Errorf("the view of an empty directory: %+v", v)
	}
	_ = eng.Log.Close()
	_ = eng.Data.Close()
}
