package redis

import "time"

// SetLogRecheck sets the longest round of a waiting Log.Read, and returns
// a function restoring it.
func SetLogRecheck(d time.Duration) (restore func()) {
	old := logRecheck
	logRecheck = d
	return func() { logRecheck = old }
}
