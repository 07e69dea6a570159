package redis_test

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/internal/redistest"
)

// TestReadPipelinedRounds: a read of many rounds, each requested up to
// io_depth rounds ahead on one connection, puts every value where it
// belongs, values of other lengths and missing keys included, at every
// depth; and it takes one connection of the engine's, whatever the depth.
func TestReadPipelinedRounds(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	watch := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer watch.Close()
	const n, size = 300, 1000
	keys := make([]string, n)
	vals := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%03d", i)
		vals[i] = bytes.Repeat([]byte{byte(i)}, size)
		if i%17 == 5 {
			vals[i] = vals[i][:size/2] // another length: read into Other
		}
	}
	for _, depth := range []int{1, 2, 3, 8} {
		t.Run(fmt.Sprintf("depth %d", depth), func(t *testing.T) {
			var (
				rounds  int
				counted bool  // hooks count MGETs from now on
				base    int64 // MGETs the server ran before the read
				window  []int64
			)
			prefix := fmt.Sprintf("pipe%d", depth)
			// 4 KiB rounds of 1000-byte values: 75 rounds.
			s := open(t, fmt.Sprintf("%s?prefix=%s&read_round_bytes=4096&io_depth=%d", srv.URL(), prefix, depth),
				redis.WithRoundHook(func(op string) {
					if op != "get" {
						return
					}
					rounds++
					if counted {
						// MGETs the server has run, beyond the rounds read.
						window = append(window, mgetCalls(t, watch)-base-int64(rounds))
					}
				}))
			var present []string
			var presentVals [][]byte
			for i := range keys {
				if i%23 != 7 { // missing
					present, presentVals = append(present, keys[i]), append(presentVals, vals[i])
				}
			}
			if err := putVals(ctx, s, present, presentVals); err != nil {
				t.Fatal(err)
			}
			before, err := watch.ClientList(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			base, counted = mgetCalls(t, watch), true
			dst := make([]backends.ReadCell, n)
			for i := range dst {
				dst[i] = backends.ReadCell{Key: keys[i], Head: make([]byte, 10), Body: make([]byte, size-10)}
			}
			if err := s.Read(ctx, dst); err != nil {
				t.Fatal(err)
			}
			counted = false
			if rounds < 50 {
				t.Errorf("%d rounds, want the read cut into many", rounds)
			}
			// Once a round is read, the server has run at most depth-1
			// more (never more requested); after the first, which went
			// out in one write with the next depth-1, exactly that many.
			if window[0] != int64(depth-1) {
				t.Errorf("after the first round the server had run %d more MGETs, want %d", window[0], depth-1)
			}
			for i, w := range window {
				if w > int64(depth-1) {
					t.Fatalf("after round %d the server had run %d more MGETs, want at most %d", i, w, depth-1)
				}
			}
			for i, d := range dst {
				switch {
				case i%23 == 7:
					if d.Found {
						t.Fatalf("missing key %s found", keys[i])
					}
				case len(vals[i]) != size:
					if !d.Found || !bytes.Equal(d.Value, vals[i]) {
						t.Fatalf("key %s of another length: found %v, Other %d bytes", keys[i], d.Found, len(d.Value))
					}
				default:
					if !d.Found || d.Value != nil || !bytes.Equal(append(d.Head, d.Body...), vals[i]) {
						t.Fatalf("key %s read wrong", keys[i])
					}
				}
			}
			after, err := watch.ClientList(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			// Put and Read share the engine's one idle connection.
			if grew := strings.Count(after, "\n") - strings.Count(before, "\n"); grew > 0 {
				t.Errorf("Read opened %d connections, want none beyond the one Put left idle", grew)
			}
		})
	}
}

// mgetCalls is how many MGETs the server has run (INFO commandstats).
func mgetCalls(t *testing.T, c *goredis.Client) int64 {
	info, err := c.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_mget:calls="); ok {
			n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	return 0
}
