package tqserve

import (
	"fmt"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
)

// dialCounter dials lazily (no server needed) and keeps every connection
// it made.
type dialCounter struct {
	mu    sync.Mutex
	conns []*grpc.ClientConn
}

func (d *dialCounter) dial(addr string) (*grpc.ClientConn, error) {
	c, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err == nil {
		d.mu.Lock()
		d.conns = append(d.conns, c)
		d.mu.Unlock()
	}
	return c, err
}

// open counts the connections made and not closed.
func (d *dialCounter) open() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range d.conns {
		if c.GetState() != connectivity.Shutdown {
			n++
		}
	}
	return n
}

// The connections a client makes to follow MOVED replies are closed once
// no partition is routed over them and no call is in flight on them: a
// long job whose servers come and go (each restart a new address) keeps
// a connection per server that owns one of its partitions, not one per
// server it ever met; and Close closes the rest.
func TestRouterClosesUnusedConnections(t *testing.T) {
	d := &dialCounter{}
	r := newRouter(d.dial)
	// The owner of p moves from server to server.
	for i := range 20 {
		if !r.setRoute("p", fmt.Sprintf("127.0.0.1:%d", 20000+i)) {
			t.Fatal("setRoute refused")
		}
	}
	if n := d.open(); n != 1 {
		t.Fatalf("after p's owner moved 20 times, %d connections open, want 1", n)
	}
	// Its owner goes away: the client goes back to the URL's servers.
	c := r.route("p")
	r.dropRoute("p", c)
	r.done(c)
	if n := d.open(); n != 0 {
		t.Fatalf("after p's route was dropped, %d connections open, want 0", n)
	}
	// A call in flight keeps its connection until it ends.
	r.setRoute("q", "127.0.0.1:30000")
	c = r.route("q")
	r.setRoute("q", "127.0.0.1:30001")
	if n := d.open(); n != 2 {
		t.Fatalf("with a call in flight on q's former owner, %d connections open, want 2", n)
	}
	r.done(c)
	if n := d.open(); n != 1 {
		t.Fatalf("after the call ended, %d connections open, want 1", n)
	}
	// Routes are bounded: a job that makes a partition per step does not
	// keep a route for each.
	for i := range 3 * maxRoutes {
		r.setRoute(fmt.Sprintf("p%d", i), "127.0.0.1:30001")
	}
	r.mu.Lock()
	routes := len(r.routes)
	r.mu.Unlock()
	if routes > maxRoutes {
		t.Fatalf("%d routes kept, want at most %d", routes, maxRoutes)
	}
	r.close()
	if n := d.open(); n != 0 {
		t.Fatalf("after close, %d connections open, want 0", n)
	}
}
