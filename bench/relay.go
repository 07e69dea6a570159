package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// The wake-up's gRPC limit on a served target: the hand-off of "wake-up
// to row in hand" through a server that is grpc-go and nothing else, the
// floor of the served path under tq's own work. A relay process (the
// bench binary run again as a child, an OS process of its own as tq
// serve is) serves one bidirectional streaming method, described by hand
// and carried by a codec of raw bytes (no protobuf); each of its clients,
// a producer and a consumer of the bench's, has a connection of its own
// and keeps one stream open on it, as a tq client keeps its Calls
// stream. On it a client sends one message at a time and reads its
// reply:
//
//   - a wait (relayWaitMsg): the stream's handler blocks, waiting on a
//     channel, until a put arrives (or takes one that arrived before it),
//     then replies relayRow;
//   - a put (relayPutMsg): the handler wakes the oldest blocked wait (or,
//     with none blocked, keeps the put for the next wait) and replies
//     relayAck.
//
// So a hand-off costs what tq's does in gRPC: the producer's message
// read by its stream's handler, which wakes the handler of the
// consumer's stream, whose reply is written by the transport of the
// consumer's connection and read by the consumer's; and the producer's
// reply on its own stream.
//
// The consumer sweep's gRPC limit uses the same relay: an echo
// (relayEchoMsg) is answered at once with relayEchoReply, the sizes of a
// Claim(8) with the ack of the previous lease riding on it, as a tq
// client sends it on its Calls stream, and of its compact reply. So an
// echo costs what a claim costs in gRPC alone, with nothing decided.
//
// The relay and its clients set gRPC's flow control windows as a tq
// server and its clients do (tqserve/transport.go): static, 4 MiB per
// stream and 16 MiB per connection, so that neither side pings the other
// after every message to measure the connection.
const (
	relayStreamWindow = 4 << 20
	relayConnWindow   = 16 << 20
)

// relayLimit is the relay's name as a limit of the queue table.
const relayLimit = "gRPC stream relay (grpc-go alone)"

// relayService and relayMethod name the relay's one method.
const (
	relayService = "tqbench.Relay"
	relayMethod  = "/" + relayService + "/Relay"
)

// The relay's messages: a request's first byte says what it is.
const (
	relayWait = 'w'
	relayPut  = 'p'
	relayEcho = 'e'
)

// The relay's messages, never modified (gRPC may write them after
// SendMsg returns): a wait and a put of 64 and 128 bytes, and the replies
// to them, of a leased row (200 bytes) and of a put (50 bytes).
var (
	relayWaitMsg = relayRequest(relayWait, 64)
	relayPutMsg  = relayRequest(relayPut, 128)
	relayRow     = make([]byte, 200)
	relayAck     = make([]byte, 50)

	relayEchoMsg   = relayRequest(relayEcho, 188)
	relayEchoReply = make([]byte, 332)
)

func relayRequest(kind byte, n int) []byte {
	b := make([]byte, n)
	b[0] = kind
	return b
}

// relayCodec carries a relay message as its bytes: the message of
// SendMsg and RecvMsg is a *[]byte. It is set on the relay's server and
// its clients' connections only (grpc.ForceServerCodecV2,
// grpc.ForceCodecV2), not registered.
type relayCodec struct{}

func (relayCodec) Marshal(v any) (mem.BufferSlice, error) {
	p, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("relay codec: a %T is not a *[]byte", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(*p)}, nil
}

func (relayCodec) Unmarshal(data mem.BufferSlice, v any) error {
	p, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("relay codec: a %T is not a *[]byte", v)
	}
	*p = data.Materialize()
	return nil
}

func (relayCodec) Name() string { return "tqbench-raw" }

// relayDesc is the relay's service: one bidirectional stream, served by a
// *relayServer.
var relayDesc = grpc.ServiceDesc{
	ServiceName: relayService,
	HandlerType: (*any)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName:    "Relay",
		Handler:       func(srv any, st grpc.ServerStream) error { return srv.(*relayServer).serve(st) },
		ServerStreams: true,
		ClientStreams: true,
	}},
}

