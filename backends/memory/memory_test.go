package memory_test

import (
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest"
	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/tq"
	"github.com/tqgo/tqgo/tq/tqtest"
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

func TestClientConformance(t *testing.T) {
	tqtest.Run(t, func(t *testing.T) tqtest.Engine {
		data, meta := memory.New(), memory.NewMetaStore()
		t.Cleanup(func() { _ = data.Close(); _ = meta.Close() })
		return tqtest.Engine{
			Open: func(t *testing.T) *tq.Client {
				c, err := tq.New(data, meta)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = c.Close() })
				return c
			},
			Data: data,
			Meta: meta,
		}
	})
}
