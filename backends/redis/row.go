package redis

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"unsafe"

	"github.com/tinylib/msgp/msgp"

	"github.com/tqgo/tqgo/backends"
)

// A row is one entry of the partition's row hash:
//
//	[8 bytes index][2 bytes n][n bytes signature][8 bytes version][blob]
//
// all integers big-endian. The signature lists the fields the row's first
// Prepare reserved generation 0 of ("\x00f\x00g\x00", sorted), so that
// the Prepare that creates rows writes nothing but their entries: a field's
// generation hash only gets an entry when the field is reserved again.
// Version 0 with no blob is a row prepared but never committed; each
// commit writes the next version.
//
// The blob is [key, fields, tag]: fields maps a field name to [dtype,
// shape, gen, backend tag]; tag maps a tag key to a msgpack value, whose
// types keep Go's distinction between int64, float64, bool and string
// (JSON and Lua's cjson do not). The scripts only compare and store whole
// entries and read their heads: merging happens in Go (see Meta.Commit),
// so the server never parses a blob.
const (
	indexLen   = 8
	versionLen = 8
)

// signature is the signature of fields (sorted, distinct, no NUL).
func signature(fields []string) string {
	if len(fields) == 0 {
		return ""
	}
	n := 1
	for _, f := range fields {
		n += len(f) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, 0)
	for _, f := range fields {
		b = append(b, f...)
		b = append(b, 0)
	}
	return string(b)
}

// entryTail is what follows the index in the entry of a row prepared
// with signature sig and never committed.
func entryTail(sig string) string {
	b := make([]byte, 0, 2+len(sig)+versionLen)
	b = binary.BigEndian.AppendUint16(b, uint16(len(sig)))
	b = append(b, sig...)
	b = binary.BigEndian.AppendUint64(b, 0)
	return string(b)
}

// preparedEntry is the entry of a row prepared with signature sig and
// never committed.
func preparedEntry(index uint64, sig string) string {
	var b [indexLen]byte
	binary.BigEndian.PutUint64(b[:], index)
	return string(b[:]) + entryTail(sig)
}

// entryHead is the part of e before the version: the index and signature.
func entryHead(e []byte) ([]byte, error) {
	if len(e) < indexLen+2 {
		return nil, fmt.Errorf("%w: row entry of %d bytes", ErrCorrupt, len(e))
	}
	n := indexLen + 2 + int(binary.BigEndian.Uint16(e[indexLen:]))
	if len(e) < n+versionLen {
		return nil, fmt.Errorf("%w: row entry of %d bytes, signature to byte %d", ErrCorrupt, len(e), n)
	}
	return e[:n], nil
}

// encodeEntry appends to b the entry of the committed row r at version v,
// with head (index and signature) as the row's entry has it. Fields are
// written in name order, so rows with equal fields have byte-equal field
// sections (which rowDecoder shares); fc, if not nil, remembers the last
// section encoded, for rows that share their Fields map.
func encodeEntry(b []byte, head []byte, v uint64, r *backends.Row, fc *fieldsCache) ([]byte, error) {
	b = append(b, head...)
	b = binary.BigEndian.AppendUint64(b, v)
	b = msgp.AppendArrayHeader(b, 3)
	b = msgp.AppendString(b, r.Key)
	if fc != nil && fc.section != nil && sameMap(fc.fields, r.Fields) {
		b = append(b, fc.section...)
	} else {
		start := len(b)
		b = appendFields(b, r.Fields)
		if fc != nil {
			fc.fields, fc.section = r.Fields, append(fc.section[:0], b[start:]...)
		}
	}
	b = msgp.AppendMapHeader(b, uint32(len(r.Tag)))
	for k, v := range r.Tag {
		b = msgp.AppendString(b, k)
		var err error
		if b, err = msgp.AppendIntf(b, v); err != nil {
			return nil, fmt.Errorf("%w: tag %q: value of type %T: %v", backends.ErrInvalid, k, v, err)
		}
	}
	return b, nil
}

// fieldsCache is the field section encodeEntry wrote last.
type fieldsCache struct {
	fields  map[string]backends.FieldInfo
	section []byte
}

// appendFields appends the field section of a row, fields in name order.
func appendFields(b []byte, fields map[string]backends.FieldInfo) []byte {
	b = msgp.AppendMapHeader(b, uint32(len(fields)))
	for _, f := range slices.Sorted(maps.Keys(fields)) {
		fi := fields[f]
		b = msgp.AppendString(b, f)
		b = msgp.AppendArrayHeader(b, 4)
		b = msgp.AppendString(b, fi.DType)
		if fi.Shape == nil {
			b = msgp.AppendNil(b)
		} else {
			b = msgp.AppendArrayHeader(b, uint32(len(fi.Shape)))
			for _, d := range fi.Shape {
				b = msgp.AppendInt64(b, d)
			}
		}
		b = msgp.AppendUint64(b, fi.Gen)
		b = msgp.AppendString(b, fi.BackendTag)
	}
	return b
}

