package tqserve

import (
	"context"
	"sync"
)

// waitStop ends the Waits in flight when the server stops gracefully: a
// Wait may last as long as its caller's deadline (or for ever), and a
// graceful stop waits for every call in flight. Each ends as a spurious
// wake-up, which Wait allows. The zero value is ready for use.
type waitStop struct {
	once   sync.Once
	ctx    context.Context
	cancel context.CancelFunc
}

func (w *waitStop) init() {
	w.once.Do(func() { w.ctx, w.cancel = context.WithCancel(context.Background()) })
}

// bound is ctx, ended by stop as well.
func (w *waitStop) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	w.init()
	ctx, cancel := context.WithCancel(ctx)
	unhook := context.AfterFunc(w.ctx, cancel)
	return ctx, func() { unhook(); cancel() }
}

// stopping reports whether stop was called.
func (w *waitStop) stopping() bool {
	w.init()
	return w.ctx.Err() != nil
}

// stop ends every Wait in flight and every one to come.
func (w *waitStop) stop() {
	w.init()
	w.cancel()
}
