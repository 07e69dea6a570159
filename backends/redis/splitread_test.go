package redis_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/internal/redisserver"
	"github.com/tqgo/tqgo/internal/redistest"
)

// TestSplitReadAuthDB: GetSplit's own connections authenticate and select
// the database as the client's do (a key in database 2 is found there
// only), and a password the server refuses is ErrAuth naming the address.
func TestSplitReadAuthDB(t *testing.T) {
	srv := redistest.Start(t, redisserver.Options{Password: "sesame"})
	ctx := t.Context()
	url := strings.TrimSuffix(srv.URL(), "/0") + "/2?prefix=auth"
	s := open(t, url)
	keys := []string{"a", "b"}
	vals := [][]byte{[]byte("head+body"), []byte("other length")}
	if err := s.Put(ctx, keys, vals); err != nil {
		t.Fatal(err)
	}
	dst := []backends.SplitValue{
		{Head: make([]byte, 5), Body: make([]byte, 4)},
		{Head: make([]byte, 5), Body: make([]byte, 4)},
	}
	if err := s.GetSplit(ctx, keys, dst); err != nil {
		t.Fatal(err)
	}
	if !dst[0].Found || string(dst[0].Head)+string(dst[0].Body) != "head+body" || !dst[1].Found || !bytes.Equal(dst[1].Other, vals[1]) {
		t.Fatalf("GetSplit in database 2: %+v", dst)
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
	err = bad.GetSplit(ctx, keys[:1], dst[:1])
	if !errors.Is(err, redis.ErrAuth) || !strings.Contains(err.Error(), srv.Addr()) {
		t.Fatalf("GetSplit with a wrong password: %v, want ErrAuth naming %s", err, srv.Addr())
	}
}
