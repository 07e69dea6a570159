package tqserve

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcmd "google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tqgo/tqgo/backends"
	_ "github.com/tqgo/tqgo/backends/file"
	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/backends/metadata"
	_ "github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/internal/replica"
	"github.com/tqgo/tqgo/tqserve/tqpb"
)

// Server serves the metadata of an engine's partitions, and its cells
// when clients cannot reach them themselves, over gRPC: one process that
// runs the partitions' rules once for every client (see PROTOCOL.md).
// Make one with NewServer; serve with Serve; stop with Stop or
// GracefulStop, then Close.
type Server struct {
	tqpb.UnimplementedMetaServer
	cells cellServer
	sweep *sweeper // deletes the cells of rows calls cleared

	eng      backends.Engine
	meta     metadata.MetaStore
	cellsURL string
	name     string
	opts     serverOptions

	grpc   *grpc.Server
	health *health.Server
	// The unary calls a Calls stream runs, and the interceptors around
	// each (those of a unary call).
	unary     map[string]grpc.MethodDesc
	intercept grpc.UnaryServerInterceptor

	// own is set by Serve (the address clients reach is known then).
	ownMu sync.Mutex
	own   *ownership
	// stopping ends Waits in flight when the server stops.
	stopping context.Context
	stop     context.CancelFunc
}

// protocolVersion is InfoReply.version (tqserve/PROTOCOL.md, Versions).
const protocolVersion = 7

// ServerOption configures a Server.
type ServerOption func(*serverOptions) error

type serverOptions struct {
	advertise string
	ttl       time.Duration
	log       *slog.Logger
	inter     []grpc.UnaryServerInterceptor
	token     string
	creds     credentials.TransportCredentials
	cellsURL  *string
	maxMsg    int
	reclaim   time.Duration
}

// WithToken makes the server refuse every call that does not carry token
// as its bearer token (Unauthenticated). Empty: no token asked.
func WithToken(token string) ServerOption {
	return func(o *serverOptions) error { o.token = token; return nil }
}

// WithTLS serves over TLS with the certificate and key in these PEM files.
func WithTLS(certFile, keyFile string) ServerOption {
	return func(o *serverOptions) error {
		c, err := credentials.NewServerTLSFromFile(certFile, keyFile)
		if err != nil {
			return fmt.Errorf("%w: TLS certificate %s, key %s: %w", backends.ErrInvalid, certFile, keyFile, err)
		}
		o.creds = c
		return nil
	}
}

// WithCellsURL is the engine URL the server tells clients to read and
// write cells at themselves (the engine as the clients reach it: another
// host name, say). By default it is the engine's URL for an engine whose
// cells live on a server (redis://, redis+cluster://), and "" for one
// whose cells live in the server's process or directory (file://,
// memory://), whose cells the server then carries. "" makes the server
// carry every engine's cells.
func WithCellsURL(url string) ServerOption {
	return func(o *serverOptions) error { o.cellsURL = &url; return nil }
}

// WithAdvertise is the address (HOST:PORT) clients reach the server at,
// which it gives callers it sends to another server's partitions. Default:
// the listener's address (its host name when it listens on every
// interface).
func WithAdvertise(addr string) ServerOption {
	return func(o *serverOptions) error { o.advertise = addr; return nil }
}

// WithOwnership is how long the server's ownership of a partition lasts
// unless renewed (default DefaultOwnership): how long a partition of a
// server that died goes unserved. At least 100ms.
func WithOwnership(ttl time.Duration) ServerOption {
	return func(o *serverOptions) error {
		if ttl < 100*time.Millisecond {
			return fmt.Errorf("%w: ownership %v, under 100ms", backends.ErrInvalid, ttl)
		}
		o.ttl = ttl
		return nil
	}
}

// DefaultReclaimAfter is WithReclaim's default.
const DefaultReclaimAfter = time.Hour

