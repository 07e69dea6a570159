package tqserve

import (
	"context"
	"fmt"
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
	got := time.Now()
	return info, time.Unix(0, info.GetNow().GetUnixNs()).Sub(sent.Add(got.Sub(sent) / 2)), nil
}
