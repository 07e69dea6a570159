package file

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/tqgo/tqgo/backends"
)

// A checkpoint is a file checkpoint-<seq>.ckpt: a header (ckptMagic, then
// seq, uint64 LE) and frames: a kindHead, a kindLog per partition, the
// cells in kindWrite frames of about ckptChunk bytes, and a kindEnd. It
// holds the whole state as of the start of segment seq, which replay
// continues from (and cells written since, which replay writes again). It
// is written to ckptTemp and fsynced; the segment written is fsynced (the
// segments before it were when it began); then the checkpoint is renamed
// and the directory fsynced before any segment before seq is removed, so
// a crash at any point leaves a checkpoint and the segments after it, on
// the disk as far as the checkpoint's copy reached.
const (
	ckptMagic  = "TQCKP001"
	ckptTemp   = "checkpoint.tmp"
	ckptChunk  = 1 << 20
	ckptHeader = 16
)

func ckptName(seq uint64) string { return fmt.Sprintf("checkpoint-%016x.ckpt", seq) }

// checkpointDue reports whether the log has outgrown the live data: more
// than twice the live bytes plus CheckpointMin.
func (e *engine) checkpointDue(live int64) bool {
	return e.walBytes.Load() > 2*live+e.opts.CheckpointMin && e.walBytes.Load() >= e.ckptRetry.Load()
}

// maybeCheckpoint starts a checkpoint when one is due and none runs. The
// writer calls it between batches: it starts a segment, so that the
// checkpoint holds exactly the segments before, and copies the logs (a
// few entries each: the rules compact them) under the engine's lock; the
// cells are copied a shard at a time by the checkpoint itself, and
// written outside the lock. Requests go on meanwhile.
func (e *engine) maybeCheckpoint(live int64) {
	if e.ckptRunning.Load() || !e.checkpointDue(live) {
		return
	}
	seq := e.segSeq + 1
	before := e.walBytes.Load() // the bytes the checkpoint replaces
	old, err := e.newSegment(seq)
	if err != nil {
		e.fail(fmt.Errorf("starting segment %d: %w", seq, err))
		return
	}
	e.mu.RLock()
	logs := make(map[string]plog, len(e.st.logs))
	for name, l := range e.st.logs {
		logs[name] = *l // the entries slice is never written in place
	}
	next := e.st.next
	e.mu.RUnlock()
	e.qmu.Lock()
	stamp := e.lastStamp
	e.qmu.Unlock()
	e.ckptRunning.Store(true)
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer e.ckptRunning.Store(false)
		// The segment replaced is fsynced here, not by the writer; the
		// engine fails if it cannot be, and the checkpoint is given up.
		if err := e.closeSegment(old); err != nil {
			e.ckptErr.Store(&err)
			return
		}
		if err := e.checkpoint(seq, logs, next, stamp); err != nil {
			// The log still holds everything: try again once it grew by
			// CheckpointMin more.
			e.ckptRetry.Store(e.walBytes.Load() + e.opts.CheckpointMin)
			e.ckptErr.Store(&err)
			return
		}
		e.walBytes.Add(-before)
		e.ckptRetry.Store(0)
		e.checkpoints.Add(1)
	}()
}

// errStopped is a checkpoint given up because the engine is closing.
var errStopped = errors.New("file: closing")

