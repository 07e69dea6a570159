package redis_test

import (
	"bytes"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/internal/redistest"
)

// TestReadDeadlinePerRound: on a link where each read round takes well
// under the client's read_timeout+write_timeout but the whole call takes
// longer, Read (no ctx deadline) succeeds: the timeouts bound each
// round, not the call.
func TestReadDeadlinePerRound(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	p := startTCPProxy(t, srv.Addr(), func(client, server net.Conn) {
		go pump(client, server, throttle)
		pump(server, client, nil)
	})
	// Per-do deadline: 150ms + 150ms = 300 ms. Rounds of 256 KiB take ~40 ms
	// each; 16 rounds of them ~650 ms.
	s := open(t, p.url("dl")+"&read_timeout=150ms&write_timeout=150ms&read_round_bytes=262144")
	const n, size = 64, 64 << 10
	keys := make([]string, n)
	vals := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%02d", i)
		vals[i] = bytes.Repeat([]byte{byte(i)}, size)
	}
	if err := putVals(ctx, s, keys, vals); err != nil {
		t.Fatal(err)
	}
	dst := make([]backends.ReadCell, n)
	for i := range dst {
		dst[i] = backends.ReadCell{Key: keys[i], Head: make([]byte, 1), Body: make([]byte, size-1)}
	}
	start := time.Now()
	err := s.Read(ctx, dst)
	t.Logf("Read took %v: %v", time.Since(start), err)
	if err != nil {
		t.Fatalf("Read of rounds each far inside read_timeout: %v", err)
	}
	for i, d := range dst {
		if !d.Found || !bytes.Equal(append(d.Head, d.Body...), vals[i]) {
			t.Fatalf("value %d read wrong", i)
		}
	}
}

// TestWriteDeadlinePerRound: the same for writes. Client to server is
// throttled, so each 256 KiB round takes about 40 ms to write and the
// whole put of 4 MiB about 650 ms, past read_timeout+write_timeout (500
// ms): the put succeeds, and every value reads back.
func TestWriteDeadlinePerRound(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	p := startTCPProxy(t, srv.Addr(), func(client, server net.Conn) {
		go pump(client, server, nil)
		pump(server, client, throttle)
	})
	s := open(t, p.url("dlw")+"&read_timeout=250ms&write_timeout=250ms&write_round_bytes=262144")
	const n, size = 64, 64 << 10
	keys := make([]string, n)
	heads := make([][]byte, n)
	bodies := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%02d", i)
		heads[i] = []byte{byte(i)}
		bodies[i] = bytes.Repeat([]byte{byte(i)}, size-1)
	}
	start := time.Now()
	cells := make([]backends.Cell, n)
	for i := range cells {
		cells[i] = backends.Cell{Key: keys[i], Head: heads[i], Body: bodies[i]}
	}
	err := s.Write(ctx, cells)
	t.Logf("Write took %v: %v", time.Since(start), err)
	if err != nil {
		t.Fatalf("Write of rounds each far inside the timeouts: %v", err)
	}
	direct := open(t, srv.URL()+"?prefix=dlw")
	got, err := getVals(ctx, direct, keys)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if !bytes.Equal(v, append([]byte{byte(i)}, bodies[i]...)) {
			t.Fatalf("value %d read back wrong", i)
		}
	}
}

// throttle passes each chunk (at most 64 KiB) after 10 ms: about 6.5 MB/s.
func throttle(chunk []byte) ([]byte, bool) {
	time.Sleep(10 * time.Millisecond)
	return chunk, false
}
