package file

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
)

// recoverDir loads the newest checkpoint and replays the segments after
// it into e.st, cuts a torn tail off the newest segment, removes what the
// checkpoint replaced, and returns the sequence number of the next
// segment to write.
//
// A read-only engine's (e.readOnly) changes nothing in the directory: it
// stops at a torn tail or a segment whose header is not written yet (a
// writer may be writing them), and notes where in e.view.
func (e *engine) recoverDir() (uint64, error) {
	entries, err := e.fs.ReadDir(e.dir)
	if err != nil {
		return 0, err
	}
	var ckpts, segs []uint64
	for _, de := range entries {
		var n uint64
		switch name := de.Name(); {
		case scanName(name, "wal-%016x.log", &n):
			segs = append(segs, n)
		case scanName(name, "checkpoint-%016x.ckpt", &n):
			ckpts = append(ckpts, n)
		}
	}
	slices.Sort(segs)
	first := uint64(1) // the first segment to replay
	if len(ckpts) > 0 {
		first = slices.Max(ckpts)
		if err := e.loadCheckpoint(filepath.Join(e.dir, ckptName(first)), first); err != nil {
			return 0, err
		}
	}
	next := first
	var replay []uint64
	for _, n := range segs {
		if n >= first {
			replay = append(replay, n)
		}
	}
	for i, n := range replay {
		if n != next {
			return 0, &CorruptError{File: filepath.Join(e.dir, segName(next)), Reason: fmt.Sprintf("segment missing (found %s)", segName(n))}
		}
		size, err := e.replaySegment(filepath.Join(e.dir, segName(n)), n, i == len(replay)-1)
		if err != nil {
			return 0, err
		}
		e.walBytes.Add(size)
		next = n + 1
	}
	if e.readOnly {
		return next, nil
	}
	if err := e.removeBefore(first); err != nil {
		return 0, err
	}
	if err := e.fs.Remove(filepath.Join(e.dir, ckptTemp)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	return next, nil
}

// frameReader reads the frames of a file.
type frameReader struct {
	path string
	salt uint32
	r    *bufio.Reader
	f    fsFile
	off  int64 // of the next frame
	size int64
}

func openFrames(fsys fileSystem, path string, header string, seq uint64, salt uint32) (*frameReader, error) {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	info, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	fr := &frameReader{path: path, salt: salt, f: f, r: bufio.NewReaderSize(f, 1<<20), size: info.Size()}
	hdr := make([]byte, len(header)+8)
	if _, err := io.ReadFull(fr.r, hdr); err != nil {
		_ = f.Close()
		return nil, err // io.ErrUnexpectedEOF or io.EOF: a short file
	}
	if string(hdr[:len(header)]) != header {
		_ = f.Close()
		return nil, &CorruptError{File: path, Reason: fmt.Sprintf("bad header %q", hdr)}
	}
	if got := binary.LittleEndian.Uint64(hdr[len(header):]); got != seq {
		_ = f.Close()
		return nil, fmt.Errorf("%s: header of number %d: %w", path, got, errStaleHeader)
	}
	fr.off = int64(len(hdr))
	return fr, nil
}

// errStaleHeader is a file whose header names another sequence number: a
// recycled segment renamed, its new header not yet written.
var errStaleHeader = errors.New("a former segment's header")

// errTorn is a frame cut short (its length runs past the file's end, or
// is zero) or failing its checksum: a write a crash interrupted, if
// nothing whole follows it.
var errTorn = errors.New("torn record")

// next reads the next frame's payload: io.EOF at the file's end, errTorn
// for a bad frame (fr.off is where it begins).
func (fr *frameReader) next() ([]byte, error) {
	left := fr.size - fr.off
	switch {
	case left == 0:
		return nil, io.EOF
	case left < frameHeader:
		return nil, errTorn
	}
	var hdr [frameHeader]byte
	if _, err := io.ReadFull(fr.r, hdr[:]); err != nil {
		return nil, err
	}
	n := int64(binary.LittleEndian.Uint32(hdr[:]))
	if n == 0 || n > left-frameHeader {
		return nil, errTorn
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(fr.r, payload); err != nil {
		return nil, err
	}
	if checksum(hdr[:], payload, fr.salt) != binary.LittleEndian.Uint32(hdr[4:]) {
		return nil, errTorn // torn, or damage: the caller tells which
	}
	fr.off += frameHeader + n
	return payload, nil
}

func (fr *frameReader) corrupt(reason string) error {
	return &CorruptError{File: fr.path, Offset: fr.off, Reason: reason}
}

// validAt reports whether a frame with a good checksum lies at off.
func validAt(fsys fileSystem, path string, off int64, salt uint32) bool {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	var hdr [frameHeader]byte
	if _, err := f.ReadAt(hdr[:], off); err != nil {
		return false
	}
	n := int64(binary.LittleEndian.Uint32(hdr[:]))
	info, err := f.Stat()
	if err != nil || n == 0 || off+frameHeader+n > info.Size() {
		return false
	}
	payload := make([]byte, n)
	if _, err := f.ReadAt(payload, off+frameHeader); err != nil {
		return false
	}
	return checksum(hdr[:], payload, salt) == binary.LittleEndian.Uint32(hdr[4:])
}

// replaySegment applies a segment's frames to e.st and returns its size.
// The newest segment (last) may end in a torn tail, which is cut off;
// anywhere else a bad frame is corruption (a segment is cut and fsynced
// whole before the next one begins). In the newest segment, a bad frame
// is torn unless a later kindSynced frame says the bytes it lies in were
// on the disk: a crash of the machine may write back the pages written
// after the last fsync in any order, so a whole record may follow a torn
// one there, and nowhere else. The newest segment is then fsynced as cut
// (whatever the policy): Open starts a segment after it.
func (e *engine) replaySegment(path string, seq uint64, last bool) (int64, error) {
	fr, err := openFrames(e.fs, path, segMagic, seq, salt(seq))
	if err != nil {
		var ce *CorruptError
		if last && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, errStaleHeader) ||
			errors.As(err, &ce) && !e.vouched(path, segHeader, fileSize(e.fs, path), salt(seq))) {
			// Created (or a recycled file renamed), its header not on the
			// disk (short, a former life's, or zeros: the size reached the
			// disk before the bytes; under sync=never, records after it),
			// and no record after it saying it was: a crash at its start
			// (or, seen read-only, a segment its writer is starting).
			if e.readOnly {
				e.view.Segment, e.view.Offset = path, 0
				return 0, nil
			}
			return 0, e.fs.Remove(path)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, &CorruptError{File: path, Reason: "segment shorter than its header"}
		}
		if errors.Is(err, errStaleHeader) {
			return 0, &CorruptError{File: path, Reason: err.Error()}
		}
		return 0, err
	}
	defer fr.f.Close()
	for {
		payload, err := fr.next()
		switch {
		case err == io.EOF:
			if e.readOnly {
				e.view.Segment, e.view.Offset = path, fr.off
				return fr.off, nil
			}
			if last {
				if err := truncate(e.fs, path, fr.off, true); err != nil {
					return 0, err
				}
			}
			return fr.off, nil
		case errors.Is(err, errTorn):
			if !last {
				return 0, fr.corrupt("record cut short in a segment that is not the newest")
			}
			if e.vouched(path, fr.off, fr.size, fr.salt) {
				return 0, fr.corrupt("bad record where a later record says the log was on the disk: damage, not a torn write")
			}
			if e.readOnly {
				e.view.Segment, e.view.Offset = path, fr.off
				return fr.off, nil
			}
			if err := truncate(e.fs, path, fr.off, true); err != nil {
				return 0, err
			}
			e.truncated = append(e.truncated, fmt.Sprintf("%s at %d", path, fr.off))
			return fr.off, nil
		case err != nil && e.readOnly && last && errors.Is(err, io.ErrUnexpectedEOF):
			// Cut back under the view's read (the holder undoing a failed
			// write): the view ends where the file now does.
			e.view.Segment, e.view.Offset = path, fr.off
			return fr.off, nil
		case err != nil:
			return 0, err
		}
		var o op
		if err := o.decode(payload); err != nil {
			return 0, &CorruptError{File: path, Offset: fr.off - frameHeader - int64(len(payload)), Reason: err.Error()}
		}
		e.st.apply(&o)
		e.lastStamp = max(e.lastStamp, o.stamp)
	}
}

