package memory

import (
	"fmt"

	"context"

	"github.com/tqgo/tqgo/backends"
)

var _ backends.SplitWriter = (*Store)(nil)

// PutSplit implements backends.SplitWriter: it joins each head and body in
// buffers from Allocate (one arena for the small ones) and publishes them.
func (s *Store) PutSplit(ctx context.Context, keys []string, heads, bodies [][]byte) error {
	if err := s.check(ctx, keys, len(heads)); err != nil {
		return err
	}
	if len(bodies) != len(keys) {
		return fmt.Errorf("%w: %d keys, %d bodies", backends.ErrInvalid, len(keys), len(bodies))
	}
	sizes := make([]int, len(keys))
	for i := range sizes {
		sizes[i] = len(heads[i]) + len(bodies[i])
	}
	st, err := s.Allocate(ctx, keys, sizes)
	if err != nil {
		return err
	}
	for i, b := range st.Buffers() {
		copy(b[copy(b, heads[i]):], bodies[i])
	}
	return st.Publish(ctx)
}
