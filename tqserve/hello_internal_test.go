package tqserve

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
)

// Opening a client of a server that does not answer, with a context that
// sets no deadline, gives up after openWait with an error that matches
// ErrUnavailable and names the server: it does not wait for ever.
func TestOpenWaitBounded(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	if err := lis.Close(); err != nil {
		t.Fatal(err)
	}
	defer func(d time.Duration) { openWait = d }(openWait)
	openWait = 300 * time.Millisecond
	done := make(chan error, 1)
	go func() {
		_, err := backends.Open(context.Background(), "tq://"+addr)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, backends.ErrUnavailable) || !strings.Contains(err.Error(), addr) {
			t.Fatalf("open of a server that does not answer: %v, want ErrUnavailable naming %s", err, addr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("open of a server that does not answer, with no deadline, still waiting after 10 s")
	}
}