// markSize is a kindSynced frame's size.
const markSize = frameHeader + 1 + 8 + stampSize

// vouched reports whether a whole kindSynced frame from the bad frame at
// off on says the segment was on the disk past off. It walks the frames
// by their lengths; where a length leads nowhere (zeros, garbage), it
// looks for a mark at every byte after.
func (e *engine) vouched(path string, off, size int64, salt uint32) bool {
	f, err := e.fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	bad := off
	says := func(frame []byte) bool {
		return binary.LittleEndian.Uint32(frame) == markSize-frameHeader && frame[frameHeader] == kindSynced &&
			checksum(frame, frame[frameHeader:], salt) == binary.LittleEndian.Uint32(frame[4:]) &&
			int64(binary.LittleEndian.Uint64(frame[frameHeader+1:])) > bad
	}
	frame := make([]byte, markSize)
	for {
		var hdr [frameHeader]byte
		if _, err := f.ReadAt(hdr[:], off); err != nil {
			return false
		}
		n := int64(binary.LittleEndian.Uint32(hdr[:]))
		if n == 0 || off+frameHeader+n > size {
			break
		}
		if frameHeader+n == markSize {
			if _, err := f.ReadAt(frame, off); err == nil && says(frame) {
				return true
			}
		}
		off += frameHeader + n
	}
	// A scan, in windows that overlap by a mark.
	buf := make([]byte, 1<<20)
	for ; off+markSize <= size; off += int64(len(buf) - markSize + 1) {
		n, err := f.ReadAt(buf, off)
		if err != nil && n < markSize {
			return false
		}
		w := buf[:n]
		for i := 0; i+markSize <= len(w); i++ {
			if w[i] == markSize-frameHeader && w[i+frameHeader] == kindSynced && says(w[i:i+markSize]) {
				return true
			}
		}
		if n < len(buf) {
			return false
		}
	}
	return false
}

