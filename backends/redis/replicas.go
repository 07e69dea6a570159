package redis

import (
	"context"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// evalWait runs script and then WAIT for the engine's replicas on the
// same connection (loading the script first if the node lacks it), and
// returns the script's reply and acks, which reports a *notReplicated
// error when fewer replicas than WithReplicas asks acknowledged the
// connection's writes within its timeout.
func (s *Store) evalWait(ctx context.Context, script *goredis.Script, keys []string, args ...any) (_ []any, acks func() error, _ error) {
	node, err := s.nodeFor(ctx, keys[0])
	if err != nil {
		return nil, nil, err
	}
	want, timeout := s.opts.replicas, s.opts.replicaTimeout
	for try := 0; ; try++ {
		pipe := node.Pipeline()
		ev := pipe.EvalSha(ctx, script.Hash(), keys, args...)
		wait := pipe.Do(ctx, "WAIT", want, waitMillis(timeout))
		_, _ = pipe.Exec(ctx)
		if err := ev.Err(); err != nil {
			if try == 0 && goredis.HasErrorPrefix(err, "NOSCRIPT") {
				if err := script.Load(ctx, node).Err(); err != nil {
					return nil, nil, err
				}
				continue // nothing ran: send it again with the script loaded
			}
			return nil, nil, err
		}
		reply, err := ev.Slice()
		if err != nil {
			return nil, nil, err
		}
		return reply, func() error {
			got, err := wait.Int64()
			if err != nil {
				return &notReplicated{want: want, err: err}
			}
			if got < int64(want) {
				return &notReplicated{want: want, got: got, timeout: timeout}
			}
			return nil
		}, nil
	}
}

// waitMillis is WAIT's timeout argument for timeout: whole milliseconds,
// rounded up, since WAIT 0 blocks until enough replicas answer, however
// long that takes.
func waitMillis(timeout time.Duration) int64 {
	return int64((timeout + time.Millisecond - 1) / time.Millisecond)
}
