package file

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"github.com/tqgo/tqgo/backends"
)

// A frame of streamMin bytes or more (a put's cells) is streamed: it takes
// its place in the log's order as it starts, and the writer writes it to
// the file a chunk at a time as its caller builds it, so that the write
// of one chunk runs while the next is copied in. Its header, the only
// part whose checksum needs the whole frame, is written as zeros first
// and written over once the rest is in the file: a crash mid-stream
// leaves a frame of length 0, a torn tail that reopening cuts, never
// part of a frame. Nothing of it is applied or acknowledged before its
// header is written.
const (
	streamMin   = 1 << 20
	streamChunk = 512 << 10
)

// streamHook, if set (by tests), is called by the writer after each
// chunk of a streamed frame it writes, the frame beginning at start.
var streamHook func(e *engine, start int64)

// stream is a streamed frame's progress, shared by its builder (the
// caller's goroutine) and the writer.
type stream struct {
	buf    []byte        // the frame's allocation, its length the frame's
	filled atomic.Int64  // bytes of buf built and final, from its start
	done   atomic.Bool   // built (filled is the frame's length), or given up (err)
	err    error         // why it was given up; set before done
	kick   chan struct{} // 1-buffered: filled or done moved

	published int // the builder's own: the last filled it stored
}

// publish lets the writer have the bytes built so far.
func (s *stream) publish(n int) {
	s.published = n
	s.filled.Store(int64(n))
	s.signal()
}

func (s *stream) signal() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// finish marks the frame built, of n bytes, or given up with err.
func (s *stream) finish(n int, err error) {
	s.err = err
	if err == nil {
		s.filled.Store(int64(n))
	}
	s.done.Store(true)
	s.signal()
}

// next waits until more of the frame is built than the writer wrote
// (written bytes) or the frame is done, and returns how far it is built.
func (s *stream) next(written int) (filled int, done bool) {
	for {
		done = s.done.Load() // before filled: once done, filled is final
		filled = int(s.filled.Load())
		if filled > written || done {
			return filled, done
		}
		<-s.kick
	}
}

// wait waits until the builder is done with the frame's memory.
func (s *stream) wait() {
	for !s.done.Load() {
		<-s.kick
	}
}

// begin starts a frame of kind whose body is size bytes for o: a frame
// large enough to stream is queued now, stamped, its builder set to
// publish its progress; a smaller one is queued by submit once built.
func (h *handle) begin(kind byte, size int, o *op) (builder, error) {
	e := h.e
	n := frameHeader + 1 + size + stampSize
	if n < streamMin {
		return e.frames.builder(kind, size), nil
	}
	if n-frameHeader > maxPayload {
		return builder{}, fmt.Errorf("%w: a record of %d bytes exceeds the log's 4 GiB record limit", backends.ErrInvalid, n-frameHeader)
	}
	b := e.frames.builder(kind, size)
	st := &stream{buf: b.b[:n], kick: make(chan struct{}, 1)}
	b.st = st
	o.stream, o.fb = st, b.fb
	if err := e.reserve(o); err != nil {
		o.stream, o.fb = nil, nil
		e.frames.release(b.fb)
		return builder{}, err
	}
	return b, nil
}

// reserve queues o, whose frame is yet to be built, and stamps it: its
// place in the log's order is taken now.
func (e *engine) reserve(o *op) error {
	e.qmu.Lock()
	switch {
	case e.closed:
		e.qmu.Unlock()
		return backends.ErrClosed
	case e.failed != nil:
		err := e.failed
		e.qmu.Unlock()
		return err
	}
	stamp := max(e.clock().UnixMicro(), e.lastStamp)
	e.lastStamp = stamp
	o.stamp = stamp
	o.done = make(chan struct{})
	e.queue = append(e.queue, o)
	e.qmu.Unlock()
	e.signal()
	return nil
}

// signal kicks the writer.
func (e *engine) signal() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// finishStream completes a streamed frame (seals, decodes and stamps it)
// and hands its last bytes to the writer; a frame that cannot be (sized
// wrong, or not decoding: bugs) is given up, and the writer cuts what it
// wrote of it.
func (b *builder) finishStream(o *op) error {
	st := b.st
	partial, err := b.seal()
	switch {
	case err != nil:
	case &b.b[0] != &st.buf[0] || len(b.b)+stampSize != len(st.buf):
		err = fmt.Errorf("file: a streamed record of %d bytes, sized %d", len(b.b)+stampSize, len(st.buf)) // a bug
	default:
		if err = o.decodeBody(b.b[frameHeader], b.b[frameHeader+1:]); err != nil {
			err = fmt.Errorf("file: decoding its own record: %w", err) // a bug
		}
	}
	if err != nil {
		st.finish(0, err)
		return err
	}
	o.frame = b.stamp(partial, o.stamp)
	st.finish(len(o.frame), nil)
	return nil
}

// writeStream writes o's streamed frame at the segment's end, where the
// writer has just written its header as zeros (at start), as it is built,
// then its header. A frame given up is cut from the file (ok false, its
// error in o.stream.err); err is a failed write or cut.
func (e *engine) writeStream(o *op, start int64) (ok bool, err error) {
	st := o.stream
	written := frameHeader
	for {
		filled, done := st.next(written)
		if filled > written {
			filled = min(filled, written+streamChunk) // a chunk at a time
			n, err := e.seg.Write(st.buf[written:filled])
			e.segSize += int64(n)
			e.walBytes.Add(int64(n))
			if err != nil {
				return false, err
			}
			written = filled
			if streamHook != nil {
				streamHook(e, start)
			}
			continue
		}
		if done {
			break
		}
	}
	if st.err != nil {
		if err := e.seg.Truncate(start); err != nil {
			return false, err
		}
		if _, err := e.seg.Seek(start, 0); err != nil {
			return false, err
		}
		e.walBytes.Add(start - e.segSize)
		e.segSize = start
		return false, nil
	}
	hdr := o.frame[:frameHeader]
	binary.LittleEndian.PutUint32(hdr[4:], binary.LittleEndian.Uint32(hdr[4:])^e.segSalt)
	if _, err := e.seg.WriteAt(hdr, start); err != nil {
		return false, err
	}
	return true, nil
}
