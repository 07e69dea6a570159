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
	if e.readOnly {
		return readOnlyError(e.dir)
	}
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
		if err := e.syncSegment(); err != nil {
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
	if d := e.durable.Load(); d > e.marked {
		buf = append(buf, e.markFrame(d)...)
		e.marked = d
	}
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		n, err := e.seg.Write(buf)
		e.segSize += int64(n)
		e.written.Store(e.segSize)
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
		e.written.Store(e.segSize)
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
		err := e.syncSegment()
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
// written until now (nil at Open) for the caller to close.
//
// The segment written until now is cut at its end and fsynced first,
// whatever the sync policy: recovery takes a bad record anywhere but in
// the newest segment for damage, so a segment must be whole on the disk
// before a newer one can be found (a recycled file holds its former
// frames past this life's end; under sync=everysec its last second of
// writes is not on the disk yet). Under sync=everysec this fsync writes
// back up to a second of writes (about 20 ms for 64 MiB on the 2-core
// VM), which the writes queued meanwhile wait for: once per checkpoint.
func (e *engine) newSegment(seq uint64) (fsFile, error) {
	e.segMu.Lock()
	old := e.seg
	e.segMu.Unlock()
	if old != nil {
		err := old.Truncate(e.segSize)
		if err == nil {
			err = old.Sync()
		}
		if err == nil && e.opts.Sync == SyncNever {
			// Its name too (under the other policies, made durable as
			// it began).
			err = e.fs.SyncDir(e.dir)
		}
		if err != nil {
			return nil, fmt.Errorf("cutting %s: %w", old.Name(), err)
		}
	}
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
	durable := int64(0)
	if err == nil && e.opts.Sync != SyncNever {
		// The segment's name must outlive a crash before its records do.
		if err = f.Sync(); err == nil {
			err = e.fs.SyncDir(e.dir)
			durable = segHeader
		}
	}
	if err != nil {
		_ = f.Close()
		_ = e.fs.Remove(path)
		return nil, err
	}
	e.segMu.Lock()
	e.seg, e.segSeq, e.segSize, e.segSalt = f, seq, segHeader, salt(seq)
	e.written.Store(segHeader)
	e.durable.Store(durable)
	e.marked = durable
	e.segMu.Unlock()
	e.walBytes.Add(segHeader)
	return old, nil
}

// syncSegment fsyncs the segment written and notes how much of it is on
// the disk. e.segMu is held (or the writer is the caller, between
// batches).
func (e *engine) syncSegment() error {
	w := e.written.Load()
	if err := e.seg.Sync(); err != nil {
		return err
	}
	if w > e.durable.Load() {
		e.durable.Store(w)
	}
	return nil
}

// markFrame is a kindSynced frame saying the segment's first d bytes are
// on the disk, salted. The writer puts one before a batch when more of
// the segment was fsynced since the last: on reopen, a bad record that a
// later mark says was on the disk is damage; one no mark vouches for lies
// where a crash of the machine may have left unwritten pages (in any
// order), and is a torn tail.
func (e *engine) markFrame(d int64) []byte {
	b := newBuilder(kindSynced, 8)
	b.u64(uint64(d))
	frame, _ := b.finish(0)
	crc := binary.LittleEndian.Uint32(frame[4:])
	binary.LittleEndian.PutUint32(frame[4:], crc^e.segSalt)
	return frame
}

// writeMark writes a mark if the segment's durable bytes outgrew the last
// (at Close, after its fsync). e.segMu is held, the writer stopped.
func (e *engine) writeMark() error {
	d := e.durable.Load()
	if d <= e.marked {
		return nil
	}
	n, err := e.seg.Write(e.markFrame(d))
	e.segSize += int64(n)
	e.written.Store(e.segSize)
	e.marked = d
	return err
}

// closeSegment closes a segment no longer written (newSegment fsynced
// it). A failed close fails the engine.
func (e *engine) closeSegment(f fsFile) error {
	err := f.Close()
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
