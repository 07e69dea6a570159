// Package tqpb is the Go code protoc generates from
// ../proto/tqgo/v1/tq.proto: the messages and the gRPC stubs of the tqgo
// wire protocol (see ../PROTOCOL.md).
package tqpb

// Needs protoc (Debian: protobuf-compiler); the plugins are this module's
// tools, at the versions go.mod pins.
//go:generate sh -c "protoc --plugin=protoc-gen-go=$(go tool -n protoc-gen-go) --plugin=protoc-gen-go-grpc=$(go tool -n protoc-gen-go-grpc) -I ../proto --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative tqgo/v1/tq.proto && mv tqgo/v1/*.go . && rm -r tqgo"
