package tq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
)

// partitionError is an engine's failure of a request on a partition: it
// names the request and the partition, and matches what err matches.
type partitionError struct {
	op, partition string
	err           error
}

func (e *partitionError) Error() string {
	return fmt.Sprintf("tq: %s on partition %q: %v", e.op, e.partition, e.err)
}

func (e *partitionError) Unwrap() error { return e.err }

// inPartition names the partition of a request's error, unless the error
// is nil, a context's, or names it already.
func inPartition(op, partition string, err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		strings.Contains(err.Error(), strconv.Quote(partition)) {
		return err
	}
	return &partitionError{op: op, partition: partition, err: err}
}

// partMeta is a MetaStore whose errors name their partition (Wait's are
// left as they are: its caller says what it waited for).
type partMeta struct{ metadata.MetaStore }

// partColocated is partMeta over a Colocated store, which stays one.
type partColocated struct {
	partMeta
	co metadata.Colocated
}

// withPartitions wraps meta so its errors name their partition, keeping
// what it can do.
func withPartitions(meta metadata.MetaStore) metadata.MetaStore {
	pm := partMeta{meta}
	if co, ok := meta.(metadata.Colocated); ok {
		return partColocated{partMeta: pm, co: co}
	}
	return pm
}

func (m partMeta) Claim(ctx context.Context, partition string, req metadata.ClaimRequest, pick metadata.Pick) (metadata.Claimed, error) {
	v, err := m.MetaStore.Claim(ctx, partition, req, pick)
	return v, inPartition("claim", partition, err)
}

func (m partMeta) SettleClaim(ctx context.Context, partition string, sr metadata.SettleRequest, req metadata.ClaimRequest, pick metadata.Pick) (metadata.SettleResult, metadata.Claimed, error) {
	s, c, err := metadata.SettleClaim(ctx, m.MetaStore, partition, sr, req, pick)
	return s, c, inPartition("claim", partition, err)
}

func (m partMeta) WaitTake(ctx context.Context, partition string, mark metadata.Mark) (metadata.Claimed, bool, error) {
	return metadata.WaitTake(ctx, m.MetaStore, partition, mark) // a Wait's errors as they are
}

func (m partMeta) Settle(ctx context.Context, partition string, req metadata.SettleRequest) (metadata.SettleResult, error) {
	v, err := m.MetaStore.Settle(ctx, partition, req)
	return v, inPartition("settle", partition, err)
}

func (m partMeta) View(ctx context.Context, partition string, tasks ...string) (metadata.View, error) {
	v, err := m.MetaStore.View(ctx, partition, tasks...)
	return v, inPartition("view", partition, err)
}

func (m partMeta) Summarize(ctx context.Context, partition string, req metadata.SummaryRequest) (metadata.Summary, error) {
	v, err := metadata.Summarize(ctx, m.MetaStore, partition, req)
	return v, inPartition("summary", partition, err)
}

func (m partMeta) Consumption(ctx context.Context, partition string, tasks ...string) (map[string][]metadata.Delivery, error) {
	v, err := m.MetaStore.Consumption(ctx, partition, tasks...)
	return v, inPartition("consumption", partition, err)
}

func (m partMeta) SetCapacity(ctx context.Context, partition string, c metadata.Capacity) ([]*metadata.Row, error) {
	v, err := m.MetaStore.SetCapacity(ctx, partition, c)
	return v, inPartition("capacity", partition, err)
}

func (m partMeta) Reset(ctx context.Context, partition, task string, indexes []uint64) error {
	return inPartition("reset", partition, m.MetaStore.Reset(ctx, partition, task, indexes))
}

func (m partMeta) Prepare(ctx context.Context, partition string, keys, fields []string, sizes []int64) ([]metadata.Reservation, error) {
	v, err := m.MetaStore.Prepare(ctx, partition, keys, fields, sizes)
	return v, inPartition("prepare", partition, err)
}

func (m partMeta) Commit(ctx context.Context, partition string, updates []metadata.RowUpdate) (metadata.CommitResult, error) {
	v, err := m.MetaStore.Commit(ctx, partition, updates)
	return v, inPartition("commit", partition, err)
}

func (m partMeta) Lookup(ctx context.Context, partition string, keys []string) ([]*metadata.Row, error) {
	v, err := m.MetaStore.Lookup(ctx, partition, keys)
	return v, inPartition("lookup", partition, err)
}

func (m partMeta) List(ctx context.Context, partition string) ([]*metadata.Row, error) {
	v, err := m.MetaStore.List(ctx, partition)
	return v, inPartition("list", partition, err)
}

func (m partMeta) Delete(ctx context.Context, partition string, keys []string) ([]*metadata.Row, error) {
	v, err := m.MetaStore.Delete(ctx, partition, keys)
	return v, inPartition("delete", partition, err)
}

func (m partMeta) DeletePartition(ctx context.Context, partition string) ([]*metadata.Row, error) {
	v, err := m.MetaStore.DeletePartition(ctx, partition)
	return v, inPartition("delete partition", partition, err)
}

func (m partMeta) Garbage(ctx context.Context, partition string, olderThan time.Duration) ([]metadata.Ref, error) {
	v, err := m.MetaStore.Garbage(ctx, partition, olderThan)
	return v, inPartition("garbage", partition, err)
}

func (m partMeta) Swept(ctx context.Context, partition string, refs []metadata.Ref) error {
	return inPartition("swept", partition, m.MetaStore.Swept(ctx, partition, refs))
}

func (m partMeta) Abandon(ctx context.Context, partition string, refs []metadata.Ref) error {
	return inPartition("abandon", partition, m.MetaStore.Abandon(ctx, partition, refs))
}

func (m partMeta) DeleteFields(ctx context.Context, partition string, keys, fields []string) ([]metadata.Ref, error) {
	v, err := m.MetaStore.DeleteFields(ctx, partition, keys, fields)
	return v, inPartition("delete fields", partition, err)
}

func (m partColocated) WriteCommit(ctx context.Context, partition string, cells []backends.Cell, updates []metadata.RowUpdate) (metadata.CommitResult, error) {
	v, err := m.co.WriteCommit(ctx, partition, cells, updates)
	return v, inPartition("commit", partition, err)
}

func (m partColocated) ReadRows(ctx context.Context, partition string, keys []string, plan func(rows []*metadata.Row) ([]backends.ReadCell, error)) ([]*metadata.Row, error) {
	v, err := m.co.ReadRows(ctx, partition, keys, plan)
	return v, inPartition("read", partition, err)
}

func (m partMeta) Block(ctx context.Context, partition string, fields []string, n int) (metadata.IndexBlock, error) {
	v, err := metadata.Block(ctx, m.MetaStore, partition, fields, n)
	return v, inPartition("block", partition, err)
}

func (m partMeta) PutNew(ctx context.Context, partition string, token, base uint64, keys, fields []string, sizes []int64, updates []metadata.RowUpdate) (metadata.CommitResult, error) {
	v, err := metadata.PutNew(ctx, m.MetaStore, partition, token, base, keys, fields, sizes, updates)
	return v, inPartition("put", partition, err)
}

func (m partMeta) ReleaseBlock(ctx context.Context, partition string, b metadata.IndexBlock, written []uint64) error {
	return inPartition("release block", partition, metadata.ReleaseBlock(ctx, m.MetaStore, partition, b, written))
}
