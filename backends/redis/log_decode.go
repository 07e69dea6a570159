package redis

import (
	"errors"
	"fmt"

	"github.com/tqgo/tqgo/backends"
)

// readAppendReply reads the reply of logAppendScript from a direct
// connection and decodes it as appendReply does, without building the
// reply's values first: the entries' records are read into one buffer,
// which they share. An error reply is returned as a serverError, the
// connection in step; any other error leaves it out of step.
func readAppendReply(c *directConn, from backends.Pos, recs []backends.Record) (t backends.Tail, dup, created bool, _ error) {
	n, err := c.ArrayLen()
	if err != nil {
		return t, false, false, err
	}
	if n != 10 {
		return t, false, false, fmt.Errorf("%w: append replied %d values", ErrCorrupt, n)
	}
	tp, err := readTailParts(c)
	var v [5]int64
	for i := 0; err == nil && i < len(v); i++ {
		v[i], err = c.Int()
	}
	var se serverError
	if errors.As(err, &se) {
		// Within the reply: not the script's refusal, and the
		// connection is out of step.
		err = fmt.Errorf("%w: append replied an error within its reply: %s", ErrCorrupt, string(se))
	}
	if err != nil {
		return t, false, false, err
	}
	if t, err = tp.tail(from); err != nil {
		return t, false, false, err
	}
	return appendTail(t, v, from, recs)
}

// readTailParts reads the first five values of a log script's reply.
func readTailParts(c *directConn) (tp tailParts, err error) {
	if tp.restart, err = c.Int(); err != nil {
		return tp, err
	}
	if tp.sn, err = c.Int(); err != nil {
		return tp, err
	}
	var scratch [64]byte
	sid, ok, err := c.AppendBulk(scratch[:0])
	if err != nil {
		return tp, err
	}
	if !ok {
		return tp, fmt.Errorf("%w: log script replied a nil snapshot record ID", ErrCorrupt)
	}
	tp.sid = string(sid)
	snap, ok, err := c.AppendBulk(nil)
	if err != nil {
		return tp, err
	}
	if ok && tp.restart != 0 {
		if snap == nil {
			snap = []byte{}
		}
		tp.snap = snap
	}
	k, err := c.ArrayLen()
	if err != nil {
		return tp, err
	}
	if k <= 0 {
		return tp, nil
	}
	tp.entries = make([]backends.Entry, k)
	var data []byte // every entry's record, one after the other
	ends := make([]int, k)
	for i := range tp.entries {
		if data, err = readEntry(c, &tp.entries[i], data, scratch[:0]); err != nil {
			return tp, err
		}
		ends[i] = len(data)
	}
	start := 0
	for i := range tp.entries {
		tp.entries[i].Data = data[start:ends[i]:ends[i]]
		start = ends[i]
	}
	return tp, nil
}

// readEntry reads an entry as XRANGE gives it, {"<N>-0", {field, value,
// ...}}, into e (as logEntry does), its record appended to data (e.Data
// is left for the caller to set), and returns data.
func readEntry(c *directConn, e *backends.Entry, data, scratch []byte) ([]byte, error) {
	if n, err := c.ArrayLen(); err != nil || n != 2 {
		return data, entryError(err, "log entry of %d values", n)
	}
	id, ok, err := c.AppendBulk(scratch)
	if err != nil || !ok {
		return data, entryError(err, "log entry ID missing")
	}
	num, found := cutSuffix(id, "-0")
	n, ok := parseDecimal(num)
	if !found || !ok || n == 0 {
		return data, fmt.Errorf("%w: log entry ID %q", ErrCorrupt, id)
	}
	e.N = n
	m, err := c.ArrayLen()
	if err != nil || m < 0 || m%2 != 0 {
		return data, entryError(err, "log entry %d of %d fields and values", n, m)
	}
	var seen int
	for j := 0; j < m; j += 2 {
		name, ok, err := c.AppendBulk(scratch)
		if err != nil || !ok || len(name) != 1 {
			if err == nil && ok {
				// Another field: read past its value.
				if _, _, err = c.AppendBulk(scratch); err == nil {
					continue
				}
			}
			return data, entryError(err, "log entry %d field missing", n)
		}
		field := name[0]
		if field == 'd' {
			at := len(data)
			if data, ok, err = c.AppendBulk(data); err != nil || !ok {
				return data, entryError(err, "log entry %d record missing", n)
			}
			if len(data) == at && data == nil {
				data = []byte{}
			}
			seen |= 4
			continue
		}
		val, ok, err := c.AppendBulk(scratch)
		if err != nil || !ok {
			return data, entryError(err, "log entry %d field %c missing", n, field)
		}
		var good bool
		switch field {
		case 'i':
			e.ID, good = parseDecimal(val)
			seen |= 1
		case 't':
			var u uint64
			neg := len(val) > 0 && val[0] == '-'
			if neg {
				u, good = parseDecimal(val[1:])
			} else {
				u, good = parseDecimal(val)
			}
			good = good && u <= 1<<63-1
			e.Time = int64(u)
			if neg {
				e.Time = -e.Time
			}
			seen |= 2
		case 'b':
			e.Base, good = parseDecimal(val)
		default:
			good = true
		}
		if !good {
			return data, fmt.Errorf("%w: log entry %d field %c = %q", ErrCorrupt, n, field, val)
		}
	}
	if seen != 7 {
		return data, fmt.Errorf("%w: log entry %d lacks a field of i, t, d", ErrCorrupt, n)
	}
	return data, nil
}

func entryError(err error, format string, args ...any) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}

func cutSuffix(b []byte, suffix string) ([]byte, bool) {
	if len(b) < len(suffix) || string(b[len(b)-len(suffix):]) != suffix {
		return b, false
	}
	return b[:len(b)-len(suffix)], true
}

// parseDecimal parses an unsigned decimal as strconv.ParseUint(s, 10, 64)
// does, without allocating.
func parseDecimal(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var n uint64
	for _, d := range b {
		if d < '0' || d > '9' {
			return 0, false
		}
		if n > (1<<64-1)/10 || n*10 > 1<<64-1-uint64(d-'0') {
			return 0, false
		}
		n = n*10 + uint64(d-'0')
	}
	return n, true
}