// checkpoint writes the checkpoint of the state as of segment seq's
// start, then removes what it replaces.
func (e *engine) checkpoint(seq uint64, logs map[string]plog, next uint64, stamp int64) error {
	tmp := filepath.Join(e.dir, ckptTemp)
	f, err := e.fs.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			_ = f.Close()
			_ = e.fs.Remove(tmp)
		}
	}()
	w := bufio.NewWriterSize(f, ckptChunk)
	hdr := binary.LittleEndian.AppendUint64([]byte(ckptMagic), seq)
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	put := func(b *builder) error {
		frame, err := b.finish(0)
		if err != nil {
			return err
		}
		_, err = w.Write(frame)
		return err
	}
	head := newBuilder(kindHead, 24)
	head.u64(seq)
	head.u64(next)
	head.u64(uint64(stamp))
	if err := put(&head); err != nil {
		return err
	}
	names := make([]string, 0, len(logs))
	for name := range logs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		l := logs[name]
		if err := put(encodeLog(name, &l)); err != nil {
			return err
		}
	}
	ncells := uint64(0)
	// The cells copied under the lock, each holding its frame (see
	// frameBuf) until written.
	type held struct {
		key string
		entry
	}
	var chunk []held
	defer func() {
		for _, c := range chunk {
			e.frames.release(c.f)
		}
	}()
	for i := range numShards {
		select {
		case <-e.stop:
			return errStopped
		default:
		}
		e.mu.RLock()
		chunk = chunk[:0]
		for k, en := range e.st.cells[i] {
			if en.f != nil {
				en.f.refs.Add(1)
			}
			chunk = append(chunk, held{k, en})
		}
		e.mu.RUnlock()
		ncells += uint64(len(chunk))
		for len(chunk) > 0 {
			n, size := 0, 0
			for n < len(chunk) && (n == 0 || size < ckptChunk) {
				size += strLen(len(chunk[n].key)) + strLen(len(chunk[n].v))
				n++
			}
			b := e.frames.builder(kindWrite, uvarintLen(uint64(n))+size)
			b.uvarint(uint64(n))
			for _, c := range chunk[:n] {
				b.str(c.key)
				b.bytes(c.v)
			}
			err := put(&b)
			e.frames.release(b.fb)
			for _, c := range chunk[:n] {
				e.frames.release(c.f)
			}
			clear(chunk[:n]) // let the values go once written
			chunk = chunk[n:]
			if err != nil {
				return err
			}
		}
	}
	end := newBuilder(kindEnd, 16)
	end.u64(ncells)
	end.u64(uint64(len(logs)))
	if err := put(&end); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	ok = true
	// The cells were copied after segment seq began: some come from its
	// records. Those must be on the disk before the checkpoint can be,
	// or a crash of the machine could keep a checkpoint with writes the
	// log lost (a row cleared in the checkpoint, listed by the log).
	e.segMu.Lock()
	err = e.syncSegment()
	e.segMu.Unlock()
	if err != nil {
		_ = e.fs.Remove(tmp)
		e.fail(fmt.Errorf("fsync %s: %w", segName(seq), err))
		return err
	}
	if err := e.fs.Rename(tmp, filepath.Join(e.dir, ckptName(seq))); err != nil {
		_ = e.fs.Remove(tmp)
		return err
	}
	if err := e.fs.SyncDir(e.dir); err != nil {
		return err
	}
	// The new checkpoint stands: what it replaces can go.
	return e.removeBefore(seq)
}

// removeBefore removes (or recycles) the segments before seq and removes
// the checkpoints other than seq's.
func (e *engine) removeBefore(seq uint64) error {
	entries, err := e.fs.ReadDir(e.dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, de := range entries {
		var n uint64
		name := de.Name()
		switch {
		case scanName(name, "wal-%016x.log", &n) && n < seq:
			info, err := de.Info()
			if err == nil {
				err = e.recycle(filepath.Join(e.dir, name), n, info.Size())
			}
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		case scanName(name, "checkpoint-%016x.ckpt", &n) && n != seq:
			if err := e.fs.Remove(filepath.Join(e.dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// scanName parses a file name of format (one %016x), exactly.
func scanName(name, format string, n *uint64) bool {
	var rest string
	k, _ := fmt.Sscanf(name, format+"%s", n, &rest)
	return k == 1 && fmt.Sprintf(format, *n) == name
}

// encodeLog is a partition's log as a kindLog frame: name, emptied,
// start (N, ID), has snapshot, snapshot, then the entries (N, ID, Time,
// Base, Data).
func encodeLog(name string, l *plog) *builder {
	size := strLen(len(name)) + 1 + 16 + 1 + strLen(len(l.Snap)) + uvarintLen(uint64(len(l.Entries)))
	for _, en := range l.Entries {
		size += 32 + strLen(len(en.Data))
	}
	b := newBuilder(kindLog, size)
	b.str(name)
	b.bool(l.Emptied)
	b.u64(l.Start.N)
	b.u64(l.Start.ID)
	b.bool(l.Snap != nil)
	b.bytes(l.Snap)
	b.uvarint(uint64(len(l.Entries)))
	for _, en := range l.Entries {
		b.u64(en.N)
		b.u64(en.ID)
		b.u64(uint64(en.Time))
		b.u64(en.Base)
		b.bytes(en.Data)
	}
	return &b
}

// decodeLog reads a kindLog frame's body.
func decodeLog(r *reader) (string, *plog) {
	name := r.str()
	l := &plog{}
	l.Emptied = r.byte() != 0
	l.Start = backends.Pos{N: r.u64(), ID: r.u64()}
	has := r.byte() != 0
	l.Snap = r.bytes()
	if !has {
		l.Snap = nil
	} else if l.Snap == nil {
		l.Snap = []byte{}
	}
	l.Entries = make([]backends.Entry, r.count(33))
	l.bytes = int64(len(l.Snap))
	for i := range l.Entries {
		l.Entries[i] = backends.Entry{N: r.u64(), ID: r.u64(), Time: int64(r.u64()), Base: r.u64(), Data: r.bytes()}
		l.bytes += int64(len(l.Entries[i].Data))
	}
	return name, l
}
