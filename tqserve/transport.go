package tqserve

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// A call in flight to a server that stopped answering without closing
// its connection (a host frozen or cut off: no reset ever comes) would
// wait as long as the kernel retransmits, many minutes, and a call with
// no deadline longer. So a client pings a connection that carries calls
// and on which nothing arrived for keepaliveTime, and closes it when the
// ping is not answered within keepaliveTimeout: its calls then fail as a
// connection lost does (a write's outcome unknown, a Wait's spurious
// return). keepaliveTime is the shortest gRPC allows; the server accepts
// pings up to twice as often.
const (
	keepaliveTime    = 10 * time.Second
	keepaliveTimeout = 5 * time.Second
)

func clientKeepalive() grpc.DialOption {
	return grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout})
}

// Flow control windows are static: gRPC's default grows them by
// measuring the connection (a ping after each message received, answered
// by the peer), which for a claim's small request and reply is a ping
// each way per call, about as many frames, system calls and wake-ups as
// the call itself. Fixed windows of streamWindow per stream and
// connWindow per connection (that measure grows both up to 16 MiB) keep
// a large cell (file://, whose cells the server carries) streaming at
// full speed on a data centre's network, and a peer never holds more
// than a window of unread bytes in the other's memory.
const (
	streamWindow = 4 << 20
	connWindow   = 16 << 20
)

func clientWindows() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithStaticStreamWindowSize(streamWindow), grpc.WithStaticConnWindowSize(connWindow)}
}

func serverWindows() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.StaticStreamWindowSize(streamWindow), grpc.StaticConnWindowSize(connWindow)}
}

func serverKeepalive() grpc.ServerOption {
	return grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveTime / 2, PermitWithoutStream: true})
}
