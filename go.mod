module github.com/tqgo/tqgo

// go 1.26.2, not 1.26: the redis+cluster://h1:p1,h2:p2 URLs of
// backends/redis hold several host:port pairs in the host, which
// net/url.Parse rejects in Go 1.26.0 and 1.26.1 ("invalid port ... after
// host"); Go 1.26.2 limits that strict colon check to http and https URLs.
go 1.26.2

require (
	github.com/google/btree v1.1.3
	github.com/panjf2000/ants/v2 v2.12.1
	github.com/redis/go-redis/v9 v9.23.0
	github.com/tinylib/msgp v1.6.5
	go.uber.org/goleak v1.3.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/philhofer/fwd v1.2.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/mod v0.27.0 // indirect
	golang.org/x/sync v0.16.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/tools v0.36.0 // indirect
)

tool github.com/tinylib/msgp
