package tq

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/tqgo/tqgo/backends/metadata"
)

// maxTagDepth is how deeply lists and maps may nest in a tag value: the
// value of a tag key is at level 1, an element of a list there at level 2,
// and so on; a list or map may be at most at level maxTagDepth. It also
// stops a list or map that contains itself.
const maxTagDepth = 32

// normalizeTags returns the normalised deep copy of every tag (see Tag),
// or an error matching ErrInvalid whose *KeyError names partition and the
// row's key and whose *TagError names the tag key. A nil tag stays nil;
// consecutive rows given one map share one copy.
func normalizeTags(partition string, keys []string, tags []Tag) ([]Tag, error) {
	if tags == nil {
		return nil, nil
	}
	out := make([]Tag, len(tags))
	for i, t := range tags {
		if i > 0 && (metadata.SameMap(t, tags[i-1]) || sameScalars(t, tags[i-1])) {
			out[i] = out[i-1] // the copies are never modified: sharing is safe
			continue
		}
		nt, err := normalizeTag(t)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, &KeyError{Partition: partition, Key: keys[i], Err: err})
		}
		out[i] = nt
	}
	return out, nil
}

// sameScalars reports whether non-empty a and b hold the same keys with
// equal scalar values of the same types, so that their normalised copies
// are equal (rows tagged alike by a loop share one copy).
func sameScalars(a, b Tag) bool {
	if len(a) != len(b) || len(a) == 0 {
		return false
	}
	for k, v := range a {
		switch v.(type) {
		case bool, string, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64:
		default:
			return false
		}
		if w, ok := b[k]; !ok || !sameScalar(v, w) {
			return false
		}
	}
	return true
}

// sameScalar reports whether scalars v and w are equal and of one type;
// floats by their bits, so that -0.0 and 0.0 differ (and NaN, rejected
// later, is itself).
func sameScalar(v, w any) bool {
	switch x := v.(type) {
	case float64:
		y, ok := w.(float64)
		return ok && math.Float64bits(x) == math.Float64bits(y)
	case float32:
		y, ok := w.(float32)
		return ok && math.Float32bits(x) == math.Float32bits(y)
	}
	return v == w // of another type, never equal
}

// normalizeTag returns t's normalised deep copy, nil for nil. Of several
// invalid tag keys, the error names the first in sorted order, so that it
// does not depend on map iteration.
func normalizeTag(t Tag) (Tag, error) {
	if t == nil {
		return nil, nil
	}
	out, bad, badKey := normalizeEntries(t, 1)
	if bad != nil {
		return nil, bad.tagError(badKey)
	}
	return out, nil
}

// normalizeEntries normalises the values of a map at nesting level depth.
// On error it returns the invalid entry with the smallest key; each value
// is looked at once, so the cost stays linear however deep the error lies.
func normalizeEntries(m map[string]any, depth int) (map[string]any, *badTagValue, string) {
	out := make(map[string]any, len(m))
	var (
		bad    *badTagValue
		badKey string
	)
	for k, v := range m {
		if bad != nil && k > badKey {
			continue // cannot be the first invalid entry
		}
		nv, err := normalizeTagValue(v, depth)
		if err != nil {
			bad, badKey = err, k
			continue
		}
		out[k] = nv
	}
	if bad != nil {
		return nil, bad, badKey
	}
	return out, nil, ""
}

// badTagValue is an invalid value found while normalising, with the path
// to it, innermost step first.
type badTagValue struct {
	path   []string
	reason string
}

func (b *badTagValue) at(step string) *badTagValue {
	b.path = append(b.path, step)
	return b
}

func (b *badTagValue) tagError(key string) *TagError {
	path := slices.Clone(b.path)
	slices.Reverse(path)
	return &TagError{Tag: key, Path: strings.Join(path, ""), Reason: b.reason}
}

func rejectTag(format string, args ...any) *badTagValue {
	return &badTagValue{reason: fmt.Sprintf(format, args...)}
}

