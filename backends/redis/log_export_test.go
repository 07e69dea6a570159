package redis

import "time"

// SetLogRecheck sets the longest round of a waiting Log.Read, and returns
// a function restoring it.
func SetLogRecheck(d time.Duration) (restore func()) {
	old := logRecheck
	logRecheck = d
	return func() { logRecheck = old }
}

// LogScripts are the Lua sources of the log's scripts, by the names
// LAYOUT.md section 9 gives their blocks.
func LogScripts() map[string]string {
	return map[string]string{
		"log-script:append":  logAppendLua,
		"log-script:read":    logReadLua,
		"log-script:compact": logCompactLua,
		"log-script:own":     ownLua,
		"log-script:disown":  disownLua,
	}
}
