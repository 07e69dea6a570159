package redis_test

import (
	"context"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/redis"
)

// open opens a store on url for t, closed (both sides) when t ends.
func open(t *testing.T, url string, opts ...redis.Option) *redis.Store {
	t.Helper()
	s, err := redis.OpenURL(t.Context(), url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		s.Meta().Close()
	})
	return s
}

// engine is s with its Meta, as the opener returns them.
func engine(s *redis.Store) backends.Engine { return backends.Engine{Data: s, Meta: s.Meta()} }

// apart is an engine whose Meta hides backends.Colocated, so that tq
// writes every cell with Data.Write and reads them with Data.Read (the
// path of a wrapped Data, which WriteCommit and ReadRows would bypass).
func apart(data backends.Store, meta backends.MetaStore) backends.Engine {
	return backends.Engine{Data: data, Meta: metaOnly{meta}}
}

type metaOnly struct{ backends.MetaStore }

// cellsOf returns cells of vals under keys.
func cellsOf(keys []string, vals [][]byte) []backends.Cell {
	cells := make([]backends.Cell, len(keys))
	for i, k := range keys {
		cells[i] = backends.Cell{Key: k, Body: vals[i]}
	}
	return cells
}

// putVals writes vals under keys.
func putVals(ctx context.Context, s backends.Store, keys []string, vals [][]byte) error {
	return s.Write(ctx, cellsOf(keys, vals))
}

// getVals reads keys whole: nil for a missing key.
func getVals(ctx context.Context, s backends.Store, keys []string) ([][]byte, error) {
	cells := make([]backends.ReadCell, len(keys))
	for i, k := range keys {
		cells[i].Key = k
	}
	if err := s.Read(ctx, cells); err != nil {
		return nil, err
	}
	out := make([][]byte, len(keys))
	for i, c := range cells {
		if c.Found {
			out[i] = c.Value
		}
	}
	return out, nil
}

// delKeys deletes keys.
func delKeys(ctx context.Context, s backends.Store, keys []string) error {
	return s.Delete(ctx, cellsOf(keys, make([][]byte, len(keys))))
}
