package redis

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/tinylib/msgp/msgp"

	"github.com/tqgo/tqgo/backends"
)

// A partition's metadata is a log of records (see scripts.go), each one
// string: a kind byte, the id of the write that made it (idLen lowercase
// hex digits, random), then msgpack. LAYOUT.md gives the byte formats.
//
//	P<id><base>:<at>:[fields] [keys]
//	                               Prepare: keys new to the partition
//	                               take base, base+1, ... in key order;
//	                               at is the server's time (microseconds
//	                               since the Unix epoch) of the
//	                               reservations (the script writes both,
//	                               decimal)
//	C<id>[tables] n (key index t tag)*n
//	                               Commit: t is 0 (no fields) or the
//	                               1-based field table of the row's update
//	D<id>[keys]                    Delete
//	X<id>                          DeletePartition: every row removed
//	A<id><cutoff>                  abort every reservation made at or
//	                               before cutoff (server time, decimal
//	                               microseconds; the script writes it)
//	W<id>[[index field gen]...]    swept: these cells are deleted
//	S<id>[tables] n (key index gens t tag committed)*n
//	                               a snapshot of the whole partition,
//	                               which replaces the log (compaction)
//	F<id>                          a fence: changes nothing (see
//	                               fenceScript)
//
// A field table is a field section (appendFields): fields in name order,
// each [dtype, shape, gen, backend tag]. Rows of one put share their
// Fields map, so a record holds one table for the whole batch, and the
// rows decoded from it share one map again. Tags are msgpack values,
// which keep Go's int64, float64, bool and string apart.
const (
	recPrepare  = 'P'
	recCommit   = 'C'
	recDelete   = 'D'
	recSnapshot = 'S'
	recFence    = 'F'
	recClear    = 'X'
	recAbort    = 'A'
	recSwept    = 'W'
)

// idLen is the length of a record's id: 16 hex digits of a random uint64.
const idLen = 16

// bodyAt is where a record's body starts, after its kind and id.
const bodyAt = 1 + idLen

// newID returns a write's id: random, so that two writes never share one.
func newID() string {
	var b [idLen]byte
	const digits = "0123456789abcdef"
	x := rand.Uint64()
	for i := range b {
		b[i] = digits[x>>60]
		x <<= 4
	}
	return string(b[:])
}

// setID writes id into rec's id slot (records are built with one).
func setID(rec []byte, id string) {
	copy(rec[1:bodyAt], id)
}

// recordID returns the id of a record as the log holds it.
func recordID(rec string) (string, bool) {
	if len(rec) < bodyAt {
		return "", false
	}
	return rec[1:bodyAt], true
}

// chainHead is the head of a log after a record with id is appended to a
// log whose head is head: the hex SHA-1 of head followed by id (the empty
// log's head is ""). The scripts compute the same with redis.sha1hex.
func chainHead(head, id string) string {
	h := sha1.New()
	h.Write([]byte(head))
	h.Write([]byte(id))
	return hex.EncodeToString(h.Sum(nil))
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

// decodeFields decodes a field section and returns what follows it.
func decodeFields(b []byte) (map[string]backends.FieldInfo, []byte, error) {
	nf, b, err := msgp.ReadMapHeaderBytes(b)
	if err != nil {
		return nil, nil, err
	}
	if uint32(len(b)) < nf { // each entry takes at least a byte: no huge make from a bad header
		return nil, nil, msgp.ErrShortBytes
	}
	out := make(map[string]backends.FieldInfo, nf)
	for range nf {
		var f string
		var fi backends.FieldInfo
		if f, b, err = msgp.ReadStringBytes(b); err != nil {
			return nil, nil, err
		}
		var parts uint32
		if parts, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
			return nil, nil, err
		}
		if parts != 4 {
			return nil, nil, fmt.Errorf("field %q has %d parts, want 4", f, parts)
		}
		if fi.DType, b, err = msgp.ReadStringBytes(b); err != nil {
			return nil, nil, err
		}
		if msgp.IsNil(b) {
			b = b[1:]
		} else {
			var dims uint32
			if dims, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
				return nil, nil, err
			}
			if uint32(len(b)) < dims {
				return nil, nil, msgp.ErrShortBytes
			}
			fi.Shape = make([]int64, dims)
			for i := range fi.Shape {
				if fi.Shape[i], b, err = msgp.ReadInt64Bytes(b); err != nil {
					return nil, nil, err
				}
			}
		}
		if fi.Gen, b, err = msgp.ReadUint64Bytes(b); err != nil {
			return nil, nil, err
		}
		if fi.BackendTag, b, err = msgp.ReadStringBytes(b); err != nil {
			return nil, nil, err
		}
		out[f] = fi
	}
	return out, b, nil
}