// WithReclaim makes the server reclaim, every olderThan/4, the
// partitions calls reached in the last two olderThan that it still
// serves, as Client.Reclaim(ctx, partition, olderThan) does: it
// aborts the reservations of puts made olderThan ago or more and never
// committed (a client that died mid-put; their rows no longer hold room
// of the capacity) and deletes the cells nothing references, which a
// client left behind. A put that takes longer than olderThan is aborted
// (its commit fails with ErrConflict and it rolls back): olderThan must
// exceed the longest put. A reclaim visits the rows with a put pending,
// not every row (it costs the same at 10,000 rows as at 1,000,000: see
// docs/performance.md). It also ends the blocks of indexes no put took
// from for olderThan (see metadata.Blocker). Default DefaultReclaimAfter; 0
// reclaims nothing (a client's Reclaim still does).
func WithReclaim(olderThan time.Duration) ServerOption {
	return func(o *serverOptions) error {
		if olderThan < 0 {
			return fmt.Errorf("%w: reclaim after %v", backends.ErrInvalid, olderThan)
		}
		o.reclaim = olderThan
		return nil
	}
}

// WithLogger sets where the server logs what an operator should know
// (partitions taken and lost, hand-overs): default slog.Default().
func WithLogger(l *slog.Logger) ServerOption {
	return func(o *serverOptions) error { o.log = l; return nil }
}

// WithInterceptor runs f around every call the server answers, after
// the token check (metrics, logs).
func WithInterceptor(f grpc.UnaryServerInterceptor) ServerOption {
	return func(o *serverOptions) error { o.inter = append(o.inter, f); return nil }
}

// WithMaxMessage bounds the bytes of one request the server accepts
// (default 64 MiB); a larger one fails with ResourceExhausted and
// changes nothing.
func WithMaxMessage(n int) ServerOption {
	return func(o *serverOptions) error {
		if n < 1<<10 {
			return fmt.Errorf("%w: max message %d bytes, under 1 KiB", backends.ErrInvalid, n)
		}
		o.maxMsg = n
		return nil
	}
}

// NewServer opens the engine at engineURL (any scheme an imported engine
// registered, but tq://) and makes a server of its partitions. Its
// housekeeping runs from then on: Close it (or Stop it) to end that and
// release the engine.
func NewServer(ctx context.Context, engineURL string, opts ...ServerOption) (*Server, error) {
	o := serverOptions{maxMsg: 64 << 20, ttl: DefaultOwnership, log: slog.Default(), reclaim: DefaultReclaimAfter}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if strings.HasPrefix(engineURL, Scheme+"://") {
		return nil, fmt.Errorf("%w: a tq server serves an engine, not another tq server (%s)", backends.ErrInvalid, Scheme)
	}
	eng, err := backends.Open(ctx, engineURL)
	if err != nil {
		return nil, err
	}
	s := &Server{eng: eng, opts: o}
	s.stopping, s.stop = context.WithCancel(context.Background())
	switch {
	case eng.Meta != nil:
		m, ok := eng.Meta.(metadata.MetaStore)
		if !ok {
			_ = eng.Close()
			return nil, fmt.Errorf("%w: engine metadata is not a MetaStore", backends.ErrInvalid)
		}
		s.meta = m
	case eng.Log != nil:
		s.meta = replica.NewStore(eng.Log, eng.Data, replica.OwnsLog())
	case eng.Local:
		s.meta = memory.NewMetaStore()
	default:
		_ = eng.Close()
		return nil, fmt.Errorf("%w: engine %s keeps no metadata a server could serve", backends.ErrInvalid, redact(engineURL))
	}
	switch {
	case o.cellsURL != nil:
		s.cellsURL = *o.cellsURL
	case strings.HasPrefix(engineURL, "redis"):
		s.cellsURL = engineURL
	}
	s.cells = cellServer{data: eng.Data}
	s.sweep = newSweeper(eng.Data, s.meta, o.log)
	if o.reclaim > 0 {
		s.sweep.reclaimEvery(o.reclaim, s.serving)
	}
	host, _ := os.Hostname()
	s.name = fmt.Sprintf("%s/%d", host, os.Getpid())

	s.unary = unaryMethods()
	s.intercept = chainUnary(append(append([]grpc.UnaryServerInterceptor{s.authorize}, o.inter...), validate, s.served))
	sopts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(o.maxMsg),
		grpc.MaxSendMsgSize(1 << 30),
		serverKeepalive(),
		grpc.UnaryInterceptor(s.intercept),
		grpc.StreamInterceptor(s.authorizeStream),
	}
	sopts = append(sopts, serverWindows()...)
	if o.creds != nil {
		sopts = append(sopts, grpc.Creds(o.creds))
	}
	s.grpc = grpc.NewServer(sopts...)
	tqpb.RegisterMetaServer(s.grpc, s)
	tqpb.RegisterCellsServer(s.grpc, &s.cells)
	s.health = health.NewServer()
	healthpb.RegisterHealthServer(s.grpc, s.health)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(tqpb.Meta_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	return s, nil
}

