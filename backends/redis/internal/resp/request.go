package resp

import "strconv"

// Request is a pipelined RESP2 request being built: each method appends
// to it and returns it, as append does.
type Request []byte

// Array starts an array of n elements.
func (r Request) Array(n int) Request { return r.header('*', n) }

// BulkHeader starts a bulk string of n bytes; the caller appends them and
// CRLF.
func (r Request) BulkHeader(n int) Request { return r.header('$', n) }

func (r Request) header(kind byte, n int) Request {
	r = strconv.AppendInt(append(r, kind), int64(n), 10)
	return append(r, '\r', '\n')
}

// Key appends the bulk string pre+k, built in the request rather than as
// a string of its own.
func (r Request) Key(pre, k string) Request {
	r = append(r.BulkHeader(len(pre)+len(k)), pre...)
	r = append(r, k...)
	return append(r, '\r', '\n')
}

// Str appends the bulk string s.
func (r Request) Str(s string) Request {
	r = append(r.BulkHeader(len(s)), s...)
	return append(r, '\r', '\n')
}

// Cmd appends a command of string arguments.
func (r Request) Cmd(args ...string) Request {
	r = r.Array(len(args))
	for _, a := range args {
		r = r.Str(a)
	}
	return r
}
