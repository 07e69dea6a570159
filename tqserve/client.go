package tqserve

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/tqserve/tqpb"
)

// Scheme is the URL scheme of a tq server: tq://[:TOKEN@]HOST:PORT[,HOST:PORT...][?tls=1&ca=FILE&servername=NAME].
const Scheme = "tq"

func init() { backends.Register(Scheme, open) }

// open dials the servers of u and asks where the cells are.
func open(ctx context.Context, u *url.URL) (backends.Engine, error) {
	hosts := strings.Split(u.Host, ",")
	for _, h := range hosts {
		if h == "" || !strings.Contains(h, ":") {
			return backends.Engine{}, fmt.Errorf("%w: tq:// URL: server %q is not HOST:PORT", backends.ErrInvalid, h)
		}
	}
	q := u.Query()
	var creds credentials.TransportCredentials = insecure.NewCredentials()
	if q.Get("tls") == "1" || q.Get("ca") != "" {
		cfg := &tls.Config{ServerName: q.Get("servername"), MinVersion: tls.VersionTLS12}
		if ca := q.Get("ca"); ca != "" {
			pem, err := os.ReadFile(ca)
			if err != nil {
				return backends.Engine{}, fmt.Errorf("%w: tq:// URL: CA file: %w", backends.ErrInvalid, err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return backends.Engine{}, fmt.Errorf("%w: tq:// URL: CA file %s holds no PEM certificate", backends.ErrInvalid, ca)
			}
		}
		creds = credentials.NewTLS(cfg)
	}
	token, _ := u.User.Password()
	if token == "" {
		token = os.Getenv("TQ_TOKEN")
	}
	r := manual.NewBuilderWithScheme("tqserve")
	addrs := make([]resolver.Address, len(hosts))
	for i, h := range hosts {
		addrs[i] = resolver.Address{Addr: h}
	}
	r.InitialState(resolver.State{Addresses: addrs})
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32), grpc.MaxCallSendMsgSize(math.MaxInt32)),
		clientKeepalive(),
	}
	opts = append(opts, clientWindows()...)
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer{token: token, secure: creds.Info().SecurityProtocol != "insecure"}))
	}
	// Partitions owned by servers the URL does not name (or not first)
	// are reached by their own connections, made as MOVED replies say.
	rt := newRouter(func(addr string) (*grpc.ClientConn, error) {
		return grpc.NewClient("passthrough:///"+addr, opts...)
	})
	conn, err := grpc.NewClient(r.Scheme()+":///"+u.Host, append(opts, grpc.WithResolvers(r), grpc.WithChainUnaryInterceptor(rt.intercept))...)
	if err != nil {
		return backends.Engine{}, fmt.Errorf("%w: tq:// URL: %w", backends.ErrInvalid, err)
	}
	m := &Meta{conn: conn, c: tqpb.NewMetaClient(conn), router: rt}
	m.life, m.end = context.WithCancel(context.Background())
	info, skew, err := hello(ctx, m.c, u.Host)
	if err != nil {
		m.end()
		_ = conn.Close()
		return backends.Engine{}, err
	}
	m.setSkew(skew)
	m.version.Store(int64(info.GetVersion()))
	if info.GetCellsUrl() == "" {
		cells := &remoteCells{c: tqpb.NewCellsClient(conn), closed: m.closed.Load, close: func() error { return nil }}
		return backends.Engine{Data: cells, Meta: m}, nil
	}
	eng, err := backends.Open(ctx, info.GetCellsUrl())
	if err != nil {
		_ = m.Close()
		return backends.Engine{}, fmt.Errorf("tq server %s: its cells at %s: %w", info.GetServer(), redact(info.GetCellsUrl()), err)
	}
	// Only the engine's cells: its metadata is the server's.
	if eng.Log != nil {
		_ = eng.Log.Close()
	}
	if eng.Meta != nil {
		_ = eng.Meta.Close()
	}
	return backends.Engine{Data: eng.Data, Meta: m}, nil
}

