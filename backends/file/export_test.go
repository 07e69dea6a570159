package file

import (
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
)

// What the external tests (package file_test: they import tq, which
// imports this package) need of the engine's insides.

// CheckReopen is checkReopen.
func CheckReopen(t *testing.T, dir string, o Options, keep backends.Engine) {
	t.Helper()
	checkReopen(t, dir, o, keep)
}

// ScanName is scanName.
func ScanName(name, format string, n *uint64) bool { return scanName(name, format, n) }

// DirNames is dirNames.
func DirNames(t testing.TB, dir string) []string {
	t.Helper()
	return dirNames(t, dir)
}

// WaitCheckpointIdle waits until no checkpoint of eng's engine runs.
func WaitCheckpointIdle(eng backends.Engine) {
	for engineOf(eng).ckptRunning.Load() {
		time.Sleep(time.Millisecond)
	}
}

// Checkpoints is how many checkpoints eng's engine wrote.
func Checkpoints(eng backends.Engine) int64 { return engineOf(eng).checkpoints.Load() }

// Cells is how many cells eng's engine holds.
func Cells(eng backends.Engine) int {
	e := engineOf(eng)
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.st.ncells
}
