package redis_test

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/internal/replica"
	"github.com/tqgo/tqgo/tq"
)

// TestSettleAfterCompaction: a put's commit applies, its reply is lost,
// and before the engine settles it another client's write compacts the
// partition's log (a snapshot, under a new epoch, in place of the
// records). The settle then cannot find the commit's record, yet the
// commit applied: the put must not report a definite failure (tq would
// delete the cells of rows that are committed). On the fused path the
// settle runs at once (unknown outcome); through go-redis, its resend of
// the append finds the log replaced and the commit computes again.
func TestSettleAfterCompaction(t *testing.T) {
	defer replica.SetDefaultCompactAfter(1)()
	srv := redistest.Start(t)
	p := startRequestProxy(t, srv.Addr())
	ctx := t.Context()
	for _, query := range []string{"prefix=sc1", "prefix=sc2&direct=false"} {
		t.Run(query, func(t *testing.T) {
			setup := proxyTQ(t, srv.URL()+"?"+query)
			if err := setup.BatchPut(ctx, part, baseRows, batchOf(baseRows, oldSeed, false), nil); err != nil {
				t.Fatal(err)
			}
			other := proxyTQ(t, srv.URL()+"?"+query)
			if _, err := other.List(ctx, part); err != nil {
				t.Fatal(err)
			}
			faulted := proxyTQ(t, p.url(query))
			if _, err := faulted.List(ctx, part); err != nil {
				t.Fatal(err)
			}
			// The log holds the base rows' Prepare and commit; the put
			// adds its own two; the other client's put adds two more
			// and, at six records, compacts.
			compacted := false
			p.setOnLostReply(func() {
				if err := other.BatchPut(ctx, part, []string{"z"}, batchOf([]string{"z"}, oldSeed, false), nil); err != nil {
					t.Errorf("the other client's put: %v", err)
				}
				compacted = true
			})
			defer p.setOnLostReply(nil)
			// The commit is the put's second counted request (MULTI),
			// or its third (after the cells' MSET).
			nth := 2
			if query != "prefix=sc1" {
				nth = 3
			}
			fired := p.arm(nil, plannedFault{nth: nth, kind: faultLoseReply})
			keys := slices.Concat(putReplaced, putNew)
			err := faulted.BatchPut(ctx, part, keys, batchOf(keys, newSeed, false), nil)
			seen := p.requestsSeen()
			p.reset()
			<-fired[0]
			t.Logf("requests %q; BatchPut: %v", seen, err)
			if !compacted {
				t.Fatal("the other client did not write")
			}
			fresh := proxyTQ(t, srv.URL()+"?"+query)
			m, lerr := fresh.List(ctx, part)
			if lerr != nil {
				t.Fatal(lerr)
			}
			got, gerr := fresh.BatchGet(ctx, part, m.Keys())
			if gerr != nil {
				t.Fatalf("BatchPut returned %v; BatchGet of the listed rows %q: %v", err, m.Keys(), gerr)
			}
			// The commit applied: its rows are there with its values.
			if want := slices.Concat(baseRows, putNew, []string{"z"}); !slices.Equal(m.Keys(), want) {
				t.Fatalf("rows %q, want %q", m.Keys(), want)
			}
			x, _ := got["x"].Tensor()
			for i, k := range m.Keys() {
				seed := byte(oldSeed)
				if slices.Contains(keys, k) {
					seed = newSeed
				}
				if !bytes.Equal(x.Data[i*cellBytes:(i+1)*cellBytes], cellOf(k, seed)) {
					t.Fatalf("row %q does not read back the value of its last put", k)
				}
			}
			if err != nil && !errors.Is(err, tq.ErrOutcomeUnknown) {
				t.Fatalf("BatchPut returned %v, a definite failure, but its commit applied", err)
			}
		})
	}
}
