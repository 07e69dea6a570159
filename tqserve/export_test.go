package tqserve

import (
	"net"
	"slices"
	"time"

	"google.golang.org/grpc"

	"github.com/tqgo/tqgo/tqserve/tqpb"
)

// ServeWithoutCalls serves s's calls on lis as a server of protocol
// version 3 did: no Calls stream. stop ends it.
func ServeWithoutCalls(s *Server, lis net.Listener) (stop func()) {
	desc := tqpb.Meta_ServiceDesc
	desc.Streams = nil
	g := grpc.NewServer(grpc.UnaryInterceptor(s.intercept))
	g.RegisterService(&desc, s)
	tqpb.RegisterCellsServer(g, &s.cells)
	done := make(chan struct{})
	go func() { _ = g.Serve(lis); close(done) }()
	return func() { g.Stop(); <-done }
}

// Kill stops s as SIGKILL would: its ownerships are left to end.
func Kill(s *Server) error { return s.kill() }

// Owned lists the partitions s owns now.
func Owned(s *Server) []string {
	o := s.ownership()
	if o == nil {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for p, own := range o.owned {
		if time.Until(own.until) > 0 {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// Skew is m's estimate of its server's clock less this process's, as a
// call converting times takes it.
func Skew(m *Meta) time.Duration { return m.clock() }

// SetSkewEvery sets how often a client takes its server's clock again,
// and returns a function restoring the former period.
func SetSkewEvery(d time.Duration) (restore func()) {
	old := skewEvery.Swap(int64(d))
	return func() { skewEvery.Store(old) }
}

// Sweeping is how many sweeps of s's cleared or unreferenced cells are
// taken and not yet done (deleted and reported).
func Sweeping(s *Server) int64 { return s.sweep.pending.Load() }
