package redis_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/internal/redisserver"
	"github.com/tqgo/tqgo/internal/redistest"
)

// TestDirectAuthDB: Read's direct connections authenticate and select
// the database as the client's do (a key in database 2 is found there
// only), and a password the server refuses is ErrAuth naming the address.
func TestDirectAuthDB(t *testing.T) {
	srv := redistest.Start(t, redisserver.Options{Password: "sesame"})
	ctx := t.Context()
	url := strings.TrimSuffix(srv.URL(), "/0") + "/2?prefix=auth"
	s := open(t, url)
	keys := []string{"a", "b"}
	vals := [][]byte{[]byte("head+body"), []byte("other length")}
	if err := putVals(ctx, s, keys, vals); err != nil {
		t.Fatal(err)
	}
	dst := []backends.ReadCell{
		{Key: keys[0], Head: make([]byte, 5), Body: make([]byte, 4)},
		{Key: keys[1], Head: make([]byte, 5), Body: make([]byte, 4)},
	}
	if err := s.Read(ctx, dst); err != nil {
		t.Fatal(err)
	}
	if !dst[0].Found || string(dst[0].Head)+string(dst[0].Body) != "head+body" || !dst[1].Found || !bytes.Equal(dst[1].Value, vals[1]) {
		t.Fatalf("Read in database 2: %+v", dst)
	}
	db0 := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), Password: "sesame"})
	defer db0.Close()
	if n, err := db0.Exists(ctx, "auth:d:a").Result(); err != nil || n != 0 {
		t.Fatalf("key written to database 2 is in database 0: %d, %v", n, err)
	}

	bad, err := redis.New(goredis.NewClient(&goredis.Options{Addr: srv.Addr(), Password: "wrong", DB: 2}), redis.WithPrefix("auth"))
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Client().Close()
	err = bad.Read(ctx, dst[:1])
	if !errors.Is(err, redis.ErrAuth) || !strings.Contains(err.Error(), srv.Addr()) {
		t.Fatalf("Read with a wrong password: %v, want ErrAuth naming %s", err, srv.Addr())
	}
}

// TestDirectConnectionsBounded: Read and Write from many goroutines
// share their share of pool_size, which with go-redis's pool is at most
// pool_size connections, and all succeed.
func TestDirectConnectionsBounded(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	s := open(t, srv.URL()+"?prefix=bound&pool_size=2")
	watch := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer watch.Close()
	base, err := watch.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	before := strings.Count(base, "\n")

	var most atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Microsecond):
			}
			if l, err := watch.ClientList(ctx).Result(); err == nil {
				if n := int64(strings.Count(l, "\n") - before); n > most.Load() {
					most.Store(n)
				}
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			keys := []string{fmt.Sprintf("w%d/a", w), fmt.Sprintf("w%d/b", w)}
			head, body := []byte("h"), bytes.Repeat([]byte{byte(w)}, 64<<10)
			for range 20 {
				if err := s.Write(ctx, []backends.Cell{{Key: keys[0], Head: head, Body: body}, {Key: keys[1], Head: head, Body: body}}); err != nil {
					errs <- err
					return
				}
				dst := []backends.ReadCell{{Key: keys[0], Head: make([]byte, 1), Body: make([]byte, len(body))}, {Key: keys[1], Head: make([]byte, 1), Body: make([]byte, len(body))}}
				if err := s.Read(ctx, dst); err != nil || !bytes.Equal(dst[1].Body, body) {
					errs <- fmt.Errorf("Read: %v, body equal %t", err, bytes.Equal(dst[1].Body, body))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-sampled
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// The direct connection (1) and go-redis's pool (1), at most.
	if got := most.Load(); got > 2 {
		t.Errorf("up to %d connections while 16 goroutines read and wrote, want at most 2 with pool_size=2", got)
	}
}

// TestMetaAfterStoreClose: the direct connections serve the data and
// the metadata side, so closing the Store leaves its Meta working until it
// is closed too.
func TestMetaAfterStoreClose(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	s, err := redis.OpenURL(ctx, srv.URL()+"?prefix=half")
	if err != nil {
		t.Fatal(err)
	}
	m := metaOf(s)
	res, err := m.Prepare(ctx, "p", []string{"a"}, []string{"f"}, nil) // the connections exist now
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	cells := []backends.Cell{{Key: backends.StorageKey(res[0].Index, "f", res[0].Gens["f"]), Body: []byte("v")}}
	if _, err := colo(m).WriteCommit(ctx, "p", cells, fieldUpdate([]string{"a"}, res, "f")); err != nil {
		t.Fatalf("WriteCommit after Store.Close, Meta open: %v", err)
	}
	rows, err := colo(m).ReadRows(ctx, "p", []string{"a"}, func(rows []*metadata.Row) ([]backends.ReadCell, error) {
		return []backends.ReadCell{{Key: cells[0].Key, Body: make([]byte, 1)}}, nil
	})
	if err != nil || len(rows) != 1 || rows[0] == nil {
		t.Fatalf("ReadRows after Store.Close, Meta open: %v, %v", rows, err)
	}
	if _, err := m.Prepare(ctx, "p", []string{"a", "b"}, []string{"g"}, nil); err != nil {
		t.Fatalf("Prepare after Store.Close, Meta open: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Prepare(ctx, "p", []string{"c"}, nil, nil); !errors.Is(err, backends.ErrClosed) {
		t.Fatalf("Prepare after both closed: %v, want ErrClosed", err)
	}
}
