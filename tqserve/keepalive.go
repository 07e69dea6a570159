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

func serverKeepalive() grpc.ServerOption {
	return grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveTime / 2, PermitWithoutStream: true})
}