// normalizeTagValue returns v as a tag holds it (see Tag), deep-copied;
// depth is v's nesting level.
func normalizeTagValue(v any, depth int) (any, *badTagValue) {
	switch x := v.(type) {
	case nil, bool, string, int64, uint64:
		return v, nil // as it is, not boxed again
	case int:
		return int64(x), nil
	case int8:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case uint:
		return uint64(x), nil
	case uint8:
		return uint64(x), nil
	case uint16:
		return uint64(x), nil
	case uint32:
		return uint64(x), nil
	case float32:
		return normalizeFloat(float64(x))
	case float64:
		if math.IsNaN(x) {
			return normalizeFloat(x)
		}
		return v, nil
	case []byte:
		return append([]byte{}, x...), nil // never nil: an empty one reads back as empty, not nil
	case []any:
		if depth > maxTagDepth {
			return nil, tooDeep()
		}
		out := make([]any, len(x))
		for i, e := range x {
			ne, err := normalizeTagValue(e, depth+1)
			if err != nil {
				return nil, err.at("[" + strconv.Itoa(i) + "]")
			}
			out[i] = ne
		}
		return out, nil
	case map[string]any:
		return normalizeTagMap(x, depth)
	case Tag:
		return normalizeTagMap(x, depth)
	}
	return normalizeTyped(reflect.ValueOf(v), depth)
}

func normalizeFloat(f float64) (any, *badTagValue) {
	if math.IsNaN(f) {
		return nil, rejectTag("NaN is not a tag value: it is not equal to itself")
	}
	return f, nil
}

func tooDeep() *badTagValue {
	return rejectTag("lists and maps nested more than %d deep (or containing themselves)", maxTagDepth)
}

func normalizeTagMap(m map[string]any, depth int) (any, *badTagValue) {
	if depth > maxTagDepth {
		return nil, tooDeep()
	}
	out, bad, badKey := normalizeEntries(m, depth+1)
	if bad != nil {
		return nil, bad.at("[" + strconv.Quote(badKey) + "]")
	}
	return out, nil
}

// normalizeTyped handles typed lists and maps ([]string, map[string]int64,
// [][]float32 ...) by reflection: they become []any and map[string]any.
// Their element type must be accepted itself, so that an empty []time.Time
// is rejected as a full one is.
func normalizeTyped(rv reflect.Value, depth int) (any, *badTagValue) {
	t := rv.Type()
	if !tagType(t, depth) {
		return nil, rejectTag("%s is not a tag value (see tq.Tag for the types a tag holds)", t)
	}
	switch t.Kind() {
	case reflect.Slice:
		out := make([]any, rv.Len())
		for i := range out {
			e, err := normalizeTagValue(rv.Index(i).Interface(), depth+1)
			if err != nil {
				return nil, err.at("[" + strconv.Itoa(i) + "]")
			}
			out[i] = e
		}
		return out, nil
	default: // reflect.Map, string keys
		out := make(map[string]any, rv.Len())
		keys := rv.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
		for _, k := range keys {
			e, err := normalizeTagValue(rv.MapIndex(k).Interface(), depth+1)
			if err != nil {
				return nil, err.at("[" + strconv.Quote(k.String()) + "]")
			}
			out[k.String()] = e
		}
		return out, nil
	}
}

var (
	anyType    = reflect.TypeFor[any]()
	stringType = reflect.TypeFor[string]()
	tagMapType = reflect.TypeFor[Tag]()
)

// tagType reports whether values of static type t are tag values at
// nesting level depth: a predeclared scalar type of Tag's list, any (its
// dynamic values are checked one by one), []byte, Tag, or an unnamed
// slice or map with string keys of such types.
func tagType(t reflect.Type, depth int) bool {
	if t == anyType || t == tagMapType {
		return true
	}
	if t.PkgPath() != "" {
		return false // a named type: its Go type could not be read back
	}
	switch t.Kind() {
	case reflect.Bool, reflect.String,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return true
	case reflect.Slice:
		return depth <= maxTagDepth && tagType(t.Elem(), depth+1)
	case reflect.Map:
		return depth <= maxTagDepth && t.Key() == stringType && tagType(t.Elem(), depth+1)
	}
	return false
}