// Serve accepts connections on lis until Stop or GracefulStop. On an
// engine that other servers may share (backends.Owners), the server
// serves the partitions it owns, taking each free one at its first call.
func (s *Server) Serve(lis net.Listener) error {
	s.ownMu.Lock()
	if s.own == nil {
		var owners backends.Owners
		if o, ok := s.eng.Log.(backends.Owners); ok {
			owners = o
		}
		var inherit func(context.Context, string) error
		if h, ok := s.meta.(inheritor); ok {
			inherit = h.Inherit
		}
		s.own = newOwnership(owners, advertised(s.opts.advertise, lis.Addr()), s.opts.ttl, s.opts.log, inherit)
	}
	s.ownMu.Unlock()
	return s.grpc.Serve(lis)
}

// inheritor is a MetaStore that settles, for a server taking a partition
// over, what the partition's former owner left: the standing claims it
// held for clients whose Waits ended with it (replica.Meta.Inherit).
type inheritor interface {
	Inherit(ctx context.Context, partition string) error
}

// advertised is the address clients reach a listener at.
func advertised(given string, a net.Addr) string {
	if given != "" {
		return given
	}
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if h, err := os.Hostname(); err == nil {
			host = h
		}
	}
	return net.JoinHostPort(host, port)
}

func (s *Server) ownership() *ownership {
	s.ownMu.Lock()
	defer s.ownMu.Unlock()
	return s.own
}

// served is the interceptor that sends a call naming a partition this
// server does not serve to the one that does (MOVED), before its handler.
func (s *Server) served(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	if p, ok := req.(interface{ GetPartition() string }); ok {
		if err := s.owns(ctx, p.GetPartition()); err != nil {
			return nil, toStatus(err)
		}
		s.sweep.reached(p.GetPartition())
	}
	return next(ctx, req)
}

// serving reports whether the server serves partition now, without
// taking it: what its reclaims visit.
func (s *Server) serving(partition string) bool {
	o := s.ownership()
	return o != nil && o.serving(partition)
}

// owns returns nil when the server serves partition, else the error that
// sends the caller elsewhere.
func (s *Server) owns(ctx context.Context, partition string) error {
	o := s.ownership()
	if o == nil {
		return nil // not serving yet: a call made in-process
	}
	return o.check(ctx, partition)
}

// GracefulStop marks the server not serving, hands its partitions over
// (other servers take them at their next call), ends Waits (as a Wait
// may end early) and Calls streams, lets the other calls in flight
// finish, and stops. What is still open GracefulFor after the hand-over
// (a health Watch, which grpc-go's graceful stop would wait for as long
// as its client keeps it) is cut off, as Stop cuts it.
func (s *Server) GracefulStop() {
	s.health.Shutdown()
	if o := s.ownership(); o != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		o.handOver(ctx)
		cancel()
	}
	s.stop()
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	t := time.NewTimer(GracefulFor)
	select {
	case <-done:
	case <-t.C:
		s.grpc.Stop() // GracefulStop returns with it
		<-done
	}
	t.Stop()
	s.sweep.close()
}

