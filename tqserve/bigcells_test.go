package tqserve_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/tq"
)

// Cells of tens of MiB, larger than a stream's flow control window and
// several at once larger than the connection's, go through a server over
// file:// and come back whole.
func TestBigCellsThroughServer(t *testing.T) {
	s := startServer(t, "file://"+t.TempDir()+"?sync=never")
	e, err := backends.Open(t.Context(), s.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Meta.Close(); _ = e.Data.Close() })
	const size = 40 << 20
	const n = 4
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := bytes.Repeat([]byte{byte(i + 1)}, size)
			cells := []backends.Cell{{Key: fmt.Sprintf("big%d", i), Body: body}}
			if err := e.Data.Write(t.Context(), cells); err != nil {
				errs <- fmt.Errorf("write %d: %w", i, err)
				return
			}
			rc := []backends.ReadCell{{Key: cells[0].Key, Tag: cells[0].Tag}}
			if err := e.Data.Read(t.Context(), rc); err != nil {
				errs <- fmt.Errorf("read %d: %w", i, err)
				return
			}
			if !rc[0].Found || !bytes.Equal(rc[0].Value, body) {
				errs <- fmt.Errorf("cell %d: found %v, %d bytes back, want %d", i, rc[0].Found, len(rc[0].Value), size)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d cells of %d MiB written and read in %v", n, size>>20, time.Since(start))
}

// A put whose cells add up to more than a server's largest request (64
// MiB by default), through a server over file:// that carries them, is
// written as on file:// itself, and read back whole: the client sends
// the cells in requests the server takes.
func TestBatchPastMaxMessageThroughServer(t *testing.T) {
	s := startServer(t, "file://"+t.TempDir()+"?sync=never")
	c := openClient(t, s.URL)
	const rows, size = 4, 24 << 20 // 96 MiB in all
	data := make([]byte, rows*size)
	for i := range data {
		data[i] = byte(i / size * 7)
	}
	keys := []string{"a", "b", "c", "d"}
	if err := c.BatchPut(t.Context(), "p", keys, tq.Batch{"x": tq.Stacked(data, rows, size)}, nil); err != nil {
		t.Fatalf("put of %d rows of %d MiB: %v", rows, size>>20, err)
	}
	got, err := c.BatchGet(t.Context(), "p", keys)
	if err != nil {
		t.Fatal(err)
	}
	tensor, ok := got["x"].Tensor()
	if !ok || !bytes.Equal(tensor.Data, data) {
		t.Fatalf("read back %d bytes (stacked %v), want the %d written", len(tensor.Data), ok, len(data))
	}
}
