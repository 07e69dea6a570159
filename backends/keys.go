package backends

import "strconv"

// StorageKey is "<global_index>@<field>" for a cell's first write (the layout
// TransferQueue's KVStorageManager uses) and "<global_index>@<field>#<gen>"
// for a rewrite, so an overwrite never touches the bytes readers may still be
// reading, and a failed overwrite leaves the old value intact.
func StorageKey(index uint64, field string, gen uint64) string {
	return string(AppendStorageKey(make([]byte, 0, 24+len(field)), index, field, gen))
}

// AppendStorageKey appends StorageKey(index, field, gen) to b.
func AppendStorageKey(b []byte, index uint64, field string, gen uint64) []byte {
	b = strconv.AppendUint(b, index, 10)
	b = append(b, '@')
	b = append(b, field...)
	if gen != 0 {
		b = append(b, '#')
		b = strconv.AppendUint(b, gen, 10)
	}
	return b
}
