package tqserve_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/tqserve/tqpb"
)

// liar is a server of another protocol version, or none: every reply
// breaks the protocol (a position out of range, a tag value of no kind,
// fewer results than asked for).
type liar struct{ tqpb.UnimplementedMetaServer }

var noKind = &tqpb.TagMap{Values: map[string]*tqpb.TagValue{"g": {}}}

func (liar) Info(context.Context, *tqpb.InfoRequest) (*tqpb.InfoReply, error) {
	return &tqpb.InfoReply{Version: 1, Now: &tqpb.Moment{UnixNs: time.Now().UnixNano()}}, nil
}

func (liar) Prepare(context.Context, *tqpb.PrepareRequest) (*tqpb.PrepareReply, error) {
	return &tqpb.PrepareReply{}, nil
}

func (liar) Lookup(context.Context, *tqpb.KeysRequest) (*tqpb.LookupReply, error) {
	return &tqpb.LookupReply{}, nil
}

func (liar) List(context.Context, *tqpb.PartitionRequest) (*tqpb.RowsReply, error) {
	return &tqpb.RowsReply{Rows: []*tqpb.Row{{Key: "a", Tag: noKind}}}, nil
}

func (liar) Delete(context.Context, *tqpb.KeysRequest) (*tqpb.RowsReply, error) {
	return &tqpb.RowsReply{Rows: []*tqpb.Row{{Key: "a", Tag: noKind}}}, nil
}

func (liar) Claim(context.Context, *tqpb.ClaimRequest) (*tqpb.ClaimReply, error) {
	return &tqpb.ClaimReply{Lease: "L", Rows: []*tqpb.Row{{Key: "a", Index: 1}}, Units: []*tqpb.Positions{{Positions: []int64{5}}}}, nil
}

func (liar) Settle(context.Context, *tqpb.SettleRequest) (*tqpb.SettleReply, error) {
	return &tqpb.SettleReply{Cleared: []*tqpb.Row{{Key: "a", Tag: noKind}}}, nil
}

// A reply that breaks the protocol fails the call with an error saying
// so and naming the call; a write's (which the server may have applied,
// and did) matches ErrOutcomeUnknown as well, never claiming that nothing
// applied; a Prepare's does not (what it reserved stays invisible: the
// MetaStore contract).
func TestMalformedReply(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	tqpb.RegisterMetaServer(gs, liar{})
	done := make(chan error, 1)
	go func() { done <- gs.Serve(lis) }()
	t.Cleanup(func() {
		gs.Stop()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	m := openMeta(t, "tq://"+lis.Addr().String())
	ctx := callCtx(t)
	for _, c := range []struct {
		op    string
		write bool
		call  func() error
	}{
		{"prepare", false, func() error { _, err := m.Prepare(ctx, "p", []string{"a"}, []string{"x"}, nil); return err }},
		{"lookup", false, func() error { _, err := m.Lookup(ctx, "p", []string{"a"}); return err }},
		{"list", false, func() error { _, err := m.List(ctx, "p"); return err }},
		{"delete", true, func() error { _, err := m.Delete(ctx, "p", []string{"a"}); return err }},
		{"claim", true, func() error { _, err := m.Claim(ctx, "p", claimReq("t"), nil); return err }},
		{"settle", true, func() error {
			_, err := m.Settle(ctx, "p", metadata.SettleRequest{Task: "t", Op: metadata.Ack, Lease: "L", Indexes: []uint64{1}})
			return err
		}},
	} {
		err := c.call()
		switch {
		case err == nil:
			t.Errorf("%s: a malformed reply taken for a good one", c.op)
		case !strings.Contains(err.Error(), "malformed reply") || !strings.Contains(err.Error(), c.op):
			t.Errorf("%s: %v, want an error saying the reply to %s is malformed", c.op, err, c.op)
		case errors.Is(err, backends.ErrOutcomeUnknown) != c.write:
			t.Errorf("%s: %v: outcome unknown %v, want %v", c.op, err, !c.write, c.write)
		}
	}
}
