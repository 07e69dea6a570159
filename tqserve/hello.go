package tqserve

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/tqserve/tqpb"
)

// openWait bounds how long opening a client waits for its server when
// the caller's context sets no deadline: as long as tq's default retry
// rides out a restart.
var openWait = time.Minute

// hello waits until the server at host answers (a server may start after
// its clients), as long as ctx allows or openWait when ctx sets no
// deadline, then asks its clock with a call of its own, so that the wait
// does not count in the round trip the clock difference is taken from.
// It returns the server's Info and its clock minus this process's.
func hello(ctx context.Context, c tqpb.MetaClient, host string) (*tqpb.InfoReply, time.Duration, error) {
	wctx := ctx
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, openWait)
		defer cancel()
	}
	if _, err := c.Info(wctx, &tqpb.InfoRequest{}, grpc.WaitForReady(true)); err != nil {
		st := status.Convert(err)
		switch {
		case ctx.Err() != nil:
			return nil, 0, fmt.Errorf("tq server %s: no answer before the context ended (%s): %w", host, st.Message(), ctx.Err())
		case wctx.Err() != nil:
			return nil, 0, fmt.Errorf("tq server %s: no answer within %v (%s): %w", host, openWait, st.Message(), backends.ErrUnavailable)
		case st.Code() == codes.Unavailable:
			return nil, 0, fmt.Errorf("tq server %s: %s: %w", host, st.Message(), backends.ErrUnavailable)
		}
		return nil, 0, fromStatus(ctx, "info", read, 0, err)
	}
	sent := time.Now()
	info, err := c.Info(ctx, &tqpb.InfoRequest{})
	if err != nil {
		return nil, 0, fromStatus(ctx, "info", read, 0, err)
	}
	// The server's clock minus this process's, taken at the middle of the
	// round trip: times travel by the server's clock.
	return info, skewOf(info, sent, time.Now()), nil
}

// skewOf is the server's clock less this process's, by an Info sent at
// sent and answered at got, taken at the middle of the round trip.
func skewOf(info *tqpb.InfoReply, sent, got time.Time) time.Duration {
	return time.Unix(0, info.GetNow().GetUnixNs()).Sub(sent.Add(got.Sub(sent) / 2))
}

// skewEvery is how often a client takes its server's clock again (nanoseconds):
// a clock moves (drift, an NTP step), and the server a client reaches
// may change (a restart on another host).
var skewEvery atomic.Int64

func init() { skewEvery.Store(int64(time.Minute)) }

// skewFor bounds one taking of the server's clock.
const skewFor = 5 * time.Second

// clock returns the server's clock less this process's, as last taken,
// and takes it again in the background when that was skewEvery ago or
// more, or the server could not be reached since.
func (m *Meta) clock() time.Duration {
	if time.Since(time.Unix(0, m.skewAt.Load())) >= time.Duration(skewEvery.Load()) && m.skewing.CompareAndSwap(false, true) {
		m.bgMu.Lock()
		if m.closed.Load() {
			m.bgMu.Unlock()
			m.skewing.Store(false)
		} else {
			m.bg.Add(1)
			m.bgMu.Unlock()
			go m.retakeSkew()
		}
	}
	return time.Duration(m.skew.Load())
}

// retakeSkew asks the server's clock; a failure leaves the skew as it
// was, to be taken again at the next call.
func (m *Meta) retakeSkew() {
	defer m.bg.Done()
	defer m.skewing.Store(false)
	ctx, cancel := context.WithTimeout(m.life, skewFor)
	defer cancel()
	sent := time.Now()
	info, err := m.c.Info(ctx, &tqpb.InfoRequest{})
	if err != nil {
		return
	}
	got := time.Now()
	m.skew.Store(int64(skewOf(info, sent, got)))
	m.skewAt.Store(got.UnixNano())
	m.version.Store(int64(info.GetVersion()))
}

// setSkew records the skew taken at open.
func (m *Meta) setSkew(skew time.Duration) {
	m.skew.Store(int64(skew))
	m.skewAt.Store(time.Now().UnixNano())
}
