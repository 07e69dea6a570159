package yuanrong

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"

	"github.com/tqgo/tqgo/backends"
)

func init() {
	backends.Register("yuanrong", openURL)
}

// openURL opens a "yuanrong" URL as a backends.Engine.
//
// "yuanrong://" (no host, no path) is a Backend over a fresh Local: its
// data lives in this process alone, so the engine is Local and tq keeps
// the metadata in process too, as TransferQueue keeps it in its
// controller. The query parameters put_keys_limit and get_clear_keys_limit
// set the key limits.
//
// A URL with a host or path names a real datasystem, which every process
// that dials it shares: its data needs a MetaStore those processes share
// as well, which the datasystem cannot provide (it has no atomic
// index allocation or commit), and its client needs an SDK binding this
// build does not have. Such a URL fails with an error matching both
// ErrInvalid (backends.ErrInvalid) and ErrNoSDK, which says to build the
// engine by hand: tq.New(backends.Engine{Data: yuanrong.NewBackend(ds),
// Meta: <shared MetaStore>}).
func openURL(_ context.Context, u *url.URL) (backends.Engine, error) {
	if u.Host != "" || u.Opaque != "" || (u.Path != "" && u.Path != "/") {
		return backends.Engine{}, fmt.Errorf("%w: %w: %q names a datasystem other processes share: build a DataSystem over its SDK (see yuanrong/README.md) and pair it with a MetaStore they all share, tq.New(backends.Engine{Data: yuanrong.NewBackend(ds), Meta: <shared MetaStore>})", ErrInvalid, ErrNoSDK, u.Redacted())
	}
	var opts []Option
	q := u.Query()
	for _, name := range slices.Sorted(maps.Keys(q)) {
		vals := q[name]
		if len(vals) > 1 {
			return backends.Engine{}, invalidf("URL parameter %q given twice (%d values): give it once", name, len(vals))
		}
		n, err := strconv.Atoi(vals[0])
		if err != nil {
			return backends.Engine{}, invalidf("%s=%q: %v", name, vals[0], err)
		}
		switch name {
		case "put_keys_limit":
			opts = append(opts, WithPutKeysLimit(n))
		case "get_clear_keys_limit":
			opts = append(opts, WithGetClearKeysLimit(n))
		default:
			return backends.Engine{}, invalidf("unknown URL parameter %q (want put_keys_limit or get_clear_keys_limit)", name)
		}
	}
	b, err := NewBackend(NewLocal(), opts...)
	if err != nil {
		return backends.Engine{}, err
	}
	return backends.Engine{Data: b, Local: true}, nil
}
