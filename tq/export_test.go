package tq

import "time"

// SetBlockIdle sets how long a block may idle before the client retires
// it (see blockIdle), until the returned func restores it.
func SetBlockIdle(d time.Duration) (restore func()) {
	old := blockIdle
	blockIdle = d
	return func() { blockIdle = old }
}

// BlockTops returns how many partitions the client remembers the top
// index of (see blockSet.top).
func BlockTops(c *Client) int {
	c.blocks.mu.Lock()
	defer c.blocks.mu.Unlock()
	return len(c.blocks.top)
}
