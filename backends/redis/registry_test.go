package redis

import (
	"slices"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/internal/redistest"
)

// TestPartitionsAfterFencedFirstWrite: the first write of a fresh
// partition whose request failed without a reply is settled by
// fenceScript, which creates the log (holding the fence) and cannot touch
// the prefix's registry. Rows committed into that log later must still
// make the partition one Partitions lists.
func TestPartitionsAfterFencedFirstWrite(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		opts []Option
	}{{"standalone", nil}, {"cluster path", []Option{WithClusterSafe()}}} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := OpenURL(ctx, srv.URL()+"?prefix=fenced", tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			m := s.Meta()
			defer m.Close()
			part := "p-" + tc.name
			pk := m.keys(part)
			// What settle does for a first Prepare that never reached the
			// server: the log is still absent, so it is created, fenced.
			reply, err := fenceScript.Run(ctx, s.client, []string{pk.l, pk.e, pk.h, pk.x},
				"", 0, "", newID(), newID(), newEpoch()).Slice()
			if err != nil || len(reply) != 1 || reply[0] != "fenced" {
				t.Fatalf("fence: %v, %v", reply, err)
			}
			res, err := m.Prepare(ctx, part, []string{"k"}, []string{"f"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.Commit(ctx, part, []backends.RowUpdate{{Key: "k", Index: res[0].Index,
				Fields: map[string]backends.FieldInfo{"f": {Gen: res[0].Gens["f"]}}}}); err != nil {
				t.Fatal(err)
			}
			got, err := m.Partitions(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(got, part) {
				t.Fatalf("Partitions = %q after a committed row in %q, want it listed", got, part)
			}
		})
	}
}
