package resp

import (
	"errors"
	"strings"
)

// ErrCorrupt: a reply does not follow RESP2, or is not the reply the
// request asked for. Package backends/redis exports it as
// redis.ErrCorrupt, whose text it keeps.
var ErrCorrupt = errors.New("redis: metadata not understood")

// ServerError is an error reply, without its '-'. It satisfies go-redis's
// Error interface, so code that classifies go-redis's errors (errors.As
// with goredis.Error) classifies it alike.
type ServerError string

func (e ServerError) Error() string { return string(e) }

// RedisError marks ServerError as a goredis.Error.
func (ServerError) RedisError() {}

// Stale reports whether the error says the server no longer serves as the
// master: READONLY after a failover, LOADING, MASTERDOWN.
func (e ServerError) Stale() bool {
	s := string(e)
	return strings.HasPrefix(s, "READONLY") || strings.HasPrefix(s, "LOADING") || strings.HasPrefix(s, "MASTERDOWN")
}
