module github.com/tqgo/tqgo/bench

go 1.26.2 // the root module's floor: see ../go.mod

require (
	github.com/redis/go-redis/v9 v9.23.0
	github.com/tqgo/tqgo v0.0.0-00010101000000-000000000000
	github.com/tqgo/tqgo/tqserve v0.0.0-00010101000000-000000000000
	gonum.org/v1/plot v0.17.0
	google.golang.org/grpc v1.85.0
)

require (
	github.com/google/btree v1.1.3 // indirect
	golang.org/x/net v0.60.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

require (
	codeberg.org/go-fonts/liberation v0.5.0 // indirect
	codeberg.org/go-latex/latex v0.2.0 // indirect
	codeberg.org/go-pdf/fpdf v0.11.1 // indirect
	git.sr.ht/~sbinet/gg v0.7.0 // indirect
	github.com/ajstarks/svgo v0.0.0-20211024235047-1546f124cd8b // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/golang/freetype v0.0.0-20170609003504-e2365dfdc4a0 // indirect
	github.com/panjf2000/ants/v2 v2.12.1 // indirect
	github.com/philhofer/fwd v1.2.0 // indirect
	github.com/tinylib/msgp v1.6.5 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/image v0.30.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)

replace github.com/tqgo/tqgo => ../

replace github.com/tqgo/tqgo/tqserve => ../tqserve