// bearer sends the token with every call.
type bearer struct {
	token  string
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (b bearer) RequireTransportSecurity() bool { return false }

// Meta is the metadata.MetaStore of a client of a tq server: each call is
// one call to the server that owns the partition (on a Calls stream;
// see PROTOCOL.md).
type Meta struct {
	conn   *grpc.ClientConn
	c      tqpb.MetaClient
	router *router
	closed atomic.Bool
	once   sync.Once
	life   context.Context // ends at Close: the context of what runs in the background
	end    context.CancelFunc

	// The server's clock minus this process's (see clock), taken at
	// skewAt (UnixNano; 0: to take again); skewing is set while it is
	// being taken.
	skew, skewAt atomic.Int64
	skewing      atomic.Bool

	// version is the server's InfoReply.version (see undoVersion).
	version atomic.Int64

	// fields keeps the fields the last claim's rows listed (see
	// fieldMemo).
	fields fieldMemo

	bgMu sync.Mutex     // orders bg.Add before Close's bg.Wait
	bg   sync.WaitGroup // the takings of the clock, the undos of claims
}

var (
	_ metadata.MetaStore  = (*Meta)(nil)
	_ metadata.Summarizer = (*Meta)(nil)
)

// Close closes the connection; later calls return backends.ErrClosed.
func (m *Meta) Close() error {
	var err error
	m.once.Do(func() {
		m.bgMu.Lock()
		m.closed.Store(true)
		m.bgMu.Unlock()
		m.end()
		m.bg.Wait()
		m.router.close()
		err = m.conn.Close()
	})
	return err
}

func (m *Meta) fail(ctx context.Context, op string, kind callKind, err error) error {
	if m.closed.Load() {
		return fmt.Errorf("tq server: %s: %w", op, backends.ErrClosed)
	}
	if st, ok := status.FromError(err); ok && st.Code() == codes.Unavailable {
		// The server may come back another (restarted elsewhere, or
		// another of the URL's): take its clock again at the next call.
		m.skewAt.Store(0)
	}
	return fromStatus(ctx, op, kind, time.Duration(m.skew.Load()), err)
}

func (m *Meta) check(op string) error {
	if m.closed.Load() {
		return fmt.Errorf("tq server: %s: %w", op, backends.ErrClosed)
	}
	return nil
}

func (m *Meta) Prepare(ctx context.Context, partition string, keys, fields []string, sizes []int64) ([]metadata.Reservation, error) {
	if err := m.check("prepare"); err != nil {
		return nil, err
	}
	r, err := m.c.Prepare(ctx, &tqpb.PrepareRequest{Partition: partition, Keys: keys, Fields: fields, Sizes: sizes})
	if err != nil {
		// Classed as a read's: what a Prepare whose reply was lost
		// reserved stays invisible, so its errors never match
		// ErrOutcomeUnknown (the MetaStore contract), and one that
		// failed on its way may be made again.
		return nil, m.fail(ctx, "prepare", read, err)
	}
	if len(r.GetReservations()) != len(keys) {
		return nil, malformed("prepare", read, fmt.Errorf("%d reservations for %d keys", len(r.GetReservations()), len(keys)))
	}
	out := make([]metadata.Reservation, len(keys))
	for i, rv := range r.GetReservations() {
		gens := rv.GetGens()
		if gens == nil {
			gens = map[string]uint64{}
		}
		out[i] = metadata.Reservation{Index: rv.GetIndex(), Gens: gens, New: rv.GetNew()}
	}
	return out, nil
}

func (m *Meta) rows(ctx context.Context, op string, kind callKind, call func() (*tqpb.RowsReply, error)) ([]*metadata.Row, error) {
	if err := m.check(op); err != nil {
		return nil, err
	}
	r, err := call()
	if err != nil {
		return nil, m.fail(ctx, op, kind, err)
	}
	rows, err := fromRows(r.GetRows())
	if err != nil {
		return nil, malformed(op, kind, err)
	}
	return rows, nil
}

func (m *Meta) SetCapacity(ctx context.Context, partition string, c metadata.Capacity) ([]*metadata.Row, error) {
	return m.rows(ctx, "set capacity", write, func() (*tqpb.RowsReply, error) {
		return m.c.SetCapacity(ctx, &tqpb.SetCapacityRequest{Partition: partition, Capacity: toCapacity(c)})
	})
}

func (m *Meta) Commit(ctx context.Context, partition string, updates []metadata.RowUpdate) (metadata.CommitResult, error) {
	if err := m.check("commit"); err != nil {
		return metadata.CommitResult{}, err
	}
	us, err := toUpdates(updates)
	if err != nil {
		return metadata.CommitResult{}, fmt.Errorf("%w: commit to partition %q: %w", backends.ErrInvalid, partition, err)
	}
	r, err := m.c.Commit(ctx, &tqpb.CommitRequest{Partition: partition, Updates: us})
	if err != nil {
		return metadata.CommitResult{}, m.fail(ctx, "commit", write, err)
	}
	return metadata.CommitResult{Superseded: fromRefs(r.GetSuperseded()), Stale: fromRefs(r.GetStale())}, nil
}

// Block implements metadata.Blocker. A server that does not know the
// call (an older one) gives errors.ErrUnsupported. Its errors never
// match ErrOutcomeUnknown: a Block whose reply was lost reserved indexes
// nobody uses, which Garbage aborts.
func (m *Meta) Block(ctx context.Context, partition string, fields []string, n int) (metadata.IndexBlock, error) {
	if err := m.check("block"); err != nil {
		return metadata.IndexBlock{}, err
	}
	if err := metadata.CheckBlock(fields, n); err != nil {
		return metadata.IndexBlock{}, err
	}
	r, err := m.c.Block(ctx, &tqpb.BlockRequest{Partition: partition, Fields: fields, N: int32(n)})
	if status.Code(err) == codes.Unimplemented {
		return metadata.IndexBlock{}, fmt.Errorf("tq server: block: %w", errors.ErrUnsupported)
	}
	if err != nil {
		return metadata.IndexBlock{}, m.fail(ctx, "block", read, err) // classed as Prepare's (see there)
	}
	return metadata.IndexBlock{Base: r.GetBase(), Token: r.GetToken()}, nil
}

// PutNew implements metadata.Blocker.
func (m *Meta) PutNew(ctx context.Context, partition string, token, base uint64, keys, fields []string, sizes []int64, updates []metadata.RowUpdate) (metadata.CommitResult, error) {
	if err := m.check("put new"); err != nil {
		return metadata.CommitResult{}, err
	}
	if len(updates) != len(keys) {
		return metadata.CommitResult{}, fmt.Errorf("%w: put new to partition %q: %d updates for %d keys", backends.ErrInvalid, partition, len(updates), len(keys))
	}
	for i := range updates {
		if updates[i].Key != keys[i] {
			return metadata.CommitResult{}, fmt.Errorf("%w: put new to partition %q: update %d is of key %q, not %q", backends.ErrInvalid, partition, i, updates[i].Key, keys[i])
		}
	}
	us, err := toUpdates(updates)
	if err != nil {
		return metadata.CommitResult{}, fmt.Errorf("%w: put new to partition %q: %w", backends.ErrInvalid, partition, err)
	}
	r, err := m.c.PutNew(ctx, &tqpb.PutNewRequest{Partition: partition, Base: base, Token: token, Fields: fields, Sizes: sizes, Updates: us})
	if err != nil {
		return metadata.CommitResult{}, m.fail(ctx, "put new", write, err)
	}
	return metadata.CommitResult{Superseded: fromRefs(r.GetSuperseded()), Stale: fromRefs(r.GetStale())}, nil
}

// ReleaseBlock implements metadata.Blocker.
func (m *Meta) ReleaseBlock(ctx context.Context, partition string, b metadata.IndexBlock, written []uint64) error {
	if err := m.check("release block"); err != nil {
		return err
	}
	_, err := m.c.ReleaseBlock(ctx, &tqpb.ReleaseBlockRequest{Partition: partition, Base: b.Base, Token: b.Token, Written: written})
	if status.Code(err) == codes.Unimplemented {
		return fmt.Errorf("tq server: release block: %w", errors.ErrUnsupported)
	}
	if err != nil {
		return m.fail(ctx, "release block", write, err)
	}
	return nil
}

func (m *Meta) Lookup(ctx context.Context, partition string, keys []string) ([]*metadata.Row, error) {
	if err := m.check("lookup"); err != nil {
		return nil, err
	}
	r, err := m.c.Lookup(ctx, &tqpb.KeysRequest{Partition: partition, Keys: keys})
	if err != nil {
		return nil, m.fail(ctx, "lookup", read, err)
	}
	if len(r.GetRows()) != len(keys) {
		return nil, malformed("lookup", read, fmt.Errorf("%d rows for %d keys", len(r.GetRows()), len(keys)))
	}
	out := make([]*metadata.Row, len(keys))
	for i, mr := range r.GetRows() {
		if mr.GetRow() == nil {
			continue
		}
		row, err := fromRow(mr.GetRow())
		if err != nil {
			return nil, malformed("lookup", read, err)
		}
		out[i] = row
	}
	return out, nil
}

func (m *Meta) List(ctx context.Context, partition string) ([]*metadata.Row, error) {
	return m.rows(ctx, "list", read, func() (*tqpb.RowsReply, error) {
		return m.c.List(ctx, &tqpb.PartitionRequest{Partition: partition})
	})
}

func (m *Meta) Partitions(ctx context.Context) ([]string, error) {
	if err := m.check("partitions"); err != nil {
		return nil, err
	}
	r, err := m.c.Partitions(ctx, &tqpb.PartitionsRequest{})
	if err != nil {
		return nil, m.fail(ctx, "partitions", read, err)
	}
	return r.GetPartitions(), nil
}

func (m *Meta) Delete(ctx context.Context, partition string, keys []string) ([]*metadata.Row, error) {
	return m.rows(ctx, "delete", write, func() (*tqpb.RowsReply, error) {
		return m.c.Delete(ctx, &tqpb.KeysRequest{Partition: partition, Keys: keys})
	})
}

func (m *Meta) DeletePartition(ctx context.Context, partition string) ([]*metadata.Row, error) {
	return m.rows(ctx, "delete partition", write, func() (*tqpb.RowsReply, error) {
		return m.c.DeletePartition(ctx, &tqpb.PartitionRequest{Partition: partition})
	})
}

func (m *Meta) refs(ctx context.Context, op string, call func() (*tqpb.RefsReply, error)) ([]metadata.Ref, error) {
	if err := m.check(op); err != nil {
		return nil, err
	}
	r, err := call()
	if err != nil {
		return nil, m.fail(ctx, op, write, err)
	}
	return fromRefs(r.GetRefs()), nil
}

func (m *Meta) Garbage(ctx context.Context, partition string, olderThan time.Duration) ([]metadata.Ref, error) {
	return m.refs(ctx, "garbage", func() (*tqpb.RefsReply, error) {
		return m.c.Garbage(ctx, &tqpb.GarbageRequest{Partition: partition, OlderThanNs: int64(olderThan)})
	})
}

func (m *Meta) DeleteFields(ctx context.Context, partition string, keys, fields []string) ([]metadata.Ref, error) {
	return m.refs(ctx, "delete fields", func() (*tqpb.RefsReply, error) {
		return m.c.DeleteFields(ctx, &tqpb.DeleteFieldsRequest{Partition: partition, Keys: keys, Fields: fields})
	})
}

func (m *Meta) Swept(ctx context.Context, partition string, refs []metadata.Ref) error {
	if err := m.check("swept"); err != nil {
		return err
	}
	_, err := m.c.Swept(ctx, &tqpb.RefsRequest{Partition: partition, Refs: toRefs(refs)})
	if err != nil {
		return m.fail(ctx, "swept", write, err)
	}
	return nil
}

func (m *Meta) Abandon(ctx context.Context, partition string, refs []metadata.Ref) error {
	if err := m.check("abandon"); err != nil {
		return err
	}
	_, err := m.c.Abandon(ctx, &tqpb.RefsRequest{Partition: partition, Refs: toRefs(refs)})
	if err != nil {
		return m.fail(ctx, "abandon", write, err)
	}
	return nil
}

// Claim implements metadata.Queue. A Custom claim takes two calls: the
// candidates, picked here, then the claim of the picked rows by index
// (a unit with a row taken meanwhile is skipped, as Claim skips one).
func (m *Meta) Claim(ctx context.Context, partition string, req metadata.ClaimRequest, pick metadata.Pick) (metadata.Claimed, error) {
	_, c, err := m.claim(ctx, partition, req, pick, nil)
	return c, err
}

// SettleClaim implements metadata.SettleClaimer: the settle rides on the
// claim's call.
func (m *Meta) SettleClaim(ctx context.Context, partition string, s metadata.SettleRequest, req metadata.ClaimRequest, pick metadata.Pick) (metadata.SettleResult, metadata.Claimed, error) {
	if err := s.Check(); err != nil {
		return metadata.SettleResult{}, metadata.Claimed{}, err
	}
	return m.claim(ctx, partition, req, pick, &s)
}

func (m *Meta) claim(ctx context.Context, partition string, req metadata.ClaimRequest, pick metadata.Pick, pre *metadata.SettleRequest) (metadata.SettleResult, metadata.Claimed, error) {
	var none metadata.SettleResult
	if err := m.check("claim"); err != nil {
		return none, metadata.Claimed{}, err
	}
	if err := req.Check(); err != nil {
		return none, metadata.Claimed{}, err
	}
	pr := toClaimRequest(partition, &req)
	pr.Compact = true
	undoable := m.version.Load() >= undoVersion && (req.Batch == nil || req.Batch.Ranks <= 1)
	if pr.Token == "" && undoable {
		// Chosen here, so that a claim whose reply is lost can be undone.
		pr.Token = metadata.NewLease(req.Holder)
	}
	if pre != nil {
		pr.SettleFirst = toSettleRequest(partition, *pre)
	}
	if req.Custom {
		// A replaced claim fulfilled meanwhile returns its lease with no
		// pick; the server knows, so ask it first without candidates.
		cr, err := m.c.Candidates(ctx, pr)
		if err != nil {
			return none, metadata.Claimed{}, m.fail(ctx, "claim candidates", read, err)
		}
		rows, err := fromRows(cr.GetRows())
		if err != nil {
			return none, metadata.Claimed{}, malformed("claim candidates", read, err)
		}
		if rows == nil {
			rows = []*metadata.Row{}
		}
		ds, err := fromDeliveries(cr.GetDeliveries(), m.clock(), nil)
		if err != nil {
			return none, metadata.Claimed{}, malformed("claim candidates", read, err)
		}
		p, err := pick(rows, ds)
		if err != nil {
			return none, metadata.Claimed{}, err
		}
		if err := metadata.CheckPicked(p, len(rows)); err != nil {
			return none, metadata.Claimed{}, err
		}
		for _, u := range p.Units {
			ix := make([]uint64, len(u))
			for j, i := range u {
				ix[j] = rows[i].Index
			}
			pr.Picked = append(pr.Picked, &tqpb.Unit{Indexes: ix})
		}
		for _, i := range p.Drop {
			pr.Drop = append(pr.Drop, rows[i].Index)
		}
	}
	r, err := m.c.Claim(ctx, pr)
	if err != nil {
		cause := m.fail(ctx, "claim", write, err)
		if undoable && errors.Is(cause, backends.ErrOutcomeUnknown) && !decided(err) {
			// Lost on the way (no decision of the server's): undo it.
			cause = m.undoClaim(ctx, partition, req.Task, pr.Token, pre != nil, cause)
		}
		return none, metadata.Claimed{}, cause
	}
	c, err := fromClaimedWith(r, m.clock(), &m.fields)
	if err != nil {
		return none, metadata.Claimed{}, malformed("claim", write, err)
	}
	if pre == nil {
		return none, c, nil
	}
	settled, err := fromSettleReply(r.GetSettled(), m.clock())
	if err != nil {
		return none, c, err
	}
	if f := r.GetSettleFailure(); f != nil {
		return settled, c, fromFailure(f)
	}
	return settled, c, nil
}

// undoFor bounds the undo of a claim whose reply was lost.
const undoFor = 10 * time.Second

// undoVersion is the first InfoReply.version whose server takes a claim's
// token from its client and undoes claims (ClaimRequest.token, Settle op
// UNDO): with an older server the client neither chooses tokens nor
// undoes.
const undoVersion = 3

// undoClaim undoes the claim of task with token whose reply was lost
// (cause, an outcome unknown): at the server, after the claim if it is
// still in flight, and for good if it is yet to arrive (SettleRequest
// undo), within undoFor. Undone, the claim's outcome is known, nothing
// held: the error says so and no longer matches ErrOutcomeUnknown, unless
// a settle rode on the claim (settled), whose outcome stays unknown. If
// the undo fails, cause is returned as it is. The caller does not wait
// past ctx: the undo then goes on in the background, till Close, and
// cause is returned with ctx's error. A rank's claim is never undone (its
// batch is shared).
func (m *Meta) undoClaim(ctx context.Context, partition, task, token string, settled bool, cause error) error {
	done := make(chan error, 1)
	m.bgMu.Lock()
	if m.closed.Load() {
		m.bgMu.Unlock()
		return cause
	}
	m.bg.Add(1)
	m.bgMu.Unlock()
	go func() {
		defer m.bg.Done()
		uctx, cancel := context.WithTimeout(m.life, undoFor)
		defer cancel()
		req := &tqpb.SettleRequest{Partition: partition, Task: task, Op: tqpb.SettleRequest_UNDO, Lease: token}
		_, err := m.c.Settle(uctx, req)
		// A server that went away (the lost reply's cause) may be back
		// soon: the undo is tried again until undoFor is over. (An
		// undo sent twice hands back nothing more.)
		for delay := 10 * time.Millisecond; err != nil && !decided(err) && uctx.Err() == nil; delay = min(2*delay, 500*time.Millisecond) {
			select {
			case <-uctx.Done():
			case <-time.After(delay):
				_, err = m.c.Settle(uctx, req)
			}
		}
		done <- err // a failure leaves the claim's lease to end
	}()
	select {
	case err := <-done:
		if err == nil && !settled && ctx.Err() == nil {
			// Known now: nothing applied, and it may be made again.
			return fmt.Errorf("tq server: claim: its reply was lost, and what it did was undone (nothing held): %v: %w", cause, backends.ErrUnavailable)
		}
	case <-ctx.Done():
	}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(cause, cerr) {
		return fmt.Errorf("%w (and its context ended: %w)", cause, cerr)
	}
	return cause
}

func (m *Meta) Settle(ctx context.Context, partition string, req metadata.SettleRequest) (metadata.SettleResult, error) {
	if err := m.check("settle"); err != nil {
		return metadata.SettleResult{}, err
	}
	r, err := m.c.Settle(ctx, toSettleRequest(partition, req))
	if err != nil {
		return metadata.SettleResult{}, m.fail(ctx, "settle", write, err)
	}
	return fromSettleReply(r, m.clock())
}

func toSettleRequest(partition string, req metadata.SettleRequest) *tqpb.SettleRequest {
	return &tqpb.SettleRequest{Partition: partition, Task: req.Task, Op: tqpb.SettleRequest_Op(req.Op),
		Lease: req.Lease, Indexes: req.Indexes, DelayNs: int64(req.Delay), Reason: req.Reason}
}

func fromSettleReply(r *tqpb.SettleReply, skew time.Duration) (metadata.SettleResult, error) {
	cleared, err := fromRows(r.GetCleared())
	if err != nil {
		return metadata.SettleResult{}, malformed("settle", write, err)
	}
	return metadata.SettleResult{Lost: r.GetLost(), Until: fromMoment(r.GetUntil(), skew), Cleared: cleared}, nil
}

func (m *Meta) Consumption(ctx context.Context, partition string, tasks ...string) (map[string][]metadata.Delivery, error) {
	if err := m.check("consumption"); err != nil {
		return nil, err
	}
	r, err := m.c.Consumption(ctx, &tqpb.TasksRequest{Partition: partition, Tasks: tasks})
	if err != nil {
		return nil, m.fail(ctx, "consumption", read, err)
	}
	out, err := fromTasks(r.GetTasks(), m.clock())
	if err != nil {
		return nil, malformed("consumption", read, err)
	}
	return out, nil
}

func (m *Meta) View(ctx context.Context, partition string, tasks ...string) (metadata.View, error) {
	if err := m.check("view"); err != nil {
		return metadata.View{}, err
	}
	r, err := m.c.View(ctx, &tqpb.TasksRequest{Partition: partition, Tasks: tasks})
	if err != nil {
		return metadata.View{}, m.fail(ctx, "view", read, err)
	}
	v, err := fromView(r, m.clock())
	if err != nil {
		return metadata.View{}, malformed("view", read, err)
	}
	return v, nil
}

// Summarize implements metadata.Summarizer: the server summarizes the
// partition, and its reply carries counts, not rows. A server that does
// not know the call (an older one) is asked for the View, summarized
// here.
func (m *Meta) Summarize(ctx context.Context, partition string, req metadata.SummaryRequest) (metadata.Summary, error) {
	if err := m.check("summary"); err != nil {
		return metadata.Summary{}, err
	}
	if err := req.Check(); err != nil {
		return metadata.Summary{}, err
	}
	r, err := m.c.Summary(ctx, toSummaryRequest(partition, &req))
	if status.Code(err) == codes.Unimplemented {
		v, err := m.View(ctx, partition, req.Tasks...)
		if err != nil {
			return metadata.Summary{}, err
		}
		return v.Summary(req), nil
	}
	if err != nil {
		return metadata.Summary{}, m.fail(ctx, "summary", read, err)
	}
	s, err := fromSummary(r, &req, m.clock())
	if err != nil {
		return metadata.Summary{}, malformed("summary", read, err)
	}
	return s, nil
}

func (m *Meta) Reset(ctx context.Context, partition, task string, indexes []uint64) error {
	if err := m.check("reset"); err != nil {
		return err
	}
	_, err := m.c.Reset(ctx, &tqpb.ResetRequest{Partition: partition, Task: task, Indexes: indexes, AllRows: indexes == nil})
	if err != nil {
		return m.fail(ctx, "reset", write, err)
	}
	return nil
}

// Wait implements metadata.Queue with one long call, which the server
// ends when the partition may have changed; a call cut short (the
// server restarting) returns nil, a spurious wake-up the contract allows,
// after a pause.
func (m *Meta) Wait(ctx context.Context, partition string, mark metadata.Mark) error {
	_, _, err := m.wait(ctx, partition, mark, false)
	return err
}

// WaitTake implements metadata.WaitTaker: the lease of the registered
// claim comes in the Wait's reply.
func (m *Meta) WaitTake(ctx context.Context, partition string, mark metadata.Mark) (metadata.Claimed, bool, error) {
	return m.wait(ctx, partition, mark, mark.Token != "")
}

func (m *Meta) wait(ctx context.Context, partition string, mark metadata.Mark, take bool) (metadata.Claimed, bool, error) {
	if err := m.check("wait"); err != nil {
		return metadata.Claimed{}, false, err
	}
	r, err := m.c.Wait(ctx, &tqpb.WaitRequest{Partition: partition, Mark: toMark(mark, m.clock()), Take: take, Compact: true})
	if err == nil {
		if r.GetTaken() == nil {
			return metadata.Claimed{}, false, nil
		}
		c, err := fromClaimedWith(r.GetTaken(), m.clock(), &m.fields)
		if err != nil {
			// The lease is the caller's to hand back (an Unwait).
			return metadata.Claimed{}, false, malformed("wait", read, err)
		}
		return c, true, nil
	}
	if cerr := ctx.Err(); cerr != nil {
		return metadata.Claimed{}, false, cerr
	}
	err = m.fail(ctx, "wait", read, err)
	if errors.Is(err, backends.ErrUnavailable) {
		// Not a change: wait a moment before the caller looks again.
		t := time.NewTimer(200 * time.Millisecond)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return metadata.Claimed{}, false, ctx.Err()
		case <-t.C:
		}
		return metadata.Claimed{}, false, nil
	}
	return metadata.Claimed{}, false, err
}
