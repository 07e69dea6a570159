package yuanrong_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/tqgo/tqgo/yuanrong"
)

// TestMain fails the run if a test leaves a goroutine behind (a packer
// pool that Close did not release, say).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) // ants starts its default pool at init
}

// The faults countingDS injects.
var (
	errPublish = errors.New("injected publish fault")
	errCreate  = errors.New("injected create fault")
)

// countingDS wraps a DataSystem, recording the size of every batch call,
// and fails the failPublish-th MPublish call (1-based; 0 never) after
// letting the wrapped datasystem publish the first half of its buffers,
// so a failure leaves a partly published round behind as a real one may;
// likewise it fails the failCreate-th MCreate call.
type countingDS struct {
	yuanrong.DataSystem
	failPublish int
	failCreate  int

	mu        sync.Mutex // guards the fields below
	creates   []int
	publishes []int
	gets      []int
	deletes   []int
}

func (c *countingDS) MCreate(ctx context.Context, keys []string, sizes []int) ([]yuanrong.Buffer, error) {
	c.mu.Lock()
	c.creates = append(c.creates, len(keys))
	fail := len(c.creates) == c.failCreate
	c.mu.Unlock()
	if fail {
		return nil, errCreate
	}
	return c.DataSystem.MCreate(ctx, keys, sizes)
}

func (c *countingDS) MPublish(ctx context.Context, bufs []yuanrong.Buffer) error {
	c.mu.Lock()
	c.publishes = append(c.publishes, len(bufs))
	fail := len(c.publishes) == c.failPublish
	c.mu.Unlock()
	if fail {
		if err := c.DataSystem.MPublish(ctx, bufs[:len(bufs)/2]); err != nil {
			return err
		}
		return errPublish
	}
	return c.DataSystem.MPublish(ctx, bufs)
}

func (c *countingDS) MGet(ctx context.Context, keys []string) ([][]byte, error) {
	c.mu.Lock()
	c.gets = append(c.gets, len(keys))
	c.mu.Unlock()
	return c.DataSystem.MGet(ctx, keys)
}

func (c *countingDS) Delete(ctx context.Context, keys []string) error {
	c.mu.Lock()
	c.deletes = append(c.deletes, len(keys))
	c.mu.Unlock()
	return c.DataSystem.Delete(ctx, keys)
}

// calls returns copies of the recorded batch sizes and forgets them.
func (c *countingDS) calls() (creates, publishes, gets, deletes []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	creates, publishes, gets, deletes = c.creates, c.publishes, c.gets, c.deletes
	c.creates, c.publishes, c.gets, c.deletes = nil, nil, nil, nil
	return
}
