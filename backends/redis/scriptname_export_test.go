package redis

import (
	"context"

	goredis "github.com/redis/go-redis/v9"
)

// ScriptName names the metadata script whose SHA1 is sha ("append",
// "read", "fence", "alloc", "log-append", "log-read", "log-compact"), or
// returns "", so that a test's proxy can tell
// which script an EVALSHA runs.
func ScriptName(sha string) string {
	switch sha {
	case appendScript.Hash():
		return "append"
	case readScript.Hash():
		return "read"
	case fenceScript.Hash():
		return "fence"
	case allocScript.Hash():
		return "alloc"
	case logAppendScript.Hash():
		return "log-append"
	case logReadScript.Hash():
		return "log-read"
	case logCompactScript.Hash():
		return "log-compact"
	}
	return ""
}

// LoadScripts loads every metadata script into c's script cache, as a
// server restarted on its files has none.
func LoadScripts(ctx context.Context, c goredis.Scripter) error {
	for _, s := range []*goredis.Script{appendScript, readScript, fenceScript, allocScript} {
		if err := s.Load(ctx, c).Err(); err != nil {
			return err
		}
	}
	return nil
}
