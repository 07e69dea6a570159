package redis

import (
	"context"
	"strings"
	"time"
	"unsafe"
)

// Key naming shared by every part of the engine (LAYOUT.md sections 1, 2).

// partEscaper keeps a partition name from closing the key's hash tag.
var partEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

// partBase is "base", what every key of partition's starts with:
// <prefix>:{<prefix>:<partition escaped>}. The keys of a partition share
// its hash tag, and so one Cluster slot.
func (s *Store) partBase(partition string) string {
	p := s.opts.prefix
	return p + ":{" + p + ":" + partEscaper.Replace(partition) + "}"
}

// globalBase is "gbase", <prefix>:{<prefix>}: the slot of the prefix's
// global index counter and partition registry.
func (s *Store) globalBase() string {
	return s.opts.prefix + ":{" + s.opts.prefix + "}"
}

// counterKeys are the global index counter and the partition registry.
func (s *Store) counterKeys() (next, parts string) {
	g := s.globalBase()
	return g + ":next", g + ":parts"
}

// unsafeBytes views s as bytes, for decoding without a copy; the decoders
// only read, and copy what they keep.
func unsafeBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// sleepCtx sleeps d, or until ctx ends (its error).
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
