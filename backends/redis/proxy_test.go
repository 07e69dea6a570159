package redis_test

import (
	"net"
	"sync"
	"testing"
)

// tcpProxy forwards TCP between a test's clients and a redis-server; its
// serve handles each client connection with a connection of its own to the
// server, and may interfere with what passes. Connections close with the
// test.
type tcpProxy struct {
	ln net.Listener

	mu    sync.Mutex
	conns []net.Conn
}

func startTCPProxy(t *testing.T, target string, serve func(client, server net.Conn)) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln}
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				client.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, client, server)
			p.mu.Unlock()
			go serve(client, server)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
	return p
}

// url is a redis URL through the proxy, under prefix.
func (p *tcpProxy) url(prefix string) string {
	return "redis://" + p.ln.Addr().String() + "/0?prefix=" + prefix
}

// pump copies src to dst a chunk at a time until either side ends, then
// closes both. each, if not nil, sees every chunk first and returns what
// to forward (nil: nothing) and whether to stop after it; the chunk is
// only valid during the call.
func pump(dst, src net.Conn, each func(chunk []byte) (forward []byte, stop bool)) {
	defer src.Close()
	defer dst.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			out, stop := buf[:n], false
			if each != nil {
				out, stop = each(out)
			}
			if len(out) > 0 {
				if _, err := dst.Write(out); err != nil {
					return
				}
			}
			if stop {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
