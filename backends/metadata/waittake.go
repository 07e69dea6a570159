package metadata

import "context"

// WaitTaker is an optional interface of a MetaStore whose Wait can hand
// over the lease of the registered claim it waits on, so that a waiting
// worker has its rows with the wake-up itself (a tq server's clients: the
// claim replacing the registered one is then not sent).
type WaitTaker interface {
	// WaitTake is Wait. When it returns nil and mark.Token's registered
	// claim has been fulfilled, it also returns that claim's lease
	// (took), as the claim replacing it would, and the claim is no longer
	// registered. When it returns an error, the caller cancels the
	// registered claim as after any failed Wait (an Unwait of
	// mark.Token), which hands back a lease taken for a reply that was
	// lost; a claim replacing it instead finds it gone and claims afresh,
	// its lease handed back undelivered where that claim lands.
	WaitTake(ctx context.Context, partition string, mark Mark) (c Claimed, took bool, err error)
}

// WaitTake waits through q: with WaitTake when q is a WaitTaker and
// mark names a registered claim, else as q.Wait (taking nothing).
func WaitTake(ctx context.Context, q MetaStore, partition string, mark Mark) (Claimed, bool, error) {
	if wt, ok := q.(WaitTaker); ok && mark.Token != "" {
		return wt.WaitTake(ctx, partition, mark)
	}
	return Claimed{}, false, q.Wait(ctx, partition, mark)
}
