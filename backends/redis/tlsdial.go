package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"
)

// goRedisDialTimeout is go-redis's DialTimeout when the URL gives none.
const goRedisDialTimeout = 5 * time.Second

// keepAlive is the TCP keep-alive of go-redis's own dialer (NewDialer).
var keepAlive = net.KeepAliveConfig{Enable: true, Idle: 30 * time.Second, Interval: 5 * time.Second, Count: 3}

// tlsDialer is go-redis's dialer for a TLS URL (NewDialer) in two steps,
// TCP then the handshake, both within timeout (0: go-redis's default) and
// ctx, so that a handshake that fails says so (a *handshakeError) instead
// of go-redis's bare "context deadline exceeded". cfg is not modified.
func tlsDialer(timeout time.Duration, cfg *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if timeout == 0 {
		timeout = goRedisDialTimeout
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		d := net.Dialer{KeepAliveConfig: keepAlive}
		raw, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c := cfg
		if c.ServerName == "" && !c.InsecureSkipVerify {
			// As tls.Dial does: verify the certificate against the host.
			c = cfg.Clone()
			c.ServerName, _, _ = net.SplitHostPort(addr)
		}
		conn := tls.Client(raw, c)
		if err := conn.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, &handshakeError{addr: addr, err: err}
		}
		return conn, nil
	}
}

// handshakeError is a TCP connection whose TLS handshake failed.
type handshakeError struct {
	addr string
	err  error
}

func (e *handshakeError) Error() string {
	msg := fmt.Sprintf("TLS handshake with %s failed: %v", e.addr, e.err)
	if e.notTLS() {
		msg += ": the server may not speak TLS (a plaintext server takes redis://, not rediss://)"
	}
	return msg
}

func (e *handshakeError) Unwrap() error { return e.err }

// notTLS reports a failure a server that does not speak TLS causes: a
// reply that is no TLS record, no reply at all (Redis waits for the end
// of an inline command that never comes), or a dropped connection. A
// certificate the client refuses, or an alert, comes from a TLS server.
func (e *handshakeError) notTLS() bool {
	var rh tls.RecordHeaderError
	var ne net.Error
	return errors.As(e.err, &rh) || errors.As(e.err, &ne) && ne.Timeout() ||
		errors.Is(e.err, context.DeadlineExceeded) || errors.Is(e.err, io.EOF) ||
		errors.Is(e.err, io.ErrUnexpectedEOF) || errors.Is(e.err, syscall.ECONNRESET)
}

// probeTLS makes one connection through dial and closes it, so that a
// server that does not speak TLS fails OpenURL within the dial timeout:
// go-redis's pool dials five times (DialerRetries) before its error
// comes back, each attempt waiting out the timeout against a plaintext
// Redis. Only a failed handshake is returned; a failed TCP dial is left
// to the open's PING, with go-redis's retries.
func probeTLS(ctx context.Context, dial func(ctx context.Context, network, addr string) (net.Conn, error), network, addr string) error {
	conn, err := dial(ctx, network, addr)
	if err == nil {
		return conn.Close()
	}
	var he *handshakeError
	if errors.As(err, &he) {
		return err
	}
	return nil
}
