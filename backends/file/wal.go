package file

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/tqgo/tqgo/backends"
)

// A log segment is a file wal-<seq>.log: a header (segMagic, then the
// sequence number, uint64 LE) and frames. Segments are numbered from 1,
// densely; a checkpoint names the first segment written after it.
const (
	segMagic  = "TQWAL001"
	segHeader = 16
)

func segName(seq uint64) string { return fmt.Sprintf("wal-%016x.log", seq) }

// coalesce is the size under which frames are copied into one buffer and
// written together; a larger one is written from where it lies.
const coalesce = 256 << 10

// enqueue stamps o's frame, queues it for the writer and returns the
// channel closed when it applied (or failed). The stamp is taken under
// the queue's lock, so stamps rise in the log's order.
func (e *engine) enqueue(f *builder, partial uint32, o *op) error {
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
	o.frame = f.stamp(partial, stamp)
	o.stamp = stamp
	o.done = make(chan struct{})
	e.queue = append(e.queue, o)
	e.qmu.Unlock()
	select {
	case e.kick <- struct{}{}:
	default:
	}
	return nil
}

// writer is the one goroutine that writes the log: it takes every queued
// frame at once (group commit: the writes that queued while it wrote the
// last batch share one write and one fsync), writes them, fsyncs them
// under sync=always, applies them to the state in the log's order and
// replies. It returns once the engine is closed and the queue drained.
func (e *engine) writer() {
	defer e.wg.Done()
	var spare []*op
	for range e.kick {
		for {
			e.qmu.Lock()
			batch, closed := e.queue, e.closed
			if len(batch) > 0 {
				e.queue = spare[:0] // the last batch's array, done with
			}
			e.qmu.Unlock()
			if len(batch) == 0 {
				if closed {
					return
				}
				break
			}
			e.commit(batch)
			clear(batch)
			spare = batch
		}
	}
}

// commit writes, syncs and applies one batch.
func (e *engine) commit(batch []*op) {
	e.qmu.Lock()
	failed := e.failed
	e.qmu.Unlock()
	if failed != nil {
		// Queued before the failure, written after it: a later fsync
		// could succeed over pages the failed one dropped. Nothing of
		// the batch is written.
		e.reply(batch, &failedError{cause: failedCause(failed)})
		return
	}
	start := e.segSize
	err := e.writeFrames(batch)
	if err != nil {
		// Some of the batch may have reached the file: cut it back to
		// where the batch began, so that nothing of it survives a
		// reopen; if that fails too, the outcome is unknown.
		fe := &failedError{cause: fmt.Errorf("write %s: %w", e.seg.Name(), err)}
		terr := e.seg.Truncate(start)
		if _, serr := e.seg.Seek(start, 0); terr != nil || serr != nil {
			fe.unknown = backends.ErrOutcomeUnknown
		}
		e.segSize = start
		e.fail(fe.cause)
		e.reply(batch, fe)
		return
	}
	if e.opts.Sync == SyncAlways {
		if err := e.seg.Sync(); err != nil {
			// The frames are in the file, maybe not on the disk: a reopen
			// may find them, or not.
			cause := fmt.Errorf("fsync %s: %w", e.seg.Name(), err)
			e.fail(cause)
			e.reply(batch, &failedError{cause: cause, unknown: backends.ErrOutcomeUnknown})
			return
		}
	} else {
		e.dirty.Store(true)
	}
	e.mu.Lock()
	for _, o := range batch {
		if part, changed := e.st.apply(o); changed {
			e.wake(part)
		}
	}
	live := e.st.live()
	e.mu.Unlock()
	e.reply(batch, nil)
	e.maybeCheckpoint(live)
}

// reply replies to the batch's callers and lets their frames go: the
// cells applied hold their own references.
func (e *engine) reply(batch []*op, err error) {
	for _, o := range batch {
		o.err = err
		e.frames.release(o.fb)
		o.fb = nil
		close(o.done)
	}
}

// writeFrames writes the batch's frames at the segment's end: small
// ones copied together, large ones from where they lie, each salted with
// the segment's salt.
func (e *engine) writeFrames(batch []*op) error {
	for _, o := range batch {
		crc := binary.LittleEndian.Uint32(o.frame[4:])
		binary.LittleEndian.PutUint32(o.frame[4:], crc^e.segSalt)
	}
	buf := e.wbuf[:0]
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		n, err := e.seg.Write(buf)
		e.segSize += int64(n)
		e.walBytes.Add(int64(n))
		buf = buf[:0]
		return err
	}
	for _, o := range batch {
		if len(o.frame) < coalesce {
			if len(buf)+len(o.frame) > coalesce {
				if err := flush(); err != nil {
					return err
				}
			}
			buf = append(buf, o.frame...)
			continue
		}
		if err := flush(); err != nil {
			return err
		}
		n, err := e.seg.Write(o.frame)
		e.segSize += int64(n)
		e.walBytes.Add(int64(n))
		if err != nil {
			return err
		}
	}
	err := flush()
	e.wbuf = buf[:0]
	return err
}

// fail stops the engine's writes: every later one fails with cause.
func (e *engine) fail(cause error) {
	e.qmu.Lock()
	if e.failed == nil {
		e.failed = &failedError{cause: cause}
	}
	e.qmu.Unlock()
}

