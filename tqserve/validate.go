package tqserve

import (
	"context"

	"google.golang.org/grpc"

	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/tqserve/tqpb"
)

// The checks of a request a tq client would never send, made before the
// engine sees it: a server answers clients it does not know (another
// version, or no tq client at all), and an engine's MetaStore trusts its
// caller (tq) to have checked names and keys. The rules are tq's: a name
// of a partition is 1 to 255 bytes of [A-Za-z0-9_.:/-], a field's 1 to
// 200; the keys of a write are not empty, and a call names each key and
// field once. Each fails with InvalidArgument, changing nothing.

const (
	maxPartitionName = metadata.MaxPartitionName
	maxFieldName     = metadata.MaxFieldName
)

func checkFields(partition string, fields []string) error {
	seen := make(map[string]bool, len(fields))
	for _, f := range fields {
		if !metadata.ValidName(f, maxFieldName) {
			return invalidf("partition %q: field name %q (want 1-%d bytes of [A-Za-z0-9_.:/-])", partition, f, maxFieldName)
		}
		if seen[f] {
			return invalidf("partition %q: field %q named twice", partition, f)
		}
		seen[f] = true
	}
	return nil
}

func checkKeys(partition string, keys []string) error {
	seen := make(map[string]bool, len(keys))
	for i, k := range keys {
		if k == "" {
			return invalidf("partition %q: key %d is empty", partition, i)
		}
		if seen[k] {
			return invalidf("partition %q: key %q named twice", partition, k)
		}
		seen[k] = true
	}
	return nil
}

// checkRequest reports what is malformed in a Meta request.
func checkRequest(req any) error {
	p, ok := req.(interface{ GetPartition() string })
	if !ok {
		return nil // not a Meta request of a partition (Info, Partitions, Cells)
	}
	partition := p.GetPartition()
	if !metadata.ValidName(partition, maxPartitionName) {
		return invalidf("partition name %q (want 1-%d bytes of [A-Za-z0-9_.:/-])", partition, maxPartitionName)
	}
	switch r := req.(type) {
	case *tqpb.PrepareRequest:
		if err := checkKeys(partition, r.GetKeys()); err != nil {
			return err
		}
		return checkFields(partition, r.GetFields())
	case *tqpb.CommitRequest:
		keys := make([]string, len(r.GetUpdates()))
		for i, u := range r.GetUpdates() {
			keys[i] = u.GetKey()
			for _, e := range u.GetFields() {
				if f := e.GetName(); !metadata.ValidName(f, maxFieldName) {
					return invalidf("partition %q: row %q: field name %q (want 1-%d bytes of [A-Za-z0-9_.:/-])", partition, u.GetKey(), f, maxFieldName)
				}
			}
		}
		return checkKeys(partition, keys)
	case *tqpb.BlockRequest:
		if err := checkFields(partition, r.GetFields()); err != nil {
			return err
		}
		if err := metadata.CheckBlock(r.GetFields(), int(r.GetN())); err != nil {
			return invalidf("partition %q: block: %v", partition, err)
		}
	case *tqpb.PutNewRequest:
		keys := make([]string, len(r.GetUpdates()))
		for i, u := range r.GetUpdates() {
			keys[i] = u.GetKey()
		}
		if err := checkKeys(partition, keys); err != nil {
			return err
		}
		return checkFields(partition, r.GetFields())
	case *tqpb.DeleteFieldsRequest:
		if err := checkKeys(partition, r.GetKeys()); err != nil {
			return err
		}
		return checkFields(partition, r.GetFields())
	case *tqpb.SettleRequest:
		// Checked before the op becomes a metadata.SettleOp, a byte, in
		// which an op out of range could pass for another.
		if op := r.GetOp(); op < tqpb.SettleRequest_ACK || op > tqpb.SettleRequest_UNDO {
			return invalidf("partition %q: settle: unknown op %d", partition, op)
		}
	case *tqpb.ClaimRequest:
		if r.GetWindow() < 0 {
			return invalidf("partition %q: candidates: window %d < 0", partition, r.GetWindow())
		}
		if sf := r.GetSettleFirst(); sf != nil {
			if op := sf.GetOp(); op < tqpb.SettleRequest_ACK || op > tqpb.SettleRequest_UNDO {
				return invalidf("partition %q: claim: settle first: unknown op %d", partition, op)
			}
		}
	}
	return nil
}

// validate is the interceptor that refuses a malformed request.
func validate(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	if err := checkRequest(req); err != nil {
		return nil, toStatus(err)
	}
	return next(ctx, req)
}
