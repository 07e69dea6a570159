package file_test

import (
	"sync"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest"
	"github.com/tqgo/tqgo/backends/file"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/internal/replica"
	"github.com/tqgo/tqgo/tq"
	"github.com/tqgo/tqgo/tq/tqtest"
)

// openT opens the engine over dir, closed at the test's end.
func openT(t testing.TB, dir string, o file.Options) backends.Engine {
	t.Helper()
	eng, err := file.Open(t.Context(), dir, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Data.Close(); _ = eng.Log.Close() })
	return eng
}

// dirs holds each test's directory: a test that asks twice (a second
// client, as RunColocated's OtherClient does) gets the one engine.
var dirs sync.Map

// fresh is an engine over a directory of the test's own.
func fresh(t *testing.T) backends.Engine {
	dir, _ := dirs.LoadOrStore(t, t.TempDir())
	return openT(t, dir.(string), file.Options{Sync: file.SyncNever})
}

func TestEngine(t *testing.T) {
	backendtest.RunEngine(t, fresh)
}

// The Log passes the log suite: every client an Open of one directory,
// as the clients of one process share it.
func TestLog(t *testing.T) {
	backendtest.RunLog(t, func(t *testing.T) func() backends.Log {
		dir := t.TempDir()
		return func() backends.Log { return openT(t, dir, file.Options{Sync: file.SyncNever}).Log }
	})
}

func TestStoreShared(t *testing.T) {
	dir := t.TempDir()
	backendtest.RunStore(t, func(t *testing.T) backends.Store { return openT(t, dir, file.Options{}).Data })
}

func TestMetaQueue(t *testing.T) {
	newMeta := func(t *testing.T) metadata.MetaStore {
		e := fresh(t)
		m := replica.NewStore(e.Log, e.Data)
		t.Cleanup(func() { _ = m.Close() })
		return m
	}
	t.Run("Meta", func(t *testing.T) { backendtest.RunMeta(t, newMeta) })
	t.Run("Queue", func(t *testing.T) { backendtest.RunQueue(t, newMeta) })
}

func TestClient(t *testing.T) {
	tqtest.Run(t, func(t *testing.T) tqtest.Engine { return tqtest.Over(fresh(t)) })
}

// modelEnv is a model environment over a fresh directory: every client an
// Open of it, sharing one engine. When the history ends and every client
// has closed, the engine closes; the directory reopened must hold the
// state the engine held.
func modelEnv(o file.Options) func(t *testing.T) tqtest.ModelEnv {
	return func(t *testing.T) tqtest.ModelEnv {
		dir := t.TempDir()
		keep := openT(t, dir, o) // holds the engine open across the history
		t.Cleanup(func() { file.CheckReopen(t, dir, o, keep) })
		return tqtest.ModelEnv{Open: func(t *testing.T) *tq.Client {
			e := openT(t, dir, o)
			c, err := tq.New(e)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			return c
		}}
	}
}

func TestModel(t *testing.T) {
	tqtest.RunModel(t, modelEnv(file.Options{Sync: file.SyncNever}))
}

func TestModelFakeClock(t *testing.T) {
	tqtest.RunModelFakeClock(t, modelEnv(file.Options{}))
}
