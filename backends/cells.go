package backends

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