// relayServer is the relay process's queue: puts that no wait has taken
// yet, and the blocked waits, oldest first, each woken by the close of
// its channel.
type relayServer struct {
	mu      sync.Mutex
	ready   int
	waiters []chan struct{}
}

// serve answers the messages of one stream, one at a time, until the
// client ends it.
func (s *relayServer) serve(st grpc.ServerStream) error {
	for {
		var msg []byte
		if err := st.RecvMsg(&msg); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		var reply []byte
		switch {
		case len(msg) > 0 && msg[0] == relayWait:
			if err := s.wait(st.Context()); err != nil {
				return status.FromContextError(err).Err()
			}
			reply = relayRow
		case len(msg) > 0 && msg[0] == relayPut:
			s.put()
			reply = relayAck
		case len(msg) > 0 && msg[0] == relayEcho:
			reply = relayEchoReply
		default:
			return status.Errorf(codes.InvalidArgument, "relay: a message of %d bytes is neither a wait, a put nor an echo", len(msg))
		}
		if err := st.SendMsg(&reply); err != nil {
			return err
		}
	}
}

// wait takes a put, blocking until there is one or ctx ends.
func (s *relayServer) wait(ctx context.Context) error {
	s.mu.Lock()
	if s.ready > 0 {
		s.ready--
		s.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	s.waiters = append(s.waiters, ch)
	s.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		select {
		case <-ch: // woken as it left: the put stays for the next wait
			s.ready++
		default:
			for i, w := range s.waiters {
				if w == ch {
					s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
					break
				}
			}
		}
		return ctx.Err()
	}
}

// put wakes the oldest blocked wait, or keeps the put for the next.
func (s *relayServer) put() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.waiters) == 0 {
		s.ready++
		return
	}
	close(s.waiters[0])
	s.waiters = s.waiters[1:]
}

// relayChild is the relay process: it serves on a free loopback port,
// writes "serving ADDR" to out, and serves until in ends (its parent
// closed it, or died) or serving fails.
func relayChild(in io.Reader, out io.Writer) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(relayCodec{}),
		grpc.StaticStreamWindowSize(relayStreamWindow), grpc.StaticConnWindowSize(relayConnWindow))
	srv.RegisterService(&relayDesc, &relayServer{})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	ended := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, in)
		ended <- err
	}()
	if _, err := fmt.Fprintln(out, "serving", l.Addr()); err != nil {
		srv.Stop()
		return errors.Join(err, <-served)
	}
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case err = <-ended:
	}
	srv.Stop()
	if err != nil {
		err = fmt.Errorf("stdin: %w", err)
	}
	return errors.Join(err, <-served)
}

// relayProc is a running relay process.
type relayProc struct {
	cmd    *exec.Cmd
	in     io.WriteCloser // closing it stops the relay
	addr   string
	exited chan error
}

// relayStopWait is how long stop waits for the relay to exit.
const relayStopWait = 10 * time.Second

// startRelay runs the bench binary as the relay process and returns once
// it serves.
func startRelay(ctx context.Context) (*relayProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childEnv+"=relay")
	cmd.Stderr = os.Stderr
	// The relay dies with the bench, whatever ends it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the gRPC relay process: %w", err)
	}
	p := &relayProc{cmd: cmd, in: in, exited: make(chan error, 1)}
	first := make(chan string, 1)
	go func() {
		r := bufio.NewReader(out)
		line, _ := r.ReadString('\n')
		first <- line
		_, _ = io.Copy(io.Discard, r) // Wait closes the pipe: read it to its end first
		p.exited <- cmd.Wait()
	}()
	var line string
	select {
	case line = <-first:
	case <-ctx.Done():
	case <-time.After(30 * time.Second):
	}
	if addr, ok := strings.CutPrefix(strings.TrimSpace(line), "serving "); ok {
		p.addr = addr
		return p, nil
	}
	_ = cmd.Process.Kill()
	err = <-p.exited
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case line == "":
		return nil, fmt.Errorf("the gRPC relay process did not serve (%v)", err)
	}
	return nil, fmt.Errorf("the gRPC relay process said %q, not that it serves", line)
}

