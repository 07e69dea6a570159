package metadata

import (
	"slices"
	"strings"
)

// AppendRowRefs appends the cells of rows to dst, row by row and by field
// name within a row: the order tq reports removed rows' cells swept in (see
// MetaStore.Swept), which a store may record them in (memory does). Rows that
// share a Fields map (see Merger) share the work of ordering it.
func AppendRowRefs(dst []Ref, rows []*Row) []Ref {
	var (
		prev   map[string]FieldInfo
		sorted []Ref // prev's cells by field, Index unset
	)
	for i, r := range rows {
		if i == 0 || !SameMap(r.Fields, prev) {
			prev, sorted = r.Fields, sorted[:0]
			for f, fi := range r.Fields {
				sorted = append(sorted, Ref{Field: f, Gen: fi.Gen, Tag: fi.BackendTag})
			}
			slices.SortFunc(sorted, func(a, b Ref) int { return strings.Compare(a.Field, b.Field) })
		}
		for _, c := range sorted {
			c.Index = r.Index
			dst = append(dst, c)
		}
	}
	return dst
}