// appendTag appends a row's tag: nil, or a map of msgpack values.
func appendTag(b []byte, tag map[string]any) ([]byte, error) {
	if tag == nil {
		return msgp.AppendNil(b), nil
	}
	b = msgp.AppendMapHeader(b, uint32(len(tag)))
	for k, v := range tag {
		b = msgp.AppendString(b, k)
		var err error
		if b, err = msgp.AppendIntf(b, v); err != nil {
			return nil, fmt.Errorf("%w: tag %q: value of type %T: %v", backends.ErrInvalid, k, v, err)
		}
	}
	return b, nil
}

func decodeTag(b []byte) (map[string]any, []byte, error) {
	if msgp.IsNil(b) {
		return nil, b[1:], nil
	}
	nt, b, err := msgp.ReadMapHeaderBytes(b)
	if err != nil {
		return nil, nil, err
	}
	if uint32(len(b)) < nt {
		return nil, nil, msgp.ErrShortBytes
	}
	tag := make(map[string]any, nt)
	for range nt {
		var k string
		var v any
		if k, b, err = msgp.ReadStringBytes(b); err != nil {
			return nil, nil, err
		}
		if v, b, err = msgp.ReadIntfBytes(b); err != nil {
			return nil, nil, err
		}
		tag[k] = v
	}
	return tag, b, nil
}

// tableWriter numbers the distinct Fields maps of a record's rows. Rows
// of one put share one map, mostly in a run, so it compares with the
// last map first and encodes each map once.
type tableWriter struct {
	maps   []map[string]backends.FieldInfo
	last   int // 1-based number of the last map seen, 0 none
	tables []byte
}

// ref returns the 1-based table of fields (0 for none).
func (t *tableWriter) ref(fields map[string]backends.FieldInfo) uint64 {
	if fields == nil {
		return 0
	}
	if t.last > 0 && backends.SameMap(t.maps[t.last-1], fields) {
		return uint64(t.last)
	}
	for i, m := range t.maps {
		if backends.SameMap(m, fields) {
			t.last = i + 1
			return uint64(t.last)
		}
	}
	t.maps = append(t.maps, fields)
	t.tables = appendFields(t.tables, fields)
	t.last = len(t.maps)
	return uint64(t.last)
}

// record assembles kind, the tables and the rows' part.
func (t *tableWriter) record(kind byte, rows []byte) []byte {
	b := make([]byte, bodyAt, bodyAt+5+len(t.tables)+len(rows))
	b[0] = kind
	b = msgp.AppendArrayHeader(b, uint32(len(t.maps)))
	b = append(b, t.tables...)
	return append(b, rows...)
}

// readTables reads a record's field tables. Tables equal to the one
// before share its map (a record written before tableWriter shared them
// would have repeats).
func readTables(b []byte) ([]map[string]backends.FieldInfo, []byte, error) {
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return nil, nil, err
	}
	if uint32(len(b)) < n {
		return nil, nil, msgp.ErrShortBytes
	}
	out := make([]map[string]backends.FieldInfo, n)
	var prev []byte
	for i := range out {
		start := b
		if prev != nil && bytes.HasPrefix(b, prev) {
			out[i], b = out[i-1], b[len(prev):]
			continue
		}
		if out[i], b, err = decodeFields(b); err != nil {
			return nil, nil, err
		}
		prev = start[:len(start)-len(b)]
	}
	return out, b, nil
}

func readTableRef(b []byte, tables []map[string]backends.FieldInfo) (map[string]backends.FieldInfo, []byte, error) {
	t, b, err := msgp.ReadUint64Bytes(b)
	if err != nil {
		return nil, nil, err
	}
	if t > uint64(len(tables)) {
		return nil, nil, fmt.Errorf("field table %d of %d", t, len(tables))
	}
	if t == 0 {
		return nil, b, nil
	}
	return tables[t-1], b, nil
}

func appendStrings(b []byte, s []string) []byte {
	b = msgp.AppendArrayHeader(b, uint32(len(s)))
	for _, x := range s {
		b = msgp.AppendString(b, x)
	}
	return b
}

func readStrings(b []byte) ([]string, []byte, error) {
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return nil, nil, err
	}
	if uint32(len(b)) < n {
		return nil, nil, msgp.ErrShortBytes
	}
	out := make([]string, n)
	for i := range out {
		if out[i], b, err = msgp.ReadStringBytes(b); err != nil {
			return nil, nil, err
		}
	}
	return out, b, nil
}

// prepareRecord is a Prepare's record as the client sends it: the script
// puts the base of the new rows' indexes after the id.
func prepareRecord(keys, fields []string) []byte {
	n := bodyAt + 1 + 5 + 5
	for _, f := range fields {
		n += len(f) + 5
	}
	for _, k := range keys {
		n += len(k) + 5
	}
	b := make([]byte, bodyAt, n)
	b[0] = recPrepare
	b = append(b, ':')
	b = appendStrings(b, fields)
	return appendStrings(b, keys)
}

