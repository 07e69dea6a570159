package backends

import "context"

// SplitReader is an optional interface of a Backend that reads values
// straight into the caller's memory: tq reads the cells of a column whose
// dtype and shape the metadata knows into the column itself, with no reply
// buffer per cell and no second copy to stack them.
type SplitReader interface {
	// GetSplit reads the value of keys[i] into dst[i]. A value of exactly
	// len(dst[i].Head)+len(dst[i].Body) bytes fills Head, then Body; a
	// value of any other length is returned whole in Other (Head and Body
	// are then undefined); a missing key leaves Found false. Other must not
	// be modified. On error the destinations are undefined.
	GetSplit(ctx context.Context, keys []string, dst []SplitValue) error
}

// SplitValue is one destination of SplitReader.GetSplit.
type SplitValue struct {
	Head, Body []byte // where a value of the expected length goes
	Other      []byte // a value of another length, whole
	Found      bool
}

// SplitWriter is an optional interface of a Backend that stores values
// given in two parts: tq sends a tensor cell as the codec's prefix for its
// dtype and shape and the row of the caller's tensor, without packing them
// into one buffer first.
type SplitWriter interface {
	// PutSplit stores heads[i] followed by bodies[i] under keys[i],
	// replacing any existing value. The slices are only read during the
	// call (heads may share memory). On error some keys may have been
	// written: callers delete them.
	PutSplit(ctx context.Context, keys []string, heads, bodies [][]byte) error
}

// GetSplitFromGet is SplitReader.GetSplit done with b's Get: each value
// read whole goes into Head and Body when it has their length, else into
// Other (aliasing it); a missing one leaves Found false. For engines whose
// reads cannot land in the caller's memory, and for tests.
func GetSplitFromGet(ctx context.Context, b Backend, keys []string, dst []SplitValue) error {
	vals, err := b.Get(ctx, keys)
	if err != nil {
		return err
	}
	for i, v := range vals {
		d := &dst[i]
		d.Found, d.Other = v != nil, nil
		switch {
		case v == nil:
		case len(v) == len(d.Head)+len(d.Body):
			copy(d.Body, v[copy(d.Head, v):])
		default:
			d.Other = v
		}
	}
	return nil
}

// CommitWriter is a SplitWriter that can write cells and commit the rows
// that reference them in one request to its server, when the MetaStore
// is its own: a put then waits for one round trip fewer.
type CommitWriter interface {
	SplitWriter
	// PutSplitCommit is PutSplit(ctx, keys, heads, bodies) followed, once
	// that succeeded, by meta.Commit(ctx, partition, updates), whose
	// result it returns. On error some cells may be written and the
	// commit's outcome is as Commit documents (unknown only on a
	// timeout): the caller cleans up as after a failed Commit.
	PutSplitCommit(ctx context.Context, meta MetaStore, keys []string, heads, bodies [][]byte, partition string, updates []RowUpdate) (CommitResult, error)
}

// CachedLookup is a MetaStore that keeps a copy of partitions' rows in the
// client, so that a read can skip the lookup's round trip and have a
// ConfirmingReader check the copy in the request that reads the cells.
type CachedLookup interface {
	// LookupCached returns the rows of keys as the copy holds them (nil
	// for a key it does not know) and a token naming that copy, without a
	// request; ok false: no copy of the partition. The rows may be stale:
	// trust them only once GetSplitConfirmed reports them current.
	LookupCached(partition string, keys []string) (rows []*Row, token any, ok bool)
}

// ConfirmingReader is a SplitReader that can check, in the request that
// reads cells, that rows from its MetaStore's LookupCached are current.
type ConfirmingReader interface {
	SplitReader
	// GetSplitConfirmed is GetSplit into the destinations dst returns,
	// and reports whether the rows behind token (from meta's
	// LookupCached) were still the partition's committed rows when the
	// read ran. sizes[i] is the expected length of keys[i]'s value (the
	// length of Head and Body of its destination). dst is called once,
	// before any value is read, and as late as the engine can (after its
	// first requests went out), so that the caller allocates its
	// fresh memory while the server works. current false: the destinations are
	// undefined, and the caller looks the rows up again.
	GetSplitConfirmed(ctx context.Context, meta MetaStore, token any, keys []string, sizes []int, dst func() []SplitValue) (current bool, err error)
}
