package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/file"
	"github.com/tqgo/tqgo/tq"
)

// viewCommands are the commands that only read: on a file:// directory
// another process holds, they run on a read-only view of it (mode=ro)
// rather than fail. capacity reads when given none of its own flags.
var viewCommands = map[string]bool{"partitions": true, "rows": true, "dump": true, "status": true, "dead": true, "capacity": true, "leases": true}

// globalFlagNames are the flags every command's set has (globalFlags).
var globalFlagNames = map[string]bool{"url": true, "json": true, "timeout": true}

// readsOnly reports whether cmd, its flags parsed into fs, only reads.
func readsOnly(cmd command, fs *flag.FlagSet) bool {
	if !viewCommands[cmd.name] {
		return false
	}
	ro := true
	if cmd.name == "capacity" {
		fs.Visit(func(f *flag.Flag) {
			if !globalFlagNames[f.Name] {
				ro = false // sets the capacity
			}
		})
	}
	return ro
}

// fileURL parses raw if it is a file:// URL.
func fileURL(raw string) (*url.URL, bool) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "file" {
		return nil, false
	}
	return u, true
}

// readOnlyURL reports whether raw is a file:// URL asking for a read-only
// view (mode=ro).
func readOnlyURL(raw string) bool {
	u, ok := fileURL(raw)
	if !ok {
		return false
	}
	_, o, err := file.ParseURL(u)
	return err == nil && o.ReadOnly
}

// withReadOnly is raw, a file:// URL, with mode=ro.
func withReadOnly(raw string) string {
	u, _ := fileURL(raw)
	q := u.Query()
	q.Set("mode", "ro")
	u.RawQuery = q.Encode()
	return u.String()
}

// openView opens a read-only view of the file:// URL raw and says on
// stderr that it is one and how fresh: locked, when raw's directory is
// held by another process (whose refusal names it), is nil when raw asks
// for the view itself.
func (s *session) openView(ctx context.Context, raw string, locked error) (*tq.Client, error) {
	eng, err := backends.Open(ctx, raw)
	if err != nil {
		return nil, fmt.Errorf("tq: open %q: %w", raw, err)
	}
	c, err := tq.New(eng)
	if err != nil {
		_ = eng.Log.Close()
		_ = eng.Data.Close()
		return nil, err
	}
	s.client = c
	s.closeEngine = func() error { return errors.Join(eng.Log.Close(), eng.Data.Close()) }
	v, _ := file.ViewOf(eng)
	var le *file.LockedError
	switch {
	case errors.As(locked, &le) && le.PID != 0:
		fmt.Fprintf(s.stderr, "tq: %s is in use by pid %d on host %s: a read-only view, %s (writes refused)\n", v.Dir, le.PID, le.Host, v.Freshness())
	case locked != nil:
		fmt.Fprintf(s.stderr, "tq: %s is in use by another process: a read-only view, %s (writes refused)\n", v.Dir, v.Freshness())
	default:
		fmt.Fprintf(s.stderr, "tq: %s (writes refused)\n", v)
	}
	return c, nil
}