func truncate(fsys fileSystem, path string, size int64, sync bool) error {
	f, err := fsys.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// loadCheckpoint reads checkpoint seq into e.st (a fresh state).
func (e *engine) loadCheckpoint(path string, seq uint64) error {
	fr, err := openFrames(e.fs, path, ckptMagic, seq, 0)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return &CorruptError{File: path, Reason: "checkpoint shorter than its header"}
		}
		if errors.Is(err, errStaleHeader) {
			return &CorruptError{File: path, Reason: err.Error()}
		}
		return err
	}
	defer fr.f.Close()
	var ncells, nlogs uint64
	for i := 0; ; i++ {
		payload, err := fr.next()
		switch {
		case err == io.EOF:
			return fr.corrupt("checkpoint ends before its end record")
		case errors.Is(err, errTorn):
			return fr.corrupt("record cut short")
		case err != nil:
			return err
		}
		kind := payload[0]
		r := reader{b: payload[1 : len(payload)-stampSize]}
		if (i == 0) != (kind == kindHead) {
			return fr.corrupt("checkpoint without a head record first")
		}
		switch kind {
		case kindHead:
			if r.u64() != seq {
				return fr.corrupt("head names another segment")
			}
			e.st.next = r.u64()
			e.lastStamp = int64(r.u64())
		case kindLog:
			name, l := decodeLog(&r)
			e.st.logs[name] = l
			e.st.logBytes += l.bytes
			nlogs++
		case kindWrite:
			cells := r.cells()
			e.st.write(cells, nil)
			ncells += uint64(len(cells))
		case kindEnd:
			wantCells, wantLogs := r.u64(), r.u64()
			if r.err == nil && (wantCells != ncells || wantLogs != nlogs) {
				return fr.corrupt(fmt.Sprintf("checkpoint holds %d cells and %d logs, its end record says %d and %d", ncells, nlogs, wantCells, wantLogs))
			}
			if r.err == nil && fr.off != fr.size {
				return fr.corrupt("bytes after the end record")
			}
			if r.err == nil {
				return nil
			}
		default:
			return fr.corrupt(fmt.Sprintf("unknown checkpoint record kind %q", kind))
		}
		if r.err != nil {
			return &CorruptError{File: path, Offset: fr.off - frameHeader - int64(len(payload)), Reason: r.err.Error()}
		}
	}
}

// fileSize is the size of the file at path (0 if it cannot be read).
func fileSize(fsys fileSystem, path string) int64 {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return 0
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return 0
	}
	return info.Size()
}
