package tq_test

import (
	"context"
	"slices"
	"testing"

	"github.com/tqgo/tqgo/tq"
)

// BatchGetByMeta reads the keys of m.Rows in m.Partition, as BatchGet does:
// a BatchMeta whose Partition, or a row's Key or Index, the caller changed
// gives the rows it now names, never the data of the rows it was taken from.
func TestBatchGetByMetaReadsTheRowsItNames(t *testing.T) {
	ctx := context.Background()
	c, _ := memClient(t)
	keys := []string{"a", "b"}
	mustPut(t, c, "step-3", keys, tq.Batch{"x": tq.ValuesOf([]string{"3a", "3b"})}, nil)
	mustPut(t, c, "step-4", keys, tq.Batch{"x": tq.ValuesOf([]string{"4a", "4b"})}, nil)
	for _, tc := range []struct {
		name string
		edit func(m *tq.BatchMeta)
		want []any
	}{
		{"as listed", func(*tq.BatchMeta) {}, []any{"3a", "3b"}},
		{"partition edited", func(m *tq.BatchMeta) { m.Partition = "step-4" }, []any{"4a", "4b"}},
		{"key edited", func(m *tq.BatchMeta) { m.Rows = m.Rows[:1]; m.Rows[0].Key = "b" }, []any{"3b"}},
		{"index edited", func(m *tq.BatchMeta) { m.Rows[0].Index = m.Rows[1].Index }, []any{"3a", "3b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := c.List(ctx, "step-3")
			if err != nil {
				t.Fatal(err)
			}
			tc.edit(m)
			b, err := c.BatchGetByMeta(ctx, m, "x")
			if err != nil {
				t.Fatal(err)
			}
			if got := b["x"].Values(); !slices.Equal(got, tc.want) {
				t.Errorf("BatchGetByMeta of partition %q keys %v = %v, want %v", m.Partition, m.Keys(), got, tc.want)
			}
		})
	}
}
