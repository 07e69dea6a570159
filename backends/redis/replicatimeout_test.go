package redis

import (
	"errors"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/internal/replica"
)

// TestReplicaTimeoutUnderAMillisecond: WAIT takes milliseconds, and 0
// blocks forever; a positive timeout under a millisecond must still bound
// the wait, so that a commit no replica acknowledges gets the WAIT's own
// count (none), not a read timeout.
func TestReplicaTimeoutUnderAMillisecond(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	s, err := OpenURL(ctx, "redis://"+srv.Addr()+"?read_timeout=1s", WithReplicas(1, 500*time.Microsecond))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	defer s.Log().Close()
	m := replica.New(s.Log(), s)
	defer m.Close()
	// With replicas, a Prepare waits too: reserve through a store without
	// them, and bring m's view up to date with a read (which waits for
	// none).
	res := prepareUnreplicated(t, srv.Addr(), "p", "k")
	if _, err := m.Lookup(ctx, "p", []string{"k"}); err != nil {
		t.Fatal(err)
	}
	_, err = m.Commit(ctx, "p", []metadata.RowUpdate{{Key: "k", Index: res[0].Index, Fields: map[string]metadata.FieldInfo{"f": {Gen: res[0].Gens["f"]}}}})
	var short *notReplicated
	if !errors.As(err, &short) || short.err != nil || short.got != 0 || !errors.Is(err, backends.ErrOutcomeUnknown) {
		t.Fatalf("Commit with no replica and a 500us replica timeout: %v, want the WAIT's count of 0 replicas", err)
	}
}

// prepareUnreplicated reserves key's field f in partition through a store
// of its own on addr, without WithReplicas.
func prepareUnreplicated(t *testing.T, addr, partition, key string) []metadata.Reservation {
	t.Helper()
	s, err := OpenURL(t.Context(), "redis://"+addr)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	defer s.Log().Close()
	res, err := replica.New(s.Log(), s).Prepare(t.Context(), partition, []string{key}, []string{"f"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}
