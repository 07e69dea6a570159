package redis

import (
	"context"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
)

var (
	_ backends.Owners       = (*Log)(nil)
	_ backends.CompactTurns = (*Log)(nil)
)

// ownLua: KEYS[1] the owner key; ARGV holder, ttl in ms, takeover prefix.
// Returns {owner, ms left}.
var ownScript = goredis.NewScript(ownLua)

const ownLua = `
local cur = redis.call('GET', KEYS[1])
if (not cur) or cur == ARGV[1] or (ARGV[3] ~= '' and string.sub(cur, 1, #ARGV[3]) == ARGV[3]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {ARGV[1], tonumber(ARGV[2])}
end
return {cur, redis.call('PTTL', KEYS[1])}
`

var disownScript = goredis.NewScript(disownLua)

const disownLua = `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`

// ownerKey is the key naming partition's owner, in its log's slot.
func (l *Log) ownerKey(partition string) string { return l.s.partBase(partition) + ":owner" }

// compactorKey is the key naming the holder of partition's compaction
// turn, in its log's slot.
func (l *Log) compactorKey(partition string) string { return l.s.partBase(partition) + ":compactor" }

// CompactTurn implements backends.CompactTurns with the owner's script
// on the compactor key (see LAYOUT.md): set with an expiry when free or
// the caller's.
func (l *Log) CompactTurn(ctx context.Context, partition, holder string, ttl time.Duration) (bool, error) {
	ctx = l.s.traced(ctx)
	if err := l.check(ctx); err != nil {
		return false, err
	}
	if holder == "" || ttl < time.Millisecond {
		return false, fmt.Errorf("%w: compaction turn of partition %q: holder %q, ttl %v (at least 1ms)", backends.ErrInvalid, partition, holder, ttl)
	}
	r, err := ownScript.Run(ctx, l.s.client, []string{l.compactorKey(partition)}, holder, ttl.Milliseconds(), "").Slice()
	if err != nil {
		return false, l.s.wrap(ctx, "compaction turn", err)
	}
	if len(r) != 2 {
		return false, fmt.Errorf("compaction turn of partition %q: reply of %d values", partition, len(r))
	}
	got, _ := r[0].(string)
	return got == holder, nil
}

// Own implements backends.Owners with one script: the owner key (see
// LAYOUT.md) set with an expiry when free, the caller's or a former
// life's.
func (l *Log) Own(ctx context.Context, partition, holder, takeover string, ttl time.Duration) (string, time.Duration, error) {
	ctx = l.s.traced(ctx)
	if err := l.check(ctx); err != nil {
		return "", 0, err
	}
	if holder == "" || ttl < time.Millisecond {
		return "", 0, fmt.Errorf("%w: own partition %q: holder %q, ttl %v (at least 1ms)", backends.ErrInvalid, partition, holder, ttl)
	}
	r, err := ownScript.Run(ctx, l.s.client, []string{l.ownerKey(partition)}, holder, ttl.Milliseconds(), takeover).Slice()
	if err != nil {
		return "", 0, l.s.wrap(ctx, "own", err)
	}
	if len(r) != 2 {
		return "", 0, fmt.Errorf("own partition %q: reply of %d values", partition, len(r))
	}
	owner, _ := r[0].(string)
	ms, _ := r[1].(int64)
	return owner, time.Duration(ms) * time.Millisecond, nil
}

// Disown implements backends.Owners.
func (l *Log) Disown(ctx context.Context, partition, holder string) error {
	ctx = l.s.traced(ctx)
	if err := l.check(ctx); err != nil {
		return err
	}
	if err := disownScript.Run(ctx, l.s.client, []string{l.ownerKey(partition)}, holder).Err(); err != nil {
		return l.s.wrap(ctx, "disown", err)
	}
	return nil
}
