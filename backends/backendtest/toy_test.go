package backendtest_test

import (
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest"
	"github.com/tqgo/tqgo/backends/backendtest/toykv"
)

// The toy engine, a map behind a mutex made a Store by backends.FromKV,
// passes the data suite: an engine needs no more than KV's four methods.
func TestToyEngine(t *testing.T) {
	backendtest.RunEngine(t, func(t *testing.T) backends.Engine {
		data := backends.FromKV(toykv.New())
		t.Cleanup(func() { _ = data.Close() })
		return backends.Engine{Data: data, Local: true}
	})
}
