package redis

import (
	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends/redis/internal/resp"
)

// The engine's own connections (package internal/resp), for what go-redis
// does slowly: values into and out of caller memory.
type (
	rawConns    = resp.Pool
	rawConn     = resp.Conn
	request     = resp.Request
	serverError = resp.ServerError
)

// rawPool returns the Store's pool of plain connections, or nil when
// reads and writes must go through go-redis. Its Log uses the same pool.
func (s *Store) rawPool() *rawConns {
	s.rawOnce.Do(func() {
		c, ok := s.client.(*goredis.Client)
		if !ok || s.opts.noDirect {
			return
		}
		opt := c.Options()
		if opt.Dialer == nil || opt.OnConnect != nil || opt.StreamingCredentialsProvider != nil {
			return
		}
		size := s.opts.directPool
		if size < 0 {
			size = directShare(opt.PoolSize)
		}
		if size < 1 {
			return
		}
		s.raw, _ = resp.NewPool(resp.Config{Options: opt, Size: size, Hooks: s.opts.hooks})
	})
	return s.raw
}

// directShare is the number of connections of a pool of n that the
// engine's own connections take by default: half, rounded down.
func directShare(n int) int { return n / 2 }

// describeKeys returns the data keys pre+keys[i] as command arguments,
// after args, for the commands hooks see.
func describeKeys(args []any, pre string, keys []string) []any {
	for _, k := range keys {
		args = append(args, pre+k)
	}
	return args
}
