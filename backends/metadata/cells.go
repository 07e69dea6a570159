package metadata

import "slices"

// CellID names a stored cell: the parts of its storage key. It is
// comparable, for sets of cells (a MetaStore's Swept matches refs by it).
type CellID struct {
	Index, Gen uint64
	Field      string
}

// ID returns the cell r names.
func (r Ref) ID() CellID { return CellID{Index: r.Index, Gen: r.Gen, Field: r.Field} }

// UpdateCells lists the cells (field and generation) of RowUpdate Fields
// maps, working each distinct map out once: the updates of a commit
// mostly share theirs (see RowUpdate), so a store checking or applying a
// commit's cells row by row pays per map, not per row. The zero value is
// ready to use; not safe for concurrent use.
type UpdateCells struct {
	m     map[string]FieldInfo
	valid bool
	cells []UpdateCell
}

// UpdateCell is one cell of an update. Hint is the caller's: a store may
// keep where it last found the field (its place in a row's slots) there,
// for the next row of the same map.
type UpdateCell struct {
	Field string
	Gen   uint64
	Hint  int
}

// Of returns the cells of fields, in an order fixed for the map, as a
// slice the caller may modify (Hint) until the next call with another
// map.
func (u *UpdateCells) Of(fields map[string]FieldInfo) []UpdateCell {
	if u.valid && SameMap(fields, u.m) {
		return u.cells
	}
	if u.cells == nil {
		u.cells = make([]UpdateCell, 0, len(fields))
	}
	u.m, u.valid, u.cells = fields, true, u.cells[:0]
	for f, fi := range fields {
		u.cells = append(u.cells, UpdateCell{Field: f, Gen: fi.Gen})
	}
	return u.cells
}

// CellSet is a set of cells, for a store matching the refs a Swept or an
// Abandon names against the cells it keeps.
type CellSet map[CellID]struct{}

// NewCellSet returns the set of the cells refs name.
func NewCellSet(refs []Ref) CellSet {
	s := make(CellSet, len(refs))
	for _, r := range refs {
		s[r.ID()] = struct{}{}
	}
	return s
}

// Has reports whether the set holds cell id.
func (s CellSet) Has(id CellID) bool {
	_, ok := s[id]
	return ok
}

// DeleteCells removes from items those whose cell (id) the set holds, as
// slices.DeleteFunc does, and returns the shortened slice and how many it
// removed.
func DeleteCells[T any](s CellSet, items []T, id func(T) CellID) ([]T, int) {
	n := len(items)
	items = slices.DeleteFunc(items, func(it T) bool { return s.Has(id(it)) })
	return items, n - len(items)
}