// syncer fsyncs the segment every interval if it was written to
// (sync=<interval>). A failed fsync fails the engine.
func (e *engine) syncer(every time.Duration) {
	defer e.wg.Done()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-tick.C:
		}
		if !e.dirty.Swap(false) {
			continue
		}
		e.segMu.Lock()
		err := e.seg.Sync()
		name := e.seg.Name()
		e.segMu.Unlock()
		if err != nil {
			e.fail(fmt.Errorf("fsync %s: %w", name, err))
		}
	}
}

// newSegment starts segment seq and makes it the one written. Only the
// writer (or Open, before it starts) calls it. It takes a recycled
// segment's file if there is one (see recycle). It returns the segment
// written until now (nil at Open) for the caller to close with
// closeSegment, off the writer's path: under sync=everysec its fsync
// writes back up to a second of writes (about 20 ms for 64 MiB on the
// 2-core VM), which the writes queued meanwhile would wait for.
func (e *engine) newSegment(seq uint64) (fsFile, error) {
	path := filepath.Join(e.dir, segName(seq))
	f, err := e.reuseSegment(path)
	if err != nil {
		return nil, err
	}
	if f == nil {
		if f, err = e.fs.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644); err != nil {
			return nil, err
		}
	}
	hdr := make([]byte, 0, segHeader)
	hdr = binary.LittleEndian.AppendUint64(append(hdr, segMagic...), seq)
	_, err = f.Write(hdr)
	if err == nil && e.opts.Sync != SyncNever {
		// The segment's name must outlive a crash before its records do.
		if err = f.Sync(); err == nil {
			err = e.fs.SyncDir(e.dir)
		}
	}
	if err != nil {
		_ = f.Close()
		_ = e.fs.Remove(path)
		return nil, err
	}
	e.segMu.Lock()
	old := e.seg
	if old != nil {
		// A recycled file may hold its former life's frames past what
		// this segment wrote: cut them, so that only the newest segment
		// can ever end in a torn frame (recovery takes any other bad
		// frame for damage). Under sync=always the cut is made durable
		// before the new segment takes writes.
		err = old.Truncate(e.segSize)
		if err == nil && e.opts.Sync == SyncAlways {
			err = old.Sync()
		}
	}
	if err != nil {
		e.segMu.Unlock()
		_ = f.Close()
		_ = e.fs.Remove(path)
		return nil, fmt.Errorf("cutting %s: %w", old.Name(), err)
	}
	e.seg, e.segSeq, e.segSize, e.segSalt = f, seq, segHeader, salt(seq)
	e.segMu.Unlock()
	e.walBytes.Add(segHeader)
	return old, nil
}

// closeSegment fsyncs (unless sync=never) and closes a segment no longer
// written. A failed fsync fails the engine, as the syncer's does: the
// writes it held were acknowledged before it, as under sync=everysec.
func (e *engine) closeSegment(f fsFile) error {
	var err error
	if e.opts.Sync != SyncNever {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		err = fmt.Errorf("closing %s: %w", f.Name(), err)
		e.fail(err)
	}
	return err
}

// Segments a checkpoint replaced are kept for reuse, up to keepRecycled
// files of at most maxRecycled bytes: writing over a file's cached pages
// costs a quarter of writing new ones (6 MiB: 0.46 ms against 1.83 ms
// with a file created and one removed per 64 MiB, on the 2-core VM), and
// an fsync of a file that does not grow writes no metadata. Frames left
// from a recycled file's former life fail their checksum under the new
// segment's salt, so they read as a torn tail, which is cut.
const (
	keepRecycled = 2
	maxRecycled  = 1 << 30
)

func recycleName(seq uint64) string { return fmt.Sprintf("recycle-%016x.log", seq) }

// recycle keeps the replaced segment seq (its file at path, size bytes)
// for reuse, or removes it.
func (e *engine) recycle(path string, seq uint64, size int64) error {
	if size <= maxRecycled && len(e.recycled()) < keepRecycled {
		if err := e.fs.Rename(path, filepath.Join(e.dir, recycleName(seq))); err == nil {
			return nil
		}
	}
	return e.fs.Remove(path)
}

// recycled lists the segments kept for reuse.
func (e *engine) recycled() []string {
	des, _ := e.fs.ReadDir(e.dir)
	var names []string
	for _, de := range des {
		var n uint64
		if scanName(de.Name(), "recycle-%016x.log", &n) {
			names = append(names, de.Name())
		}
	}
	return names
}

// reuseSegment renames a recycled file to path and opens it for writing
// from its start, or returns nil if there is none.
func (e *engine) reuseSegment(path string) (fsFile, error) {
	for _, name := range e.recycled() {
		if err := e.fs.Rename(filepath.Join(e.dir, name), path); err != nil {
			continue
		}
		e.reused.Add(1)
		return e.fs.OpenFile(path, os.O_WRONLY, 0)
	}
	return nil, nil
}

// failedCause is the cause of the engine's failure (see fail).
func failedCause(err error) error {
	var fe *failedError
	if errors.As(err, &fe) {
		return fe.cause
	}
	return err
}