// sameMap reports whether a and b are one map (not merely equal ones): a
// map value is a pointer to the map's header.
func sameMap[K comparable, V any](a, b map[K]V) bool {
	return *(*unsafe.Pointer)(unsafe.Pointer(&a)) == *(*unsafe.Pointer)(unsafe.Pointer(&b))
}

// entryIndex is the index an entry begins with.
func entryIndex(e []byte) (uint64, error) {
	if len(e) < indexLen {
		return 0, fmt.Errorf("%w: row entry of %d bytes", ErrCorrupt, len(e))
	}
	return binary.BigEndian.Uint64(e), nil
}

// decodeEntry decodes a row entry: its version and row, or a nil row (and
// version 0) for a row never committed.
func decodeEntry(e []byte) (uint64, *backends.Row, error) { return (*rowDecoder)(nil).decode(e) }

// rowDecoder decodes the entries of many rows, sharing what consecutive
// rows have in common: the rows of one put have byte-identical field
// sections (same fields, dtypes, shapes, generations), and decoding each
// into its own map cost more than the metadata round trip (1024 rows). The
// shared maps are read-only, as every MetaStore's rows are.
type rowDecoder struct {
	prevFields []byte // the last field section decoded
	prevMap    map[string]backends.FieldInfo
}

// decode is decodeEntry; a nil d shares nothing.
func (d *rowDecoder) decode(e []byte) (uint64, *backends.Row, error) {
	head, err := entryHead(e)
	if err != nil {
		return 0, nil, err
	}
	rest := e[len(head):]
	version := binary.BigEndian.Uint64(rest)
	if len(rest) == versionLen {
		return 0, nil, nil
	}
	r, err := d.decodeBlob(rest[versionLen:])
	if err != nil {
		return 0, nil, fmt.Errorf("%w: row entry of %d bytes: %v", ErrCorrupt, len(e), err)
	}
	r.Index = binary.BigEndian.Uint64(e)
	return version, r, nil
}

func (d *rowDecoder) decodeBlob(b []byte) (*backends.Row, error) {
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return nil, err
	}
	if n != 3 {
		return nil, fmt.Errorf("row has %d parts, want 3", n)
	}
	r := &backends.Row{}
	if r.Key, b, err = msgp.ReadStringBytes(b); err != nil {
		return nil, err
	}
	if d != nil && len(d.prevFields) > 0 && bytes.HasPrefix(b, d.prevFields) {
		// The section is self-delimiting: the same bytes decode the same.
		r.Fields = d.prevMap
		b = b[len(d.prevFields):]
	} else {
		start := b
		if b, err = decodeFields(r, b); err != nil {
			return nil, err
		}
		if d != nil {
			d.prevFields, d.prevMap = start[:len(start)-len(b)], r.Fields
		}
	}
	nt, b, err := msgp.ReadMapHeaderBytes(b)
	if err != nil {
		return nil, err
	}
	if nt > 0 {
		if uint32(len(b)) < nt {
			return nil, msgp.ErrShortBytes
		}
		r.Tag = make(map[string]any, nt)
		for range nt {
			var k string
			var v any
			if k, b, err = msgp.ReadStringBytes(b); err != nil {
				return nil, err
			}
			if v, b, err = msgp.ReadIntfBytes(b); err != nil {
				return nil, err
			}
			r.Tag[k] = v
		}
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%d trailing bytes", len(b))
	}
	return r, nil
}

// decodeFields decodes a row's field section into r.Fields and returns what
// follows it.
func decodeFields(r *backends.Row, b []byte) ([]byte, error) {
	nf, b, err := msgp.ReadMapHeaderBytes(b)
	if err != nil {
		return nil, err
	}
	if uint32(len(b)) < nf { // each entry takes at least a byte: no huge make from a bad header
		return nil, msgp.ErrShortBytes
	}
	r.Fields = make(map[string]backends.FieldInfo, nf)
	for range nf {
		var f string
		var fi backends.FieldInfo
		if f, b, err = msgp.ReadStringBytes(b); err != nil {
			return nil, err
		}
		var parts uint32
		if parts, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
			return nil, err
		}
		if parts != 4 {
			return nil, fmt.Errorf("field %q has %d parts, want 4", f, parts)
		}
		if fi.DType, b, err = msgp.ReadStringBytes(b); err != nil {
			return nil, err
		}
		if msgp.IsNil(b) {
			b = b[1:]
		} else {
			var dims uint32
			if dims, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
				return nil, err
			}
			if uint32(len(b)) < dims {
				return nil, msgp.ErrShortBytes
			}
			fi.Shape = make([]int64, dims)
			for i := range fi.Shape {
				if fi.Shape[i], b, err = msgp.ReadInt64Bytes(b); err != nil {
					return nil, err
				}
			}
		}
		if fi.Gen, b, err = msgp.ReadUint64Bytes(b); err != nil {
			return nil, err
		}
		if fi.BackendTag, b, err = msgp.ReadStringBytes(b); err != nil {
			return nil, err
		}
		r.Fields[f] = fi
	}
	return b, nil
}
