package redis_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

// TestURLRepeatedParam: a parameter given twice is an error naming it,
// whether this package reads it or go-redis does (which would take the
// last silently), before anything is dialled. A cluster's addr= seeds are
// the exception: they are a list.
func TestURLRepeatedParam(t *testing.T) {
	for _, tc := range []struct{ url, param string }{
		{"redis://127.0.0.1:1/0?prefix=a&prefix=b", "prefix"},
		{"redis://127.0.0.1:1/0?dial_timeout=1s&dial_timeout=2s", "dial_timeout"},
		{"rediss://127.0.0.1:1/0?io_depth=2&pool_size=4&io_depth=2", "io_depth"},
		{"redis+cluster://127.0.0.1:1,127.0.0.1:2/?read_timeout=1s&read_timeout=1s", "read_timeout"},
	} {
		start := time.Now()
		_, err := redis.OpenURL(t.Context(), tc.url)
		if !errors.Is(err, backends.ErrInvalid) || !strings.Contains(err.Error(), `"`+tc.param+`"`) || !strings.Contains(err.Error(), "twice") {
			t.Errorf("OpenURL(%q): %v, want ErrInvalid naming %q given twice", tc.url, err, tc.param)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("OpenURL(%q) took %v: it dialled", tc.url, d)
		}
		if _, err := tq.Open(t.Context(), tc.url); !errors.Is(err, tq.ErrInvalid) {
			t.Errorf("tq.Open(%q): %v, want ErrInvalid", tc.url, err)
		}
	}
}

// TestURLClusterAddrList: addr= may repeat on a cluster URL (seed nodes).
func TestURLClusterAddrList(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	addrs := c.Addrs()
	url := "redis+cluster://" + addrs[0] + "/?addr=" + addrs[1] + "&addr=" + addrs[2] + "&prefix=addrlist"
	s, err := redis.OpenURL(t.Context(), url)
	if err != nil {
		t.Fatalf("OpenURL(%q): %v", url, err)
	}
	s.Close()
	s.Log().Close()
}
