package redis_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/internal/replica"
)

// open opens a store on url for t, closed (with its Log) when t ends.
func open(t *testing.T, url string, opts ...redis.Option) *redis.Store {
	t.Helper()
	s, err := redis.OpenURL(t.Context(), url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if m, ok := metas.LoadAndDelete(s); ok {
			m.(metadata.MetaStore).Close()
		}
		s.Close()
		s.Log().Close()
	})
	return s
}

// metas holds the rules over each store's Log that metaOf made.
var metas sync.Map // *redis.Store -> metadata.MetaStore

// metaOf returns the rules over s's Log, as a tq client applies them: the
// same for every call on s, closed with s when open made s (otherwise by
// closing s's Log, which ends its reads).
func metaOf(s *redis.Store) metadata.MetaStore {
	if m, ok := metas.Load(s); ok {
		return m.(metadata.MetaStore)
	}
	m, _ := metas.LoadOrStore(s, replica.NewStore(s.Log(), s))
	return m.(metadata.MetaStore)
}

// colo is m's metadata.Colocated side (a standalone server's).
func colo(m metadata.MetaStore) metadata.Colocated { return m.(metadata.Colocated) }

// engine is s with its Log, as the opener returns them.
func engine(s *redis.Store) backends.Engine { return backends.Engine{Data: s, Log: s.Log()} }

// settling is data and log as an engine whose metadata (the rules over
// log, as a tq client applies them) settles a write whose reply was lost
// for settle (replica.SettleFor), closed when t ends.
func settling(t *testing.T, data backends.Store, log backends.Log, settle time.Duration) backends.Engine {
	m := replica.NewStore(log, data, replica.SettleFor(settle))
	t.Cleanup(func() { m.Close() })
	return backends.Engine{Data: data, Meta: m}
}

// apart is an engine whose Log hides backends.LogCells, so that tq
// writes every cell with Data.Write and reads them with Data.Read (the
// path of a wrapped Data, which AppendCells and ReadCells would bypass).
func apart(data backends.Store, log backends.Log) backends.Engine {
	return backends.Engine{Data: data, Log: logOnly{log}}
}

type logOnly struct{ backends.Log }

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
