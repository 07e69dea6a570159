package tqserve_test

import (
	"strings"
	"testing"
)

// A client's calls and the server's replies carry no ping with them:
// neither side measures the connection after each message it receives
// (gRPC's dynamic flow control windows, which would ping once per call
// each way). The only pings are keepalive's, after 10 s with nothing
// received.
func TestNoPingPerCall(t *testing.T) {
	s := startServer(t, "memory://tqserve-no-ping")
	p := startGRPCProxy(t, strings.TrimPrefix(s.URL, "tq://"))
	m := openMeta(t, "tq://"+p.addr())
	const n = 50
	for i := range n {
		commitRow(t, m, "p", "k"+string(rune('a'+i)))
	}
	for range n {
		c, err := m.Claim(callCtx(t), "p", claimReq("t"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Rows) != 1 {
			t.Fatalf("claimed %d rows, want 1", len(c.Rows))
		}
	}
	if got := p.seen(mClaim); got != n {
		t.Fatalf("the proxy saw %d claims, want %d", got, n)
	}
	// 2n calls (n commits, n claims): with dynamic windows, about three
	// PING frames each way per call. A few are allowed: the connection's
	// set-up may ping.
	for _, dir := range []string{pingsFromClients, pingsFromServer} {
		if got := p.seen(dir); got > 4 {
			t.Errorf("%d %s over %d calls, want at most 4", got, dir, 2*n)
		}
	}
}
