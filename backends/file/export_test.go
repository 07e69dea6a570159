package file

import (
	"math/rand/v2"
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

// Recorder is a recFS installed as the file system of the engines opened
// until Restore.
type Recorder struct{ r *recFS }

// Record installs a recFS (killing the process at its killAt-th call
// that changes a file, if killAt > 0).
func Record(killAt int) *Recorder {
	r := newRecFS()
	r.killAt = killAt
	defaultFS = r
	return &Recorder{r}
}

// Restore puts the os's file system back.
func (r *Recorder) Restore() { defaultFS = osFS{} }

// Len is the trace's length: a crash point.
func (r *Recorder) Len() int { return r.r.Len() }

// CallKinds is callKinds.
func (r *Recorder) CallKinds() []string { return r.r.callKinds() }

// DurableAt is durableAt.
func (r *Recorder) DurableAt() []int { return r.r.durableAt() }

// CrashState is a crashState.
type CrashState struct{ s crashState }

func (s CrashState) How() string                  { return s.s.how }
func (s CrashState) Materialize(dir string) error { return s.s.materialize(dir) }
func (s CrashState) Files() map[string][]byte     { return s.s.files }

// States is states.
func (r *Recorder) States(k int, rng *rand.Rand, n int) []CrashState {
	var out []CrashState
	for _, s := range r.r.states(k, rng, n) {
		out = append(out, CrashState{s})
	}
	return out
}

// Summary is summary.
func (r *Recorder) Summary() string { return r.r.summary() }

// Around is around.
func (r *Recorder) Around() []int { return r.r.around() }
