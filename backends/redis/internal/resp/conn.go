package resp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"time"
	"unsafe"

	goredis "github.com/redis/go-redis/v9"
)

// Conn is one connection of a Pool, lent to the function Pool.Do runs.
// Not safe for concurrent use: one request at a time, on the goroutine
// that holds it.
type Conn struct {
	nc       net.Conn
	br       *bufio.Reader
	opt      *goredis.Options
	cmd      []byte // the last request's buffer, reused by Request
	gotReply bool   // a reply line of the current request was read
}

const (
	// MaxRequestBuffer bounds the request buffer an idle connection keeps:
	// a connection whose request grew past it is closed when it goes back
	// to the pool rather than pinning the buffer.
	MaxRequestBuffer = 8 << 20
	// readBuffer is the size of a connection's read buffer, which also
	// bounds one reply line.
	readBuffer = 64 << 10
	// maxBulk bounds a bulk reply read into memory of this package's own:
	// Redis's proto-max-bulk-len is 512 MB by default, and a length past 2
	// GiB is a corrupt stream, not a reason to allocate it.
	maxBulk = math.MaxInt32
	// maxReplyDepth bounds the nesting Value reads.
	maxReplyDepth = 4
)

// Request returns an empty request over the buffer of c's last request.
func (c *Conn) Request() Request { return c.cmd[:0] }

// Keep makes r's buffer the one the next Request reuses (Send does this).
func (c *Conn) Keep(r Request) { c.cmd = r[:0] }

// Send writes r and keeps its buffer for the next request.
func (c *Conn) Send(r Request) error {
	c.Keep(r)
	_, err := c.nc.Write(r)
	return err
}

// Write writes b as it is.
func (c *Conn) Write(b []byte) error {
	_, err := c.nc.Write(b)
	return err
}

// WriteBuffers writes bufs in one writev, without copying them.
func (c *Conn) WriteBuffers(bufs net.Buffers) error {
	_, err := bufs.WriteTo(c.nc)
	return err
}

// deadline sets the connection's deadline from ctx (when the client
// has ContextTimeoutEnabled), or else from the client's read and write
// timeouts.
func (c *Conn) deadline(ctx context.Context) {
	var dl time.Time
	if d, ok := ctx.Deadline(); ok && c.opt.ContextTimeoutEnabled {
		dl = d
	} else if c.opt.ReadTimeout > 0 {
		dl = time.Now().Add(c.opt.ReadTimeout + max(c.opt.WriteTimeout, 0))
	}
	c.nc.SetDeadline(dl)
}

// RenewDeadline sets the connection's deadline afresh, for the next round
// of a call, so the client's timeouts bound each round rather than the
// whole call. A ctx cancelled before this had moved the deadline to the
// past (Pool.Do); it returns ctx.Err() after the reset, so cancellation
// still wins.
func (c *Conn) RenewDeadline(ctx context.Context) error {
	c.deadline(ctx)
	return ctx.Err()
}

// Line reads one reply line without its CRLF. An error reply is returned
// as a ServerError. The line aliases the read buffer until the next read.
func (c *Conn) Line() ([]byte, error) {
	l, err := c.br.ReadSlice('\n')
	if len(l) > 0 {
		c.gotReply = true
	}
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("%w: reply line over %d bytes", ErrCorrupt, c.br.Size())
		}
		return nil, err
	}
	if len(l) < 3 || l[len(l)-2] != '\r' {
		return nil, fmt.Errorf("%w: reply line %q", ErrCorrupt, l)
	}
	l = l[:len(l)-2]
	if l[0] == '-' {
		return nil, ServerError(l[1:])
	}
	return l, nil
}

// Header reads a line that starts with kind ('*' an array, '$' a bulk
// string) and holds a number, -1 (nil) or more.
func (c *Conn) Header(kind byte) (int, error) {
	l, err := c.Line()
	if err != nil {
		return 0, err
	}
	if l[0] != kind {
		return 0, fmt.Errorf("%w: reply %q, want %q", ErrCorrupt, l, kind)
	}
	return length(l)
}

// length is the number a header line l holds, -1 (nil) or more.
func length(l []byte) (int, error) {
	n, err := strconv.Atoi(string(l[1:]))
	if err != nil || n < -1 {
		return 0, fmt.Errorf("%w: reply %q", ErrCorrupt, l)
	}
	return n, nil
}

// BulkInto reads a bulk string reply. Of length len(head)+len(body), it
// fills head then body and returns found; of another length, it returns
// found and the value in other, fresh memory; a nil reply returns none of
// them. An error reply is a ServerError, and the stream stays in step.
func (c *Conn) BulkInto(head, body []byte) (found bool, other []byte, _ error) {
	size, err := c.Header('$')
	if err != nil {
		return false, nil, err
	}
	switch {
	case size < 0:
		return false, nil, nil
	case size == len(head)+len(body):
		if _, err := io.ReadFull(c.br, head); err != nil {
			return false, nil, err
		}
		if _, err := io.ReadFull(c.br, body); err != nil {
			return false, nil, err
		}
	case size > maxBulk:
		return false, nil, fmt.Errorf("%w: value of %d bytes", ErrCorrupt, size)
	default:
		other = make([]byte, size)
		if _, err := io.ReadFull(c.br, other); err != nil {
			return false, nil, err
		}
	}
	if crlf, err := c.br.Peek(2); err != nil {
		return false, nil, err
	} else if crlf[0] != '\r' || crlf[1] != '\n' {
		return false, nil, fmt.Errorf("%w: value not ended by CRLF", ErrCorrupt)
	}
	_, err = c.br.Discard(2)
	return true, other, err
}

// Value reads one reply of any type, as go-redis hands them: a string
// (simple or bulk), an int64, nil, or a []any of values, in which an error
// reply is an element of type ServerError (as in an EXEC reply). An error
// reply at the top is returned as the error, a ServerError.
func (c *Conn) Value() (any, error) { return c.value(0) }

func (c *Conn) value(depth int) (any, error) {
	l, err := c.Line()
	if err != nil {
		return nil, err
	}
	n := 0
	if l[0] == '$' || l[0] == '*' {
		if n, err = length(l); err != nil || n < 0 {
			return nil, err // nil for a nil reply
		}
	}
	switch l[0] {
	case '+':
		return string(l[1:]), nil
	case ':':
		n, err := strconv.ParseInt(string(l[1:]), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: reply %q", ErrCorrupt, l)
		}
		return n, nil
	case '$':
		if n > maxBulk {
			return nil, fmt.Errorf("%w: bulk reply of %d bytes", ErrCorrupt, n)
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(c.br, b); err != nil {
			return nil, err
		}
		if b[n] != '\r' || b[n+1] != '\n' {
			return nil, fmt.Errorf("%w: bulk reply not ended by CRLF", ErrCorrupt)
		}
		return unsafe.String(unsafe.SliceData(b), n), nil
	case '*':
		if depth >= maxReplyDepth {
			return nil, fmt.Errorf("%w: reply %q", ErrCorrupt, l)
		}
		out := make([]any, 0, min(n, 1024))
		for range n {
			v, err := c.value(depth + 1)
			var se ServerError
			if errors.As(err, &se) {
				v, err = se, nil
			}
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: reply %q", ErrCorrupt, l)
}