// GracefulFor bounds how long GracefulStop lets calls and streams in
// flight finish once its partitions are handed over and its Waits ended.
const GracefulFor = 5 * time.Second

// Stop ends every connection and call at once; the partitions it owned
// are handed over.
func (s *Server) Stop() {
	if o := s.ownership(); o != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		o.handOver(ctx)
		cancel()
	}
	s.stop()
	s.grpc.Stop()
	s.sweep.close()
}

// Close stops the server (Stop) and closes its engine.
func (s *Server) Close() error {
	s.Stop()
	return errors.Join(s.meta.Close(), s.eng.Data.Close())
}

// kill stops the server as SIGKILL would: nothing handed over, its
// ownerships left to end by themselves (tests).
func (s *Server) kill() error {
	if o := s.ownership(); o != nil {
		o.abandon()
	}
	s.stop()
	s.grpc.Stop()
	s.sweep.end() // nothing more is deleted: left to Reclaim
	s.sweep.close()
	return errors.Join(s.meta.Close(), s.eng.Data.Close())
}

// Serve serves engineURL's partitions on lis until ctx ends, then stops
// gracefully and closes the engine: an owner embedded in a program.
func Serve(ctx context.Context, lis net.Listener, engineURL string, opts ...ServerOption) error {
	s, err := NewServer(ctx, engineURL, opts...)
	if err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			s.GracefulStop()
		case <-done:
		}
	}()
	err = s.Serve(lis)
	close(done)
	return errors.Join(err, s.Close())
}

func (s *Server) authorize(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	if err := s.checkToken(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return next(ctx, req)
}

// authorizeStream refuses a stream (Calls) without the token, as
// authorize refuses a unary call: a Calls stream's calls are checked
// again one by one.
func (s *Server) authorizeStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, next grpc.StreamHandler) error {
	if err := s.checkToken(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return next(srv, ss)
}

// checkToken fails with Unauthenticated unless the call of method
// carries the server's token (when it has one; the health service needs
// none).
func (s *Server) checkToken(ctx context.Context, method string) error {
	if s.opts.token == "" || strings.HasPrefix(method, "/grpc.health.") {
		return nil
	}
	md, _ := grpcmd.FromIncomingContext(ctx)
	got := ""
	if v := md.Get("authorization"); len(v) == 1 {
		if t, ok := strings.CutPrefix(v[0], "Bearer "); ok {
			got = t
		}
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(s.opts.token)) != 1 {
		return status.Error(codes.Unauthenticated, "missing or wrong bearer token")
	}
	return nil
}

func redact(url string) string {
	if at := strings.LastIndexByte(url, '@'); at >= 0 {
		if i := strings.Index(url, "://"); i >= 0 && i < at {
			return url[:i+3] + "xxxxx" + url[at:]
		}
	}
	return url
}

// The Meta service: each call converts, calls the MetaStore, converts back.

func (s *Server) Info(context.Context, *tqpb.InfoRequest) (*tqpb.InfoReply, error) {
	return &tqpb.InfoReply{CellsUrl: s.cellsURL, Server: s.name, Version: protocolVersion, Now: &tqpb.Moment{UnixNs: time.Now().UnixNano()}}, nil
}

func (s *Server) Prepare(ctx context.Context, r *tqpb.PrepareRequest) (*tqpb.PrepareReply, error) {
	res, err := s.meta.Prepare(ctx, r.GetPartition(), r.GetKeys(), r.GetFields(), nilIfEmpty(r.GetSizes()))
	if err != nil {
		return nil, toStatus(err)
	}
	out := make([]*tqpb.Reservation, len(res))
	for i, rv := range res {
		out[i] = &tqpb.Reservation{Index: rv.Index, Gens: rv.Gens, New: rv.New}
	}
	return &tqpb.PrepareReply{Reservations: out}, nil
}

func nilIfEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}

