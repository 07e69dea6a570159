package redis

import (
	"bufio"
	"errors"
	"strings"
	"testing"
)

// TestExecReplies: how the replies of MULTI, queued commands and EXEC are
// read: applied, aborted by WATCH (errMoved), refused at queue time
// (EXECABORT, the queue-time error returned), an error inside EXEC's
// reply (returned, the rest read), and a broken stream.
func TestExecReplies(t *testing.T) {
	conn := func(s string) *rawConn { return &rawConn{br: bufio.NewReader(strings.NewReader(s))} }
	for _, tc := range []struct {
		name, replies string
		queued        int
		want          string // "" for success; errMoved; or text the error holds
	}{
		{"applied", "+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n:5\r\n+OK\r\n", 2, ""},
		{"applied with a bulk reply", "+OK\r\n+QUEUED\r\n*1\r\n$3\r\nabc\r\n", 1, ""},
		{"watched key changed", "+OK\r\n+QUEUED\r\n+QUEUED\r\n*-1\r\n", 2, "moved"},
		{"refused at queue time", "+OK\r\n-OOM command not allowed\r\n+QUEUED\r\n-EXECABORT Transaction discarded\r\n", 2, "OOM"},
		{"error inside", "+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n-WRONGTYPE wrong kind\r\n+OK\r\n", 2, "WRONGTYPE"},
		{"stream cut", "+OK\r\n+QUEUED\r\n", 2, "EOF"},
		{"not a transaction", "+OK\r\n:1\r\n*1\r\n+OK\r\n", 1, "want +QUEUED"},
	} {
		err := conn(tc.replies).exec(tc.queued)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want success", tc.name, err)
		case tc.want == "moved" && !errors.Is(err, errMoved):
			t.Errorf("%s: %v, want errMoved", tc.name, err)
		case tc.want != "" && tc.want != "moved" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error holding %q", tc.name, err, tc.want)
		}
	}
}
