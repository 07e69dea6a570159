package redis

import (
	"context"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
)

// logRecheck is the longest a waiting Read's XREAD blocks: one round. It
// bounds how late a waiting Read learns that the log was deleted and
// begun anew under it, or lost its end in a failover (no entry numbered
// past the reader's position comes then, which is what wakes an XREAD),
// how often an idle waiting Read sends a request, and how long a round's
// connection stays held after the Read's context ended.
var logRecheck = time.Second

// wait is Read's wait for an entry after from, the read having found
// none: rounds of a pipeline on the wait client of XREAD BLOCK from from
// and the read script, which the server runs once the XREAD returns (an
// entry came, or the round's time passed), so that the entries come with
// the wake-up, read atomically and checked against from.
func (l *Log) wait(ctx context.Context, partition string, from backends.Pos, wait time.Duration) (backends.Tail, error) {
	end := time.Now().Add(wait)
	for {
		if err := l.check(ctx); err != nil {
			return backends.Tail{}, err
		}
		left := time.Until(end)
		if dl, ok := ctx.Deadline(); ok {
			left = min(left, time.Until(dl))
		}
		if left < time.Millisecond {
			// XREAD BLOCK counts milliseconds, and BLOCK 0 is forever.
			if err := ctx.Err(); err != nil {
				return backends.Tail{}, err
			}
			// Its rounds read the log up to from: the next waiting Read
			// from there need not read before it blocks.
			l.setEnd(partition, from)
			return backends.Tail{}, nil
		}
		t, err := l.waitRound(ctx, partition, from, min(left, logRecheck))
		if err != nil || t.Restart || len(t.Entries) > 0 {
			return t, err
		}
	}
}

// waitClient returns the Log's client for blocking reads, made at the
// first, and counts a round on the Log's wait group; ErrClosed once the
// Log is closed.
func (l *Log) waitClient() (goredis.UniversalClient, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() {
		return nil, backends.ErrClosed
	}
	if l.waits == nil {
		l.waits, l.ownWaits = waitClient(l.s.client, l.s.opts.hooks, logRecheck)
		if l.ownWaits {
			l.waits.AddHook(roundTripHook{l.s})
		}
	}
	l.wg.Add(1)
	return l.waits, nil
}

// waitRound is one round of wait: a pipeline of XREAD BLOCK block (COUNT
// 1: it only wakes the round) and the read script, on a goroutine, so
// that the Read returns at once when ctx ends or the Log closes; the
// goroutine ends with the XREAD (at once when the Log closes, which
// closes the wait client).
func (l *Log) waitRound(ctx context.Context, partition string, from backends.Pos, block time.Duration) (backends.Tail, error) {
	client, err := l.waitClient()
	if err != nil {
		return backends.Tail{}, err
	}
	keys := l.logKeys(partition)
	fn, fid := posArgs(from)
	block = block.Truncate(time.Millisecond)
	type result struct {
		reply []any
		err   error
	}
	done := make(chan result, 1)
	go func() {
		defer l.wg.Done()
		var ev *goredis.Cmd
		_, _ = client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			p.XRead(ctx, &goredis.XReadArgs{Streams: []string{keys[0], fn + "-0"}, Count: 1, Block: block})
			ev = p.EvalSha(ctx, logReadScript.Hash(), keys, fn, fid)
			return nil
		})
		reply, err := ev.Slice()
		if err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
			reply, err = logReadScript.Run(ctx, client, keys, fn, fid).Slice()
		}
		done <- result{reply, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			if l.closed.Load() {
				return backends.Tail{}, backends.ErrClosed
			}
			return backends.Tail{}, l.s.wrap(ctx, "read", r.err)
		}
		t, err := tailReply(r.reply, from)
		if err != nil {
			return backends.Tail{}, l.s.wrap(ctx, "read", err)
		}
		if len(t.Entries) > 0 || t.Restart {
			l.setEnd(partition, t.End(from))
		}
		return t, nil
	case <-ctx.Done():
		return backends.Tail{}, ctx.Err()
	case <-l.done:
		return backends.Tail{}, backends.ErrClosed
	}
}
