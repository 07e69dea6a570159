package memory_test

import (
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest"
	"github.com/tqgo/tqgo/backends/memory"
)

func TestConformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backends.Backend {
		s := memory.New()
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

func TestMetaConformance(t *testing.T) {
	backendtest.RunMeta(t, func(t *testing.T) backends.MetaStore {
		m := memory.NewMetaStore()
		t.Cleanup(func() { _ = m.Close() })
		return m
	})
}
