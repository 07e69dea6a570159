package tq

import "time"

// SetBlockIdle sets how long a block may idle before the client retires
// it (see blockIdle), until the returned func restores it.
func SetBlockIdle(d time.Duration) (restore func()) {
	old := blockIdle
	blockIdle = d
	return func() { blockIdle = old }
}
