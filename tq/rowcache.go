package tq

import (
	"context"
	"slices"
	"sync"

	"github.com/tqgo/tqgo/backends"
)

// rowCache holds the rows a client last looked up, so that a BatchGet of
// the same keys can read their cells while it looks the rows up again: on
// Redis the lookup is a round trip and an HMGET of every key, about a third
// of a 1024 x 512 B read, which then overlaps the data instead of coming
// before it. A cached row is only a guess: the read is kept only if the
// lookup finds the same cells (a cell's storage key names its generation,
// whose bytes never change), else the rows are read again as looked up.
// The client's own puts and clears drop the partition's rows.
type rowCache struct {
	mu    sync.Mutex // guards parts and n
	parts map[string]map[string]*backends.Row
	n     int
}

// maxCachedRows bounds the rows a client caches; past it the cache starts
// over.
const maxCachedRows = 1 << 16

// rows returns the cached row of every key, or nil unless all are cached.
func (rc *rowCache) rows(partition string, keys []string) []*backends.Row {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	pm := rc.parts[partition]
	if len(pm) < len(keys) {
		return nil
	}
	out := make([]*backends.Row, len(keys))
	for i, k := range keys {
		r := pm[k]
		if r == nil {
			return nil
		}
		out[i] = r
	}
	return out
}

func (rc *rowCache) put(partition string, rows []*backends.Row) {
	if len(rows) > maxCachedRows {
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.parts == nil || rc.n+len(rows) > maxCachedRows {
		rc.parts, rc.n = map[string]map[string]*backends.Row{}, 0
	}
	pm := rc.parts[partition]
	if pm == nil {
		pm = make(map[string]*backends.Row, len(rows))
		rc.parts[partition] = pm
	}
	for _, r := range rows {
		if _, had := pm[r.Key]; !had {
			rc.n++
		}
		pm[r.Key] = r
	}
}

// forget drops the cached rows of partition.
func (rc *rowCache) forget(partition string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.n -= len(rc.parts[partition])
	delete(rc.parts, partition)
}

// lookupAndRead looks keys up (valid ones) while it reads fields of the
// cached rows. It
// returns the rows looked up (nil when the lookup failed, with its error)
// and, when they name the same cells as the cached ones, the read's result.
// same false: the cells differ, read the rows looked up.
func (c *Client) lookupAndRead(ctx context.Context, partition string, keys, fields []string, cached []*backends.Row) (rows []*backends.Row, same bool, _ Batch, _ error) {
	var lookupErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		rows, lookupErr = c.lookupValid(ctx, partition, keys)
	}()
	b, err := c.read(ctx, partition, cached, fields)
	<-done
	if lookupErr != nil {
		return nil, false, nil, lookupErr
	}
	if !sameCells(cached, rows) {
		return rows, false, nil, nil
	}
	return rows, true, b, err
}

// sameCells reports whether a and b are the same rows with the same cells:
// indexes, and each field's generation, dtype, shape and backend tag.
// Rows of one put share their Fields map, so each distinct pair of maps is
// compared once.
func sameCells(a, b []*backends.Row) bool {
	if len(a) != len(b) {
		return false
	}
	var pa, pb map[string]backends.FieldInfo
	for i := range a {
		if a[i].Index != b[i].Index || a[i].Key != b[i].Key {
			return false
		}
		fa, fb := a[i].Fields, b[i].Fields
		if i > 0 && sameMap(fa, pa) && sameMap(fb, pb) {
			continue // compared equal just before
		}
		if !sameMap(fa, fb) && !equalFields(fa, fb) {
			return false
		}
		pa, pb = fa, fb
	}
	return true
}

func equalFields(a, b map[string]backends.FieldInfo) bool {
	if len(a) != len(b) {
		return false
	}
	for f, x := range a {
		y, ok := b[f]
		if !ok || x.Gen != y.Gen || x.DType != y.DType || x.BackendTag != y.BackendTag || !slices.Equal(x.Shape, y.Shape) {
			return false
		}
	}
	return true
}