func rowsReply(rows []*metadata.Row, err error) (*tqpb.RowsReply, error) {
	if err != nil {
		return nil, toStatus(err)
	}
	pr, err := toRows(rows)
	if err != nil {
		return nil, toStatus(err)
	}
	return &tqpb.RowsReply{Rows: pr}, nil
}

func (s *Server) SetCapacity(ctx context.Context, r *tqpb.SetCapacityRequest) (*tqpb.RowsReply, error) {
	return rowsReply(s.meta.SetCapacity(ctx, r.GetPartition(), fromCapacity(r.GetCapacity())))
}

func (s *Server) Commit(ctx context.Context, r *tqpb.CommitRequest) (*tqpb.CommitReply, error) {
	us, err := fromUpdates(r.GetUpdates())
	if err != nil {
		return nil, toStatus(fmt.Errorf("%w: commit: %w", backends.ErrInvalid, err))
	}
	res, err := s.meta.Commit(ctx, r.GetPartition(), us)
	if err != nil {
		return nil, toStatus(err)
	}
	return &tqpb.CommitReply{Superseded: toRefs(res.Superseded), Stale: toRefs(res.Stale)}, nil
}

// unsupported is the status of a call the server's MetaStore cannot
// make (an optional interface it lacks): as a call the server does not
// know, refused before it ran.
func unsupported(err error) error {
	if errors.Is(err, errors.ErrUnsupported) {
		return status.Error(codes.Unimplemented, err.Error())
	}
	return toStatus(err)
}

func (s *Server) Block(ctx context.Context, r *tqpb.BlockRequest) (*tqpb.BlockReply, error) {
	b, err := metadata.Block(ctx, s.meta, r.GetPartition(), r.GetFields(), int(r.GetN()))
	if err != nil {
		return nil, unsupported(err)
	}
	return &tqpb.BlockReply{Base: b.Base, Token: b.Token}, nil
}

func (s *Server) PutNew(ctx context.Context, r *tqpb.PutNewRequest) (*tqpb.CommitReply, error) {
	us, err := fromUpdates(r.GetUpdates())
	if err != nil {
		return nil, toStatus(fmt.Errorf("%w: put new: %w", backends.ErrInvalid, err))
	}
	keys := make([]string, len(us))
	for i := range us {
		keys[i] = us[i].Key
	}
	res, err := metadata.PutNew(ctx, s.meta, r.GetPartition(), r.GetToken(), r.GetBase(), keys, r.GetFields(), nilIfEmpty(r.GetSizes()), us)
	if err != nil {
		return nil, unsupported(err)
	}
	return &tqpb.CommitReply{Superseded: toRefs(res.Superseded), Stale: toRefs(res.Stale)}, nil
}

func (s *Server) ReleaseBlock(ctx context.Context, r *tqpb.ReleaseBlockRequest) (*tqpb.Empty, error) {
	b := metadata.IndexBlock{Base: r.GetBase(), Token: r.GetToken()}
	return &tqpb.Empty{}, unsupported(metadata.ReleaseBlock(ctx, s.meta, r.GetPartition(), b, r.GetWritten()))
}

func (s *Server) Lookup(ctx context.Context, r *tqpb.KeysRequest) (*tqpb.LookupReply, error) {
	rows, err := s.meta.Lookup(ctx, r.GetPartition(), r.GetKeys())
	if err != nil {
		return nil, toStatus(err)
	}
	out := make([]*tqpb.MaybeRow, len(rows))
	for i, row := range rows {
		out[i] = &tqpb.MaybeRow{}
		if row != nil {
			pr, err := toRow(row)
			if err != nil {
				return nil, toStatus(err)
			}
			out[i].Row = pr
		}
	}
	return &tqpb.LookupReply{Rows: out}, nil
}