// stop closes the relay's stdin, which stops it, waits for it to exit,
// and kills it after relayStopWait.
func (p *relayProc) stop() error {
	err := p.in.Close()
	select {
	case e := <-p.exited:
		if e != nil {
			err = errors.Join(err, fmt.Errorf("the gRPC relay process (pid %d): %w", p.cmd.Process.Pid, e))
		}
	case <-time.After(relayStopWait):
		_ = p.cmd.Process.Kill()
		<-p.exited
		err = errors.Join(err, fmt.Errorf("the gRPC relay process (pid %d) did not stop within %v of its stdin's end, killed", p.cmd.Process.Pid, relayStopWait))
	}
	return err
}

// relayClient is a client of the relay: a connection of its own and a
// stream kept open on it.
type relayClient struct {
	conn   *grpc.ClientConn
	st     grpc.ClientStream
	cancel context.CancelFunc // ends the stream
}

// dialRelay connects to the relay at addr and opens the client's stream.
func dialRelay(ctx context.Context, addr string) (*relayClient, error) {
	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(relayCodec{})),
		grpc.WithStaticStreamWindowSize(relayStreamWindow), grpc.WithStaticConnWindowSize(relayConnWindow))
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancel) // the open is bounded by ctx, the stream by close
	st, err := conn.NewStream(sctx, &relayDesc.Streams[0], relayMethod)
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		cancel()
		return nil, errors.Join(fmt.Errorf("open a stream of the gRPC relay: %w", err), conn.Close())
	}
	return &relayClient{conn: conn, st: st, cancel: cancel}, nil
}

// call sends msg on the client's stream and returns when its reply, of
// want bytes, is read. ctx ending ends the stream, and every later call
// on it fails.
func (c *relayClient) call(ctx context.Context, msg []byte, want int) error {
	stop := context.AfterFunc(ctx, c.cancel)
	defer stop()
	// On EOF the stream ended before msg was sent; RecvMsg says how.
	if err := c.st.SendMsg(&msg); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	var reply []byte
	if err := c.st.RecvMsg(&reply); err != nil {
		if errors.Is(err, io.EOF) {
			err = errors.New("the gRPC relay ended the stream")
		}
		return err
	}
	if len(reply) != want {
		return fmt.Errorf("the gRPC relay replied %d bytes, want %d", len(reply), want)
	}
	return nil
}

func (c *relayClient) close() error {
	c.cancel()
	return c.conn.Close()
}

// relay is the relay process with the bench's producer and consumer
// clients of it.
type relay struct {
	proc               *relayProc
	producer, consumer *relayClient
}

// openRelay starts the relay process and connects its two clients. Call
// close when done.
func openRelay(ctx context.Context) (*relay, error) {
	proc, err := startRelay(ctx)
	if err != nil {
		return nil, err
	}
	r := &relay{proc: proc}
	if r.producer, err = dialRelay(ctx, proc.addr); err == nil {
		r.consumer, err = dialRelay(ctx, proc.addr)
	}
	if err != nil {
		return nil, errors.Join(err, r.close())
	}
	return r, nil
}

// close closes the clients, then stops the relay process.
func (r *relay) close() error {
	var err error
	for _, c := range []*relayClient{r.producer, r.consumer} {
		if c != nil {
			err = errors.Join(err, c.close())
		}
	}
	return errors.Join(err, r.proc.stop())
}

// wakeOnce times one hand-off through the relay as timeWake times tq's:
// from the producer's put returning to the consumer's wait, sent wakeGap
// before, returning.
func (r *relay) wakeOnce(ctx context.Context) (time.Duration, error) {
	return timeWake(ctx, func(ctx context.Context) error {
		return r.producer.call(ctx, relayPutMsg, len(relayAck))
	}, func(ctx context.Context) (func() error, error) {
		return nil, r.consumer.call(ctx, relayWaitMsg, len(relayRow))
	})
}
