package tqserve_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcmd "google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/tqserve"
	"github.com/tqgo/tqgo/tqserve/tqpb"
)

// badEnv is one server (with a token and a small message limit) holding
// a partition with rows, a lease and an ack, a raw gRPC client of it,
// and a tq:// client that sees its state.
type badEnv struct {
	srv   *server
	conn  *grpc.ClientConn
	raw   tqpb.MetaClient
	cells tqpb.CellsClient
	d     metadata.MetaStore
	lease string // the lease of row "a" of task "t"
	ixA   uint64 // row "a"'s index
	// refused counts the calls an interceptor of the server's saw fail
	// with InvalidArgument.
	refused atomic.Int64
}

const (
	badToken  = "s3cret"
	badMaxMsg = 16 << 10
)

func newBadEnv(t *testing.T) *badEnv {
	t.Helper()
	e := &badEnv{}
	count := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		resp, err := next(ctx, req)
		if status.Code(err) == codes.InvalidArgument {
			e.refused.Add(1)
		}
		return resp, err
	}
	s := startServer(t, "memory://tqserve-badinput", tqserve.WithToken(badToken), tqserve.WithMaxMessage(badMaxMsg), tqserve.WithInterceptor(count))
	host := strings.TrimPrefix(s.URL, "tq://")
	conn, err := grpc.NewClient(host, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	e.srv, e.conn, e.raw, e.cells = s, conn, tqpb.NewMetaClient(conn), tqpb.NewCellsClient(conn)
	e.d = openMeta(t, "tq://:"+badToken+"@"+host)
	ctx := callCtx(t)
	res, err := e.d.Prepare(ctx, "p", []string{"a", "b", "c"}, []string{"x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ups []metadata.RowUpdate
	for i, k := range []string{"a", "b", "c"} {
		ups = append(ups, metadata.RowUpdate{Key: k, Index: res[i].Index,
			Fields: map[string]metadata.FieldInfo{"x": {Gen: res[i].Gens["x"]}}, Tag: map[string]any{"g": int64(i)}})
	}
	if _, err := e.d.Commit(ctx, "p", ups); err != nil {
		t.Fatal(err)
	}
	if _, err := e.d.SetCapacity(ctx, "p", metadata.Capacity{Rows: 100}); err != nil {
		t.Fatal(err)
	}
	c, err := e.d.Claim(ctx, "p", claimReq("t"), nil)
	if err != nil || len(c.Rows) != 1 {
		t.Fatalf("claim: %+v, %v", c, err)
	}
	e.lease, e.ixA = c.Lease, c.Rows[0].Index
	c2, err := e.d.Claim(ctx, "p", claimReq("t"), nil)
	if err != nil || len(c2.Rows) != 1 {
		t.Fatalf("claim: %+v, %v", c2, err)
	}
	if _, err := e.d.Settle(ctx, "p", metadata.SettleRequest{Task: "t", Op: metadata.Ack, Lease: c2.Lease, Indexes: []uint64{c2.Rows[0].Index}}); err != nil {
		t.Fatal(err)
	}
	return e
}

// authed is ctx carrying the server's token.
func authed(ctx context.Context) context.Context {
	return grpcmd.AppendToOutgoingContext(ctx, "authorization", "Bearer "+badToken)
}

// state is what the server holds, as text: every partition's rows, every
// task's deliveries, capacity, usage (reservations too) and counts (times
// left out).
func (e *badEnv) state(t *testing.T) string {
	t.Helper()
	ctx := callCtx(t)
	parts, err := e.d.Partitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, p := range parts {
		v, err := e.d.View(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		// A claim that leased nothing makes its task known (consumed 0).
		maps.DeleteFunc(v.Consumed, func(_ string, n uint64) bool { return n == 0 })
		fmt.Fprintf(&b, "partition %q seq %d inserted %d consumed %v capacity %+v used %+v\n", p, v.Mark.Seq, v.Inserted, v.Consumed, v.Capacity, v.Used)
		for _, r := range v.Rows {
			fmt.Fprintf(&b, "  row %q %d %v %v\n", r.Key, r.Index, r.Fields, r.Tag)
		}
		for _, task := range slices.Sorted(maps.Keys(v.Tasks)) {
			for _, d := range v.Tasks[task] {
				fmt.Fprintf(&b, "  task %q row %d %v x%d lease %q\n", task, d.Index, d.State, d.Deliveries, d.Lease)
			}
		}
	}
	return b.String()
}

// alive fails unless the server still answers another client: the
// health service and a Meta call with the token.
func (e *badEnv) alive(t *testing.T, after string) {
	t.Helper()
	ctx := callCtx(t)
	if _, err := healthpb.NewHealthClient(e.conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("after %s: health: %v", after, err)
	}
	if _, err := e.d.List(ctx, "p"); err != nil {
		t.Fatalf("after %s: list: %v", after, err)
	}
}

// badCase is one malformed call: what it sends, and the code it must get
// (OK for a call the protocol defines as harmless: it must change
// nothing).
type badCase struct {
	name string
	code codes.Code
	call func(ctx context.Context, e *badEnv) error
}

func claim(r *tqpb.ClaimRequest) func(ctx context.Context, e *badEnv) error {
	return func(ctx context.Context, e *badEnv) error {
		_, err := e.raw.Claim(ctx, r)
		return err
	}
}

func candidates(r *tqpb.ClaimRequest) func(ctx context.Context, e *badEnv) error {
	return func(ctx context.Context, e *badEnv) error {
		r.Partition = "p"
		_, err := e.raw.Candidates(ctx, r)
		return err
	}
}

func settle(r *tqpb.SettleRequest) func(ctx context.Context, e *badEnv) error {
	return func(ctx context.Context, e *badEnv) error {
		r.Partition, r.Task = "p", "t"
		if r.Lease == "lease" {
			r.Lease = e.lease
		}
		if r.Indexes == nil {
			r.Indexes = []uint64{e.ixA}
		}
		_, err := e.raw.Settle(ctx, r)
		return err
	}
}

func commit(us ...*tqpb.RowUpdate) func(ctx context.Context, e *badEnv) error {
	return func(ctx context.Context, e *badEnv) error {
		_, err := e.raw.Commit(ctx, &tqpb.CommitRequest{Partition: "p", Updates: us})
		return err
	}
}

func prepare(part string, keys, fields []string, sizes []int64) func(ctx context.Context, e *badEnv) error {
	return func(ctx context.Context, e *badEnv) error {
		_, err := e.raw.Prepare(ctx, &tqpb.PrepareRequest{Partition: part, Keys: keys, Fields: fields, Sizes: sizes})
		return err
	}
}

func lease() *tqpb.ClaimRequest {
	return &tqpb.ClaimRequest{Partition: "p", Task: "t2", LeaseNs: int64(time.Minute), Rows: 1, Min: 1}
}

func with(r *tqpb.ClaimRequest, f func(r *tqpb.ClaimRequest)) *tqpb.ClaimRequest {
	f(r)
	return r
}

func tagUpdate(key string, tag *tqpb.TagMap) *tqpb.RowUpdate {
	return &tqpb.RowUpdate{Key: key, Index: 0, Tag: tag}
}

var badCases = []badCase{
	// Claims: counts, durations, names, ranks, groups out of range.
	{"claim rows beyond an int32", codes.InvalidArgument, claim(with(lease(), func(r *tqpb.ClaimRequest) { r.Rows = 1 << 40 }))},
	{"claim rows beyond the most", codes.InvalidArgument, claim(with(lease(), func(r *tqpb.ClaimRequest) { r.Rows, r.Min = metadata.MaxClaimRows+1, 1 }))},
	{"claim rows 0", codes.InvalidArgument, claim(with(lease(), func(r *tqpb.ClaimRequest) { r.Rows = 0 }))},
	{"claim min above rows", codes.InvalidArgument, claim(with(lease(), func(r *tqpb.ClaimRequest) { r.Min = 2 }))},
	{"claim negative lease", codes.InvalidArgument, claim(with(lease(), func(r *tqpb.ClaimRequest) { r.LeaseNs = -1 }))},
	{"claim negative hold", codes.InvalidArgument, claim(with(lease(), func(r *tqpb.ClaimRequest) { r.HoldNs = -time.Second.Nanoseconds() }))},
	{"claim negative max deliveries", codes.InvalidArgument, claim(with(lease(), func(r *tqpb.ClaimRequest) { r.MaxDeliveries = -1 }))},
	{"claim empty task", codes.InvalidArgument, claim(with(lease(), func(r *tqpb.ClaimRequest) { r.Task = "" }))},
	{"claim rank out of range", codes.InvalidArgument, claim(with(lease(), func(r *tqpb.ClaimRequest) { r.Batch = &tqpb.Batch{Ranks: 2, Rank: 5} }))},
	{"claim zero ranks", codes.InvalidArgument, claim(with(lease(), func(r *tqpb.ClaimRequest) { r.Batch = &tqpb.Batch{} }))},
	{"claim negative group", codes.InvalidArgument, claim(with(lease(), func(r *tqpb.ClaimRequest) {
		r.Select = &tqpb.Select{Group: &tqpb.Group{Tag: "g", Size: -1}}
	}))},
	{"claim negative group deadline", codes.InvalidArgument, claim(with(lease(), func(r *tqpb.ClaimRequest) {
		r.Select = &tqpb.Select{Group: &tqpb.Group{Tag: "g", Size: 1, DeadlineNs: -1}}
	}))},
	{"claim holder not printable", codes.InvalidArgument, claim(with(lease(), func(r *tqpb.ClaimRequest) { r.Holder = "a\x00b" }))},
	{"claim token of another holder", codes.InvalidArgument, claim(with(lease(), func(r *tqpb.ClaimRequest) { r.Holder, r.Token = "a", "b|8000000000000000" }))},
	{"claim token not a lease token", codes.InvalidArgument, claim(with(lease(), func(r *tqpb.ClaimRequest) { r.Token = "mine" }))},
	{"claim empty partition", codes.InvalidArgument, claim(with(lease(), func(r *tqpb.ClaimRequest) { r.Partition = "" }))},
	{"claim partition of no valid name", codes.InvalidArgument, claim(with(lease(), func(r *tqpb.ClaimRequest) { r.Partition = "a b{c}" }))},
	{"candidates of a claim not custom", codes.InvalidArgument, candidates(lease())},
	{"candidates negative window", codes.InvalidArgument, candidates(with(lease(), func(r *tqpb.ClaimRequest) { r.Custom, r.Window = true, -1 }))},
	// A custom claim's picks name rows by index: one that names no ready
	// row is skipped (a row taken meanwhile), so the claim leases nothing.
	{"custom claim of rows that are not ready", codes.OK, claim(with(lease(), func(r *tqpb.ClaimRequest) {
		r.Custom, r.Picked, r.Drop = true, []*tqpb.Unit{{Indexes: []uint64{math.MaxUint64, 1 << 40}}, {}}, []uint64{math.MaxUint64}
	}))},

	// Settles: ops, durations, reasons.
	{"settle undo with indexes", codes.InvalidArgument, settle(&tqpb.SettleRequest{Task: "t2", Op: tqpb.SettleRequest_UNDO, Lease: "|8000000000000000", Indexes: []uint64{0}})},
	{"settle undo without a token", codes.InvalidArgument, settle(&tqpb.SettleRequest{Task: "t2", Op: tqpb.SettleRequest_UNDO, Lease: "", Indexes: []uint64{}})},
	{"settle op unspecified", codes.InvalidArgument, settle(&tqpb.SettleRequest{Lease: "lease"})},
	{"settle op unknown", codes.InvalidArgument, settle(&tqpb.SettleRequest{Op: 99, Lease: "lease"})},
	{"settle op unknown, an ack mod 256", codes.InvalidArgument, settle(&tqpb.SettleRequest{Op: 257, Lease: "lease"})},
	{"settle op negative", codes.InvalidArgument, settle(&tqpb.SettleRequest{Op: -255, Lease: "lease"})},
	{"settle negative delay", codes.InvalidArgument, settle(&tqpb.SettleRequest{Op: tqpb.SettleRequest_NACK, Lease: "lease", DelayNs: -1})},
	{"settle extend by nothing", codes.InvalidArgument, settle(&tqpb.SettleRequest{Op: tqpb.SettleRequest_EXTEND, Lease: "lease"})},
	{"settle ack without a lease", codes.InvalidArgument, settle(&tqpb.SettleRequest{Op: tqpb.SettleRequest_ACK})},
	{"settle reason too long", codes.InvalidArgument, settle(&tqpb.SettleRequest{Op: tqpb.SettleRequest_NACK, Lease: "lease", Reason: strings.Repeat("x", metadata.MaxReason+1)})},
	{"settle empty task", codes.InvalidArgument, func(ctx context.Context, e *badEnv) error {
		_, err := e.raw.Settle(ctx, &tqpb.SettleRequest{Partition: "p", Op: tqpb.SettleRequest_ACK, Lease: e.lease, Indexes: []uint64{e.ixA}})
		return err
	}},
	// Rows of no index are Lost, as the contract says: nothing changes.
	{"settle indexes of no row", codes.OK, settle(&tqpb.SettleRequest{Op: tqpb.SettleRequest_ACK, Lease: "lease", Indexes: []uint64{math.MaxUint64, 1 << 40}})},

	// Commits: tags of no kind, keys, fields.
	{"commit a tag value of no kind", codes.InvalidArgument, commit(tagUpdate("a", &tqpb.TagMap{Values: map[string]*tqpb.TagValue{"g": {}}}))},
	{"commit a nil tag value", codes.InvalidArgument, commit(tagUpdate("a", &tqpb.TagMap{Values: map[string]*tqpb.TagValue{"g": nil}}))},
	{"commit a list holding a value of no kind", codes.InvalidArgument, commit(tagUpdate("a", &tqpb.TagMap{Values: map[string]*tqpb.TagValue{
		"g": {Kind: &tqpb.TagValue_ListValue{ListValue: &tqpb.TagList{Values: []*tqpb.TagValue{{}}}}}}}))},
	{"commit an empty key", codes.InvalidArgument, commit(&tqpb.RowUpdate{Key: "", Index: 1})},
	{"commit a key twice", codes.InvalidArgument, func(ctx context.Context, e *badEnv) error {
		return commit(&tqpb.RowUpdate{Key: "a", Index: e.ixA}, &tqpb.RowUpdate{Key: "a", Index: e.ixA})(ctx, e)
	}},
	{"commit a field of no valid name", codes.InvalidArgument, func(ctx context.Context, e *badEnv) error {
		return commit(&tqpb.RowUpdate{Key: "a", Index: e.ixA, Fields: []*tqpb.FieldEntry{{Name: "", Info: &tqpb.FieldInfo{Gen: 1}}}})(ctx, e)
	}},
	{"commit to an empty partition name", codes.InvalidArgument, func(ctx context.Context, e *badEnv) error {
		_, err := e.raw.Commit(ctx, &tqpb.CommitRequest{Updates: []*tqpb.RowUpdate{{Key: "a", Index: e.ixA}}})
		return err
	}},

	// Prepares: names, keys, sizes.
	{"prepare empty partition name", codes.InvalidArgument, prepare("", []string{"k"}, []string{"x"}, nil)},
	{"prepare partition name too long", codes.InvalidArgument, prepare(strings.Repeat("p", 256), []string{"k"}, []string{"x"}, nil)},
	{"prepare an empty key", codes.InvalidArgument, prepare("p", []string{""}, []string{"x"}, nil)},
	{"prepare a key twice", codes.InvalidArgument, prepare("p", []string{"k", "k"}, []string{"x"}, nil)},
	{"prepare a field twice", codes.InvalidArgument, prepare("p", []string{"k"}, []string{"x", "x"}, nil)},
	{"prepare a field of no valid name", codes.InvalidArgument, prepare("p", []string{"k"}, []string{"x@1#2"}, nil)},
	{"prepare sizes of another count", codes.InvalidArgument, prepare("p", []string{"k"}, []string{"x"}, []int64{1, 2})},
	{"prepare a negative size", codes.InvalidArgument, prepare("p", []string{"k"}, []string{"x"}, []int64{-1})},

	// Others.
	{"garbage negative age", codes.InvalidArgument, func(ctx context.Context, e *badEnv) error {
		_, err := e.raw.Garbage(ctx, &tqpb.GarbageRequest{Partition: "p", OlderThanNs: -1})
		return err
	}},
	{"capacity negative", codes.InvalidArgument, func(ctx context.Context, e *badEnv) error {
		_, err := e.raw.SetCapacity(ctx, &tqpb.SetCapacityRequest{Partition: "p", Capacity: &tqpb.Capacity{Rows: -1}})
		return err
	}},
	{"capacity clearing after an empty task", codes.InvalidArgument, func(ctx context.Context, e *badEnv) error {
		_, err := e.raw.SetCapacity(ctx, &tqpb.SetCapacityRequest{Partition: "p", Capacity: &tqpb.Capacity{ClearAcked: []string{""}}})
		return err
	}},
	{"view an empty task", codes.InvalidArgument, func(ctx context.Context, e *badEnv) error {
		_, err := e.raw.View(ctx, &tqpb.TasksRequest{Partition: "p", Tasks: []string{""}})
		return err
	}},
	{"summarize an empty task", codes.InvalidArgument, func(ctx context.Context, e *badEnv) error {
		_, err := e.raw.Summary(ctx, &tqpb.SummaryRequest{Partition: "p", Tasks: []string{""}})
		return err
	}},
	{"summarize a field of no valid name", codes.InvalidArgument, func(ctx context.Context, e *badEnv) error {
		_, err := e.raw.Summary(ctx, &tqpb.SummaryRequest{Partition: "p", Tasks: []string{"t"}, Fields: []string{"x@1"}})
		return err
	}},
	{"summarize a version of no task", codes.InvalidArgument, func(ctx context.Context, e *badEnv) error {
		_, err := e.raw.Summary(ctx, &tqpb.SummaryRequest{Partition: "p", Version: "v"})
		return err
	}},
	{"reset an empty task", codes.InvalidArgument, func(ctx context.Context, e *badEnv) error {
		_, err := e.raw.Reset(ctx, &tqpb.ResetRequest{Partition: "p", AllRows: true})
		return err
	}},
	{"delete fields of no valid name", codes.InvalidArgument, func(ctx context.Context, e *badEnv) error {
		_, err := e.raw.DeleteFields(ctx, &tqpb.DeleteFieldsRequest{Partition: "p", Keys: []string{"a"}, Fields: []string{""}})
		return err
	}},
	{"wait on an empty partition name", codes.InvalidArgument, func(ctx context.Context, e *badEnv) error {
		_, err := e.raw.Wait(ctx, &tqpb.WaitRequest{})
		return err
	}},
	// Unknown partitions read as empty and settle nothing: the contract.
	{"list an unknown partition", codes.OK, func(ctx context.Context, e *badEnv) error {
		r, err := e.raw.List(ctx, &tqpb.PartitionRequest{Partition: "nope"})
		if err == nil && len(r.GetRows()) > 0 {
			return fmt.Errorf("rows of an unknown partition: %v", r.GetRows())
		}
		return err
	}},
	{"view an unknown partition", codes.OK, func(ctx context.Context, e *badEnv) error {
		_, err := e.raw.View(ctx, &tqpb.TasksRequest{Partition: "nope", Tasks: []string{"t"}})
		return err
	}},
	{"summarize an unknown partition", codes.OK, func(ctx context.Context, e *badEnv) error {
		r, err := e.raw.Summary(ctx, &tqpb.SummaryRequest{Partition: "nope", Tasks: []string{"t"}, Counts: true})
		if err == nil && (r.GetRows() != 0 || r.GetTasks()["t"] == nil) {
			return fmt.Errorf("summary of an unknown partition: %v", r)
		}
		return err
	}},
	{"settle in an unknown partition", codes.OK, func(ctx context.Context, e *badEnv) error {
		r, err := e.raw.Settle(ctx, &tqpb.SettleRequest{Partition: "nope", Task: "t", Op: tqpb.SettleRequest_ACK, Lease: e.lease, Indexes: []uint64{e.ixA}})
		if err == nil && len(r.GetLost()) != 1 {
			return fmt.Errorf("settle in an unknown partition: lost %v, want the row", r.GetLost())
		}
		return err
	}},
	{"commit to an unknown partition", codes.Aborted, func(ctx context.Context, e *badEnv) error {
		_, err := e.raw.Commit(ctx, &tqpb.CommitRequest{Partition: "nope", Updates: []*tqpb.RowUpdate{{Key: "a", Index: e.ixA}}})
		return err
	}},

	// Claims of the most rows allowed: they lease what there is (none
	// here: rows at least min), without allocating for what they may.
	{"claim the most rows", codes.OK, claim(with(lease(), func(r *tqpb.ClaimRequest) { r.Rows, r.Min = metadata.MaxClaimRows, metadata.MaxClaimRows }))},
	{"candidates of the most rows", codes.OK, candidates(with(lease(), func(r *tqpb.ClaimRequest) { r.Custom, r.Rows = true, metadata.MaxClaimRows }))},
	{"custom claim of the most rows", codes.OK, claim(with(lease(), func(r *tqpb.ClaimRequest) {
		r.Custom, r.Rows, r.Min = true, metadata.MaxClaimRows, metadata.MaxClaimRows
	}))},
	{"claim of the most ranks", codes.OK, claim(with(lease(), func(r *tqpb.ClaimRequest) {
		r.Rows, r.Min, r.Batch = metadata.MaxClaimRows, metadata.MaxClaimRows, &tqpb.Batch{Ranks: metadata.MaxRanks, Rank: metadata.MaxRanks - 1}
	}))},

	// Sizes: a request over the server's limit.
	{"prepare over the message limit", codes.ResourceExhausted, prepare("p", []string{strings.Repeat("k", badMaxMsg)}, []string{"x"}, nil)},
}

// Malformed calls, made with the raw protocol as a client of another
// version (or not a tq client) would: each fails with a clear status
// (InvalidArgument with a Failure of kind INVALID; ResourceExhausted for
// a request over the limit), or, where the protocol defines the call as
// harmless, succeeds; none changes anything, and the server goes on
// serving other clients (a panic in a handler would end its process,
// and this test with it). The server's interceptors (metrics, logs) see
// the refusals.
func TestBadInput(t *testing.T) {
	e := newBadEnv(t)
	before := e.state(t)
	invalid := 0
	for _, c := range badCases {
		if c.code == codes.InvalidArgument {
			invalid++
		}
		ctx := authed(callCtx(t))
		err := c.call(ctx, e)
		st, _ := status.FromError(err)
		switch {
		case st.Code() != c.code:
			t.Errorf("%s: %v, want code %v", c.name, err, c.code)
		case c.code == codes.InvalidArgument && !hasFailure(st, tqpb.Failure_INVALID):
			t.Errorf("%s: %v: no Failure of kind INVALID among its details", c.name, err)
		}
		if after := e.state(t); after != before {
			t.Errorf("%s changed the server's state:\nbefore:\n%s\nafter:\n%s", c.name, before, after)
			before = after
		}
		e.alive(t, c.name)
	}
	if n := e.refused.Load(); n != int64(invalid) {
		t.Errorf("the server's interceptor saw %d calls refused as invalid, want %d", n, invalid)
	}
}

func hasFailure(st *status.Status, kind tqpb.Failure_Kind) bool {
	for _, d := range st.Details() {
		if f, ok := d.(*tqpb.Failure); ok && f.GetKind() == kind && f.GetMessage() != "" {
			return true
		}
	}
	return false
}

// A call without the server's token, or with another, is refused
// (Unauthenticated) and changes nothing, a tq:// client of such a URL
// gets an error matching ErrInvalid that says to check the token, and
// clients with the token go on.
func TestBadToken(t *testing.T) {
	e := newBadEnv(t)
	before := e.state(t)
	for _, md := range [][]string{nil, {"authorization", "Bearer wrong"}, {"authorization", badToken}, {"authorization", "Bearer " + badToken, "authorization", "Bearer " + badToken}} {
		ctx := grpcmd.AppendToOutgoingContext(callCtx(t), md...)
		_, err := e.raw.Settle(ctx, &tqpb.SettleRequest{Partition: "p", Task: "t", Op: tqpb.SettleRequest_ACK, Lease: e.lease, Indexes: []uint64{e.ixA}})
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("settle with %q: %v, want Unauthenticated", md, err)
		}
		_, err = e.cells.Write(ctx, &tqpb.WriteCellsRequest{Cells: []*tqpb.Cell{{Key: "1@x#1", Value: []byte("v")}}})
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("cells write with %q: %v, want Unauthenticated", md, err)
		}
	}
	host := strings.TrimPrefix(e.srv.URL, "tq://")
	for _, url := range []string{"tq://" + host, "tq://:wrong@" + host} {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		eng, err := backends.Open(ctx, url)
		cancel()
		if err == nil {
			_ = eng.Meta.Close()
			_ = eng.Data.Close()
			t.Fatalf("%s: opened", url)
		}
		if !errors.Is(err, backends.ErrInvalid) || !strings.Contains(err.Error(), "token") {
			t.Errorf("%s: %v, want ErrInvalid saying to check the token", url, err)
		}
	}
	if after := e.state(t); after != before {
		t.Errorf("refused calls changed the server's state:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	e.alive(t, "refused calls")
}

// A request over the server's message limit, from a tq:// client, fails
// with an error matching ErrInvalid (nothing applied, not worth
// retrying), changes nothing, and the client's next call goes through.
func TestBadOversized(t *testing.T) {
	e := newBadEnv(t)
	before := e.state(t)
	ctx := callCtx(t)
	_, err := e.d.Prepare(ctx, "p", []string{strings.Repeat("k", badMaxMsg)}, []string{"x"}, nil)
	if !errors.Is(err, backends.ErrInvalid) || errors.Is(err, backends.ErrOutcomeUnknown) {
		t.Errorf("prepare over the limit: %v, want ErrInvalid", err)
	}
	_, err = e.d.Commit(ctx, "p", []metadata.RowUpdate{{Key: "a", Index: e.ixA, Tag: map[string]any{"big": strings.Repeat("v", badMaxMsg)}}})
	if !errors.Is(err, backends.ErrInvalid) || errors.Is(err, backends.ErrOutcomeUnknown) {
		t.Errorf("commit over the limit: %v, want ErrInvalid", err)
	}
	if after := e.state(t); after != before {
		t.Errorf("refused calls changed the server's state:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	e.alive(t, "oversized calls")
}

// rawCodec sends bytes as they are: messages no protobuf encoder makes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// Bytes that do not decode as the request (garbage, a length past the
// end, a string of invalid UTF-8) are refused by the server's gRPC layer
// before any handler runs: an error status, nothing changed, the server
// serving on.
func TestBadBytes(t *testing.T) {
	e := newBadEnv(t)
	before := e.state(t)
	for _, c := range []struct {
		name    string
		payload []byte
	}{
		{"garbage", []byte{0xff, 0xff, 0xff, 0xff}},
		{"a length past the end", []byte{0x0a, 0x10, 'p'}},
		{"a partition name of invalid UTF-8", []byte{0x0a, 0x01, 0xff}},
		{"a varint that never ends", []byte{0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
	} {
		for _, method := range []string{mSettle, mCommit, mClaim, mPrepare} {
			var out []byte
			err := e.conn.Invoke(authed(callCtx(t)), method, c.payload, &out, grpc.ForceCodec(rawCodec{}))
			if err == nil {
				t.Errorf("%s to %s: no error", c.name, method)
			}
			if after := e.state(t); after != before {
				t.Fatalf("%s to %s changed the server's state:\nbefore:\n%s\nafter:\n%s", c.name, method, before, after)
			}
			e.alive(t, c.name+" to "+method)
		}
	}
}

// Cell calls of no cells, or of cells with no key, do not stop the
// server, and change no metadata.
func TestBadCells(t *testing.T) {
	e := newBadEnv(t)
	before := e.state(t)
	for _, c := range []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"write no cells", func(ctx context.Context) error { _, err := e.cells.Write(ctx, &tqpb.WriteCellsRequest{}); return err }},
		{"write a cell of no key", func(ctx context.Context) error {
			_, err := e.cells.Write(ctx, &tqpb.WriteCellsRequest{Cells: []*tqpb.Cell{{}}})
			return err
		}},
		{"read a cell of no key", func(ctx context.Context) error {
			_, err := e.cells.Read(ctx, &tqpb.ReadCellsRequest{Cells: []*tqpb.Cell{{}, {Key: "1@x#1", Tag: "no such tag"}}})
			return err
		}},
		{"delete a cell of no key", func(ctx context.Context) error {
			_, err := e.cells.Delete(ctx, &tqpb.DeleteCellsRequest{Cells: []*tqpb.Cell{{}}})
			return err
		}},
	} {
		err := c.call(authed(callCtx(t)))
		t.Logf("%s: %v", c.name, err)
		if after := e.state(t); after != before {
			t.Fatalf("%s changed the server's metadata:\nbefore:\n%s\nafter:\n%s", c.name, before, after)
		}
		e.alive(t, c.name)
	}
}