func (s *Server) List(ctx context.Context, r *tqpb.PartitionRequest) (*tqpb.RowsReply, error) {
	return rowsReply(s.meta.List(ctx, r.GetPartition()))
}

func (s *Server) Partitions(ctx context.Context, _ *tqpb.PartitionsRequest) (*tqpb.PartitionsReply, error) {
	ps, err := s.meta.Partitions(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return &tqpb.PartitionsReply{Partitions: ps}, nil
}

func (s *Server) Delete(ctx context.Context, r *tqpb.KeysRequest) (*tqpb.RowsReply, error) {
	return rowsReply(s.meta.Delete(ctx, r.GetPartition(), r.GetKeys()))
}

func (s *Server) DeletePartition(ctx context.Context, r *tqpb.PartitionRequest) (*tqpb.RowsReply, error) {
	return rowsReply(s.meta.DeletePartition(ctx, r.GetPartition()))
}

func (s *Server) Garbage(ctx context.Context, r *tqpb.GarbageRequest) (*tqpb.RefsReply, error) {
	refs, err := s.meta.Garbage(ctx, r.GetPartition(), time.Duration(r.GetOlderThanNs()))
	if err != nil {
		return nil, toStatus(err)
	}
	return &tqpb.RefsReply{Refs: toRefs(refs)}, nil
}

func (s *Server) Swept(ctx context.Context, r *tqpb.RefsRequest) (*tqpb.Empty, error) {
	return &tqpb.Empty{}, toStatus(s.meta.Swept(ctx, r.GetPartition(), fromRefs(r.GetRefs())))
}

func (s *Server) Abandon(ctx context.Context, r *tqpb.RefsRequest) (*tqpb.Empty, error) {
	return &tqpb.Empty{}, toStatus(s.meta.Abandon(ctx, r.GetPartition(), fromRefs(r.GetRefs())))
}

func (s *Server) DeleteFields(ctx context.Context, r *tqpb.DeleteFieldsRequest) (*tqpb.RefsReply, error) {
	refs, err := s.meta.DeleteFields(ctx, r.GetPartition(), r.GetKeys(), r.GetFields())
	if err != nil {
		return nil, toStatus(err)
	}
	return &tqpb.RefsReply{Refs: toRefs(refs)}, nil
}

// errCaptured ends the claim Candidates makes once its pick has seen the
// candidates: a pick's error applies nothing.
var errCaptured = errors.New("candidates captured")

func (s *Server) Candidates(ctx context.Context, r *tqpb.ClaimRequest) (*tqpb.CandidatesReply, error) {
	req, err := fromClaimRequest(r)
	if err != nil {
		return nil, toStatus(err)
	}
	if !req.Custom {
		return nil, toStatus(invalidf("candidates of a claim that is not custom"))
	}
	// Only the rows: no registration, no replaced claim, no rank's share
	// of an open batch (each would change state without a pick).
	req.Hold, req.Replaces, req.Batch = 0, "", nil
	// A claim picks on the server's copy as it is (a claim's append
	// catches it up, and a pick made here picks again then), which may
	// be behind the log (another server owned the partition, another
	// process wrote to it): the client picks once, so the candidates are
	// the log's. A lookup of no key catches the copy up.
	if _, err := s.meta.Lookup(ctx, r.GetPartition(), nil); err != nil {
		return nil, toStatus(err)
	}
	var rows []*metadata.Row
	var ds []metadata.Delivery
	c, err := s.meta.Claim(ctx, r.GetPartition(), req, func(rs []*metadata.Row, d []metadata.Delivery) (metadata.Picked, error) {
		rows, ds = rs, d
		return metadata.Picked{}, errCaptured
	})
	if err != nil && !errors.Is(err, errCaptured) {
		return nil, toStatus(err)
	}
	if err == nil && c.Lease != "" {
		// Not reached: the pick refused. Keep nothing leased.
		return nil, toStatus(fmt.Errorf("candidates: the claim leased rows"))
	}
	if w := int(r.GetWindow()); w > 0 && len(rows) > w {
		rows, ds = rows[:w], ds[:w]
	}
	pr, err := toRows(rows)
	if err != nil {
		return nil, toStatus(err)
	}
	return &tqpb.CandidatesReply{Rows: pr, Deliveries: toDeliveries(ds, 0), Mark: toMark(c.Mark, 0)}, nil
}

func (s *Server) Claim(ctx context.Context, r *tqpb.ClaimRequest) (*tqpb.ClaimReply, error) {
	req, err := fromClaimRequest(r)
	if err != nil {
		return nil, toStatus(err)
	}
	if err := req.Check(); err != nil {
		return nil, toStatus(err)
	}
	var pick metadata.Pick
	if req.Custom {
		pick = pickByIndex(r.GetPicked(), r.GetDrop())
	}
	if sf := r.GetSettleFirst(); sf != nil {
		res, c, err := metadata.SettleClaim(ctx, s.meta, r.GetPartition(), settleRequest(sf), req, pick)
		s.swept(r.GetPartition(), &res.Cleared, &c.Cleared)
		if err != nil && c.Lease == "" && c.Waiting == "" {
			return nil, toStatus(err)
		}
		out, cerr := toClaimed(&c, 0, r.GetCompact())
		if cerr != nil {
			return nil, toStatus(cerr)
		}
		if out.Settled, cerr = settleReply(res); cerr != nil {
			return nil, toStatus(cerr)
		}
		if err != nil {
			out.SettleFailure = failureOf(err)
		}
		return out, nil
	}
	c, err := s.meta.Claim(ctx, r.GetPartition(), req, pick)
	if err != nil {
		return nil, toStatus(err)
	}
	s.swept(r.GetPartition(), &c.Cleared)
	out, err := toClaimed(&c, 0, r.GetCompact())
	if err != nil {
		return nil, toStatus(err)
	}
	return out, nil
}

// pickByIndex is the pick of a custom claim whose client picked by row
// index: the units and drops among the rows the store offers, in the
// client's order; a unit with a row not offered (no longer ready) is left
// out, as a claim skips a unit with a row no longer ready.
func pickByIndex(units []*tqpb.Unit, drop []uint64) metadata.Pick {
	return func(rows []*metadata.Row, _ []metadata.Delivery) (metadata.Picked, error) {
		pos := make(map[uint64]int, len(rows))
		for i, r := range rows {
			pos[r.Index] = i
		}
		used := make(map[int]bool)
		var p metadata.Picked
	units:
		for _, u := range units {
			ps := make([]int, 0, len(u.GetIndexes()))
			for _, ix := range u.GetIndexes() {
				i, ok := pos[ix]
				if !ok || used[i] || slices.Contains(ps, i) {
					continue units
				}
				ps = append(ps, i)
			}
			if len(ps) == 0 {
				continue
			}
			for _, i := range ps {
				used[i] = true
			}
			p.Units = append(p.Units, ps)
		}
		for _, ix := range drop {
			if i, ok := pos[ix]; ok && !used[i] {
				used[i] = true
				p.Drop = append(p.Drop, i)
			}
		}
		return p, nil
	}
}

func (s *Server) Settle(ctx context.Context, r *tqpb.SettleRequest) (*tqpb.SettleReply, error) {
	res, err := s.meta.Settle(ctx, r.GetPartition(), settleRequest(r))
	if err != nil {
		return nil, toStatus(err)
	}
	s.swept(r.GetPartition(), &res.Cleared)
	out, err := settleReply(res)
	if err != nil {
		return nil, toStatus(err)
	}
	return out, nil
}

// swept hands the rows of partition a call cleared to the server's
// sweeper, which deletes their cells, and leaves the reply none to list:
// its client has nothing to delete.
func (s *Server) swept(partition string, cleared ...*[]*metadata.Row) {
	for _, rows := range cleared {
		s.sweep.cleared(partition, *rows)
		*rows = nil
	}
}

func settleRequest(r *tqpb.SettleRequest) metadata.SettleRequest {
	return metadata.SettleRequest{Task: r.GetTask(), Op: metadata.SettleOp(r.GetOp()), Lease: r.GetLease(),
		Indexes: r.GetIndexes(), Delay: time.Duration(r.GetDelayNs()), Reason: r.GetReason()}
}

func settleReply(res metadata.SettleResult) (*tqpb.SettleReply, error) {
	cleared, err := toRows(res.Cleared)
	if err != nil {
		return nil, err
	}
	return &tqpb.SettleReply{Lost: res.Lost, Until: toMoment(res.Until, 0), Cleared: cleared}, nil
}

func (s *Server) Consumption(ctx context.Context, r *tqpb.TasksRequest) (*tqpb.ConsumptionReply, error) {
	m, err := s.meta.Consumption(ctx, r.GetPartition(), r.GetTasks()...)
	if err != nil {
		return nil, toStatus(err)
	}
	return &tqpb.ConsumptionReply{Tasks: toTasks(m, 0)}, nil
}

func (s *Server) View(ctx context.Context, r *tqpb.TasksRequest) (*tqpb.ViewReply, error) {
	v, err := s.meta.View(ctx, r.GetPartition(), r.GetTasks()...)
	if err != nil {
		return nil, toStatus(err)
	}
	out, err := toView(&v, 0)
	if err != nil {
		return nil, toStatus(err)
	}
	return out, nil
}

// Summary computes the summary from the server's own view of the
// partition: the rows stay here.
func (s *Server) Summary(ctx context.Context, r *tqpb.SummaryRequest) (*tqpb.SummaryReply, error) {
	req := fromSummaryRequest(r)
	sum, err := metadata.Summarize(ctx, s.meta, r.GetPartition(), req)
	if err != nil {
		return nil, toStatus(err)
	}
	return toSummary(&sum, 0), nil
}

func (s *Server) Reset(ctx context.Context, r *tqpb.ResetRequest) (*tqpb.Empty, error) {
	var ix []uint64
	if !r.GetAllRows() {
		ix = r.GetIndexes()
		if ix == nil {
			ix = []uint64{}
		}
	}
	return &tqpb.Empty{}, toStatus(s.meta.Reset(ctx, r.GetPartition(), r.GetTask(), ix))
}

func (s *Server) Wait(ctx context.Context, r *tqpb.WaitRequest) (*tqpb.WaitReply, error) {
	// A stopping server ends its Waits: the callers look again, elsewhere.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.stopping, cancel)
	defer stop()
	mark := fromMark(r.GetMark(), 0)
	var c metadata.Claimed
	var took bool
	var err error
	if r.GetTake() {
		c, took, err = metadata.WaitTake(wctx, s.meta, r.GetPartition(), mark)
	} else {
		err = s.meta.Wait(wctx, r.GetPartition(), mark)
	}
	switch {
	case err != nil && ctx.Err() != nil:
		// The caller's deadline: the call's own status says so.
		return nil, status.FromContextError(ctx.Err()).Err()
	case err != nil && s.stopping.Err() != nil:
		return &tqpb.WaitReply{}, nil // a graceful stop: a spurious wake-up
	case err != nil:
		return nil, toStatus(err)
	}
	out := &tqpb.WaitReply{}
	if took {
		s.swept(r.GetPartition(), &c.Cleared)
		if out.Taken, err = toClaimed(&c, 0, r.GetCompact()); err != nil {
			return nil, toStatus(err)
		}
	}
	return out, nil
}
