package memory

import (
	"fmt"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/internal/replica"
)

// MetaStore keeps metadata and consumption in process. It is the
// metadata every log engine has (internal/replica: tqgo's rules applied
// to a partition's log of records, each partition's state behind a lock
// of its own, so writers and consumers of different partitions never
// contend), over a log in process of which it is the one reader and
// writer (replica.Sole): the log only numbers and stamps the records,
// and hands out global indexes; the state is the replica's. It is safe
// for concurrent use. Rows it returns are shared and must be treated as
// read-only. A partition is forgotten once a removal (Delete,
// DeletePartition, Swept, Garbage) leaves it with no rows and no
// garbage; consumption calls keep it. A Wait's claim stands (it is
// fulfilled by the write that makes rows ready, and the Wait returns its
// lease), as on a shared engine.
type MetaStore struct {
	*meta
	log *memLog
}

// meta names the replica in MetaStore, whose methods are MetaStore's.
type meta = replica.Meta

var (
	_ metadata.MetaStore     = (*MetaStore)(nil)
	_ metadata.Summarizer    = (*MetaStore)(nil)
	_ metadata.WaitTaker     = (*MetaStore)(nil)
	_ metadata.SettleClaimer = (*MetaStore)(nil)
)

// MetaOption configures a MetaStore.
type MetaOption func(*metaConfig)

type metaConfig struct{ clock func() time.Time }

// WithClock makes the store read time from clock (default time.Now): the
// clock leases, delays and reservation ages are judged by. For tests that
// move time on.
func WithClock(clock func() time.Time) MetaOption {
	return func(c *metaConfig) { c.clock = clock }
}

// NewMetaStore returns an empty store.
func NewMetaStore(opts ...MetaOption) *MetaStore {
	c := metaConfig{clock: time.Now}
	for _, o := range opts {
		o(&c)
	}
	l := newMemLog(c.clock)
	return &MetaStore{meta: replica.New(l, nil, replica.OwnsLog(), replica.Sole(c.clock)), log: l}
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: memory: "+format, append([]any{backends.ErrInvalid}, args...)...)
}
