package tq

import (
	"strings"
	"time"
)

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

// SetBackoff returns the backoff of a set of fields (sorted) of
// partition after a refused PutNew (see partBlocks.refused): 0 for none.
func SetBackoff(c *Client, partition string, fields []string) time.Duration {
	c.blocks.mu.Lock()
	defer c.blocks.mu.Unlock()
	if fb := c.blocks.parts[partition]; fb != nil {
		return fb.refused[strings.Join(fields, "\x00")].backoff
	}
	return 0
}

// EndSetBackoffs ends the time off blocks of every set of fields, as if
// it had passed, keeping their backoffs.
func EndSetBackoffs(c *Client) {
	c.blocks.mu.Lock()
	defer c.blocks.mu.Unlock()
	for _, fb := range c.blocks.parts {
		for k, sb := range fb.refused {
			sb.until = time.Time{}
			fb.refused[k] = sb
		}
	}
}
