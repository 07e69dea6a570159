package redis_test

import (
	"net"
	"sync"
	"testing"
	"time"
)

// switchProxy forwards TCP to a target the test can change. switchTo
// points new connections at another server and closes the open ones, as
// a failover moves clients to the promoted replica; a target of "" cuts
// the link: open connections close and new ones are refused. Everything
// closes, and its goroutines end, with the test.
type switchProxy struct {
	ln net.Listener
	wg sync.WaitGroup

	mu     sync.Mutex // guards target and conns
	target string
	conns  map[net.Conn]struct{}
}

func startSwitchProxy(t *testing.T, target string) *switchProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &switchProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.switchTo("")
		p.wg.Wait()
	})
	return p
}

// addr is the proxy's "host:port".
func (p *switchProxy) addr() string { return p.ln.Addr().String() }

// url is a redis URL through the proxy, under prefix, with more query
// parameters (e.g. "&replicas=1") appended.
func (p *switchProxy) url(prefix, more string) string {
	return "redis://" + p.addr() + "/0?prefix=" + prefix + more
}

// switchTo makes new connections go to target ("" refuses them) and
// closes those open, so that clients reconnect through the new target.
func (p *switchProxy) switchTo(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *switchProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		var server net.Conn
		if target != "" {
			server, err = net.DialTimeout("tcp", target, 5*time.Second)
		}
		p.mu.Lock()
		if target == "" || err != nil || p.target != target {
			// Refused, unreachable, or switched while dialling.
			p.mu.Unlock()
			client.Close()
			if server != nil {
				server.Close()
			}
			continue
		}
		p.conns[client], p.conns[server] = struct{}{}, struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		forget := func() {
			p.mu.Lock()
			delete(p.conns, client)
			delete(p.conns, server)
			p.mu.Unlock()
		}
		go func() {
			defer p.wg.Done()
			pump(server, client, nil)
			forget()
		}()
		go func() {
			defer p.wg.Done()
			pump(client, server, nil)
			forget()
		}()
	}
}
