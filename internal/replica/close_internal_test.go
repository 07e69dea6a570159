package replica

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest/toylog"
)

// gateLog holds each Append until the test releases it or its context
// ends, and counts the Appends in flight.
type gateLog struct {
	backends.Log
	entered  chan struct{}
	release  chan struct{}
	inflight atomic.Int64
}

func (l *gateLog) Append(ctx context.Context, partition string, from backends.Pos, recs []backends.Record) (backends.Tail, error) {
	l.inflight.Add(1)
	defer l.inflight.Add(-1)
	l.entered <- struct{}{}
	select {
	case <-l.release:
	case <-ctx.Done():
		return backends.Tail{}, ctx.Err()
	}
	return l.Log.Append(ctx, partition, from, recs)
}

// Close waits for the append of a group of records (calls that came while
// another append was in flight) as for everything else this Meta runs in
// the background: when it returns, nothing of the Meta is left writing to
// the log it may close.
func TestCloseWaitsForGroupAppend(t *testing.T) {
	ctx := context.Background()
	e := toylog.NewServer(nil).Engine()
	defer e.Close()
	gl := &gateLog{Log: e.Log, entered: make(chan struct{}), release: make(chan struct{})}
	m := New(gl, e.Data)
	first := make(chan error, 1)
	go func() { first <- m.Reset(ctx, "p", "t", nil) }()
	<-gl.entered // the first call's append, in flight
	second := make(chan error, 1)
	go func() { second <- m.Reset(ctx, "p", "t", nil) }()
	// The second call's record waits in the group for the append in flight.
	p := m.part("p")
	deadline := time.Now().Add(10 * time.Second)
	for {
		p.mu.Lock()
		grouped := p.next != nil && len(p.next.recs) > 0
		p.mu.Unlock()
		if grouped {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second call never joined a group")
		}
		time.Sleep(time.Millisecond)
	}
	gl.release <- struct{}{}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	<-gl.entered // the group's append, in flight
	closed := make(chan error, 1)
	go func() { closed <- m.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		gl.release <- struct{}{}
		t.Fatal("Close did not return while a group's append was held")
	}
	if n := gl.inflight.Load(); n != 0 {
		gl.release <- struct{}{}
		<-second
		t.Fatalf("Close returned with %d group append(s) in flight", n)
	}
	if err := <-second; err == nil {
		t.Fatal("the grouped call, cut off by Close, reported success")
	}
}
