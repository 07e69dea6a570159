package file

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tqgo/tqgo/backends"
)

func init() {
	backends.Register("file", func(ctx context.Context, u *url.URL) (backends.Engine, error) {
		dir, o, err := ParseURL(u)
		if err != nil {
			return backends.Engine{}, err
		}
		return Open(ctx, dir, o)
	})
}

// SyncPolicy is when the engine fsyncs its log: SyncAlways, SyncNever,
// or every interval (SyncEvery). Whatever the policy, a write returns
// once its record is written to the file (in the OS's page cache), so
// that it survives the process's death (kill -9); the policy decides what
// survives the machine's (power loss, an OS crash).
type SyncPolicy time.Duration

const (
	// SyncDefault is Options' zero: DefaultSync.
	SyncDefault SyncPolicy = 0
	// SyncAlways fsyncs before a write returns; writes in flight together
	// share one fsync (group commit). Nothing acknowledged is lost to a
	// power loss.
	SyncAlways SyncPolicy = -1
	// SyncNever leaves fsyncs to the OS (and to checkpoints and Close):
	// a power loss loses what the OS had not written back, up to its
	// dirty-page expiry (30 s on Linux by default).
	SyncNever SyncPolicy = -2
	// DefaultSync is the policy of Options with none: an fsync every
	// second, in the background (Redis's appendfsync everysec).
	DefaultSync = SyncPolicy(time.Second)
)

// SyncEvery is the policy of an fsync every d (d > 0), in the background:
// a power loss loses at most about the last d of writes.
func SyncEvery(d time.Duration) SyncPolicy { return SyncPolicy(d) }

func (p SyncPolicy) String() string {
	switch {
	case p == SyncAlways:
		return "always"
	case p == SyncNever:
		return "never"
	case p == SyncDefault:
		return "default"
	case p == SyncPolicy(time.Second):
		return "everysec"
	case p > 0:
		return time.Duration(p).String()
	}
	return fmt.Sprintf("SyncPolicy(%d)", int64(p))
}

// Options configures an engine. The zero value is the defaults.
type Options struct {
	// Sync is when the log is fsynced (SyncDefault: DefaultSync).
	Sync SyncPolicy
	// CheckpointMin is the log bytes, beyond twice the live data, past
	// which the engine writes a checkpoint and drops the log before it
	// (0: 64 MiB). The directory holds at most about
	// 3 × live + CheckpointMin bytes (a checkpoint, the log after it, a
	// checkpoint being written).
	CheckpointMin int64
	// ReadOnly opens a view of the directory (URL parameter mode=ro):
	// no lock taken, so another process may hold and write the
	// directory meanwhile; the state of the newest checkpoint and the log
	// after it as of the open, read without writing, cutting, renaming,
	// removing or fsyncing anything; every write refused with ErrReadOnly.
	// See View. Sync and CheckpointMin do not apply.
	ReadOnly bool

	clock func() time.Time // entries' stamps (nil: time.Now); for tests
}

// DefaultCheckpointMin is CheckpointMin's default.
const DefaultCheckpointMin = 64 << 20

func (o Options) check() error {
	if o.Sync < SyncNever {
		return fmt.Errorf("%w: file: sync policy %d", backends.ErrInvalid, int64(o.Sync))
	}
	if o.CheckpointMin < 0 {
		return fmt.Errorf("%w: file: CheckpointMin %d < 0", backends.ErrInvalid, o.CheckpointMin)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.Sync == SyncDefault {
		o.Sync = DefaultSync
	}
	if o.CheckpointMin == 0 {
		o.CheckpointMin = DefaultCheckpointMin
	}
	if o.clock == nil {
		o.clock = time.Now
	}
	return o
}

// same reports whether o and p open the engine alike.
func (o Options) same(p Options) bool {
	o, p = o.withDefaults(), p.withDefaults()
	return o.Sync == p.Sync && o.CheckpointMin == p.CheckpointMin
}

func (o Options) String() string {
	o = o.withDefaults()
	if o.ReadOnly {
		return "mode=ro"
	}
	return fmt.Sprintf("sync=%s checkpoint=%d", o.Sync, o.CheckpointMin)
}

// ParseURL reads a file URL: the directory, and the options of its query.
//
//	file:///var/lib/tq-job            an absolute path
//	file://localhost/var/lib/tq-job   the same
//	file:tq-job, file:./a/b           a path relative to the working directory
//
// Parameters: sync=always|everysec|never|<Go duration> (default
// everysec), checkpoint=<bytes> (CheckpointMin, with an optional KiB,
// MiB or GiB suffix; default 64MiB), mode=rw|ro (default rw; ro: a
// read-only view, Options.ReadOnly). Anything else, or a parameter given
// twice, is an error matching backends.ErrInvalid.
func ParseURL(u *url.URL) (string, Options, error) {
	var o Options
	bad := func(format string, args ...any) (string, Options, error) {
		return "", Options{}, fmt.Errorf("%w: file URL: "+format, append([]any{backends.ErrInvalid}, args...)...)
	}
	var dir string
	switch {
	case u.Opaque != "":
		p, err := url.PathUnescape(u.Opaque)
		if err != nil {
			return bad("path %q: %v", u.Opaque, err)
		}
		dir = p
	case u.Host != "" && u.Host != "localhost":
		return bad("host %q: want file:///absolute/dir or file:relative/dir (a directory of this machine)", u.Host)
	default:
		dir = u.Path
	}
	if u.User != nil {
		return bad("user info: want file:///absolute/dir")
	}
	if dir == "" || dir == "/" && u.Opaque == "" && u.Path == "" {
		return bad("no directory: want file:///absolute/dir or file:relative/dir")
	}
	dir = filepath.Clean(filepath.FromSlash(dir))
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return bad("query: %v", err)
	}
	for k, vs := range q {
		if len(vs) > 1 {
			return bad("parameter %q given twice (%d values): give it once", k, len(vs))
		}
		v := vs[0]
		switch k {
		case "sync":
			switch v {
			case "always":
				o.Sync = SyncAlways
			case "never":
				o.Sync = SyncNever
			case "everysec":
				o.Sync = SyncEvery(time.Second)
			default:
				d, err := time.ParseDuration(v)
				if err != nil || d <= 0 {
					return bad("sync=%q: want always, everysec, never or a positive duration (100ms)", v)
				}
				o.Sync = SyncEvery(d)
			}
		case "checkpoint":
			n, err := parseBytes(v)
			if err != nil {
				return bad("checkpoint=%q: want a size in bytes (64MiB)", v)
			}
			o.CheckpointMin = n
		case "mode":
			switch v {
			case "rw":
			case "ro":
				o.ReadOnly = true
			default:
				return bad("mode=%q: want rw (read and write, the default) or ro (a read-only view)", v)
			}
		default:
			return bad("unknown parameter %q (have sync, checkpoint, mode)", k)
		}
	}
	return dir, o, nil
}

// parseBytes reads "4096", "64KiB", "64MiB", "1GiB" (K, M, G and KB, MB,
// GB alike: binary units).
func parseBytes(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"GIB", 1 << 30}, {"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(t), 10, 64)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return n * mult, nil
}