// readPrepare decodes a Prepare record as the log holds it.
func readPrepare(rec []byte) (base uint64, at int64, keys, fields []string, err error) {
	colon := bytes.IndexByte(rec[bodyAt:], ':') + bodyAt
	if colon < bodyAt+1 {
		return 0, 0, nil, nil, fmt.Errorf("prepare record without base")
	}
	if base, err = strconv.ParseUint(string(rec[bodyAt:colon]), 10, 64); err != nil {
		return 0, 0, nil, nil, err
	}
	b := rec[colon+1:]
	colon = bytes.IndexByte(b, ':')
	if colon < 1 {
		return 0, 0, nil, nil, fmt.Errorf("prepare record without time")
	}
	if at, err = strconv.ParseInt(string(b[:colon]), 10, 64); err != nil {
		return 0, 0, nil, nil, err
	}
	b = b[colon+1:]
	keys, fields, err = readPrepareBody(b)
	return base, at, keys, fields, err
}

// readPrepareBody decodes a Prepare record's msgpack: fields, then keys.
func readPrepareBody(b []byte) (keys, fields []string, err error) {
	if fields, b, err = readStrings(b); err != nil {
		return nil, nil, err
	}
	if keys, b, err = readStrings(b); err != nil {
		return nil, nil, err
	}
	if len(b) != 0 {
		return nil, nil, fmt.Errorf("%d trailing bytes", len(b))
	}
	return keys, fields, nil
}

// commitRecord encodes updates.
func commitRecord(updates []backends.RowUpdate) ([]byte, error) {
	var t tableWriter
	rows := make([]byte, 0, 5+len(updates)*24)
	rows = msgp.AppendArrayHeader(rows, uint32(len(updates)))
	for i := range updates {
		u := &updates[i]
		rows = msgp.AppendString(rows, u.Key)
		rows = msgp.AppendUint64(rows, u.Index)
		rows = msgp.AppendUint64(rows, t.ref(u.Fields))
		var err error
		if rows, err = appendTag(rows, u.Tag); err != nil {
			return nil, err
		}
	}
	return t.record(recCommit, rows), nil
}

func readCommit(rec []byte) ([]backends.RowUpdate, error) {
	tables, b, err := readTables(rec[bodyAt:])
	if err != nil {
		return nil, err
	}
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return nil, err
	}
	if uint64(len(b)) < uint64(n)*4 {
		return nil, msgp.ErrShortBytes
	}
	out := make([]backends.RowUpdate, n)
	for i := range out {
		u := &out[i]
		if u.Key, b, err = msgp.ReadStringBytes(b); err != nil {
			return nil, err
		}
		if u.Index, b, err = msgp.ReadUint64Bytes(b); err != nil {
			return nil, err
		}
		if u.Fields, b, err = readTableRef(b, tables); err != nil {
			return nil, err
		}
		if u.Tag, b, err = decodeTag(b); err != nil {
			return nil, err
		}
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%d trailing bytes", len(b))
	}
	return out, nil
}

func deleteRecord(keys []string) []byte {
	b := make([]byte, bodyAt, bodyAt+5+len(keys)*8)
	b[0] = recDelete
	return appendStrings(b, keys)
}

// bareRecord is a record of kind with an id slot and no body (a clear;
// an abort, whose cutoff the script appends).
func bareRecord(kind byte) []byte {
	b := make([]byte, bodyAt)
	b[0] = kind
	return b
}

// sweptRecord lists the cells refs name: [[index field gen]...].
func sweptRecord(refs []backends.Ref) []byte {
	b := make([]byte, bodyAt, bodyAt+5+len(refs)*24)
	b[0] = recSwept
	b = msgp.AppendArrayHeader(b, uint32(len(refs)))
	for _, r := range refs {
		b = msgp.AppendArrayHeader(b, 3)
		b = msgp.AppendUint64(b, r.Index)
		b = msgp.AppendString(b, r.Field)
		b = msgp.AppendUint64(b, r.Gen)
	}
	return b
}

func readSwept(rec []byte) ([]backends.Ref, error) {
	b := rec[bodyAt:]
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return nil, err
	}
	if uint32(len(b)) < n*4 {
		return nil, msgp.ErrShortBytes
	}
	out := make([]backends.Ref, n)
	for i := range out {
		var parts uint32
		if parts, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
			return nil, err
		}
		if parts != 3 {
			return nil, fmt.Errorf("swept cell of %d parts, want 3", parts)
		}
		if out[i].Index, b, err = msgp.ReadUint64Bytes(b); err != nil {
			return nil, err
		}
		if out[i].Field, b, err = msgp.ReadStringBytes(b); err != nil {
			return nil, err
		}
		if out[i].Gen, b, err = msgp.ReadUint64Bytes(b); err != nil {
			return nil, err
		}
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%d trailing bytes", len(b))
	}
	return out, nil
}

// readStamp decodes the decimal number a record holds after its id (an
// abort's cutoff).
func readStamp(rec []byte) (int64, error) {
	return strconv.ParseInt(string(rec[bodyAt:]), 10, 64)
}

func readDelete(rec []byte) ([]string, error) {
	keys, b, err := readStrings(rec[bodyAt:])
	if err == nil && len(b) != 0 {
		err = fmt.Errorf("%d trailing bytes", len(b))
	}
	return keys, err
}
