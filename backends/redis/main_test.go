package redis_test

import (
	"context"
	"testing"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// quietLogger drops go-redis's log lines: the failure tests make it log
// every failed dial, and the errors they check are returned anyway.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// The long tests that mostly wait on servers of their own, and set no
// package-level knob (replica.SetSettleFor, redis.SetLogRecheck,
// replica.SetDefaultCompactAfter, t.Setenv), call t.Parallel: they run
// two at a time (-parallel) once the others have finished, and so never
// see a knob another test set. A test that sets one stays sequential.

// TestMain checks that no test leaves a goroutine behind: every store,
// client and server a test opens is closed by its cleanup.
func TestMain(m *testing.M) {
	goredis.SetLogger(quietLogger{})
	goleak.VerifyTestMain(m,
		// ants (the codec's packing pool) starts a default pool at init.
		goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).purgeStaleWorkers"),
		goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).ticktock"),
	)
}
