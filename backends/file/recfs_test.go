package file

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
)

// recFS is a fileSystem that records what the engine does to its files,
// in order: every create, write (with its bytes and offset), cut, fsync,
// rename and remove, and the directory's fsyncs; from the trace, states
// builds what a crash of the machine after any prefix of it can leave
// (ALICE, OSDI 2014; CrashMonkey, OSDI 2018). With killAt > 0 it kills
// the process (SIGKILL) at its killAt-th call that changes a file,
// before making it.
type recFS struct {
	osFS
	killAt int
	onOpen func(name string) // called as a file is opened, if set

	mu    sync.Mutex
	calls int
	kinds []string // each call's, in order
	ops   []fsOp
	inode map[string]int // path → inode, as the calls left them
	nino  int
}

type fsOpKind int

const (
	opCreate   fsOpKind = iota // path, ino: a new empty file under path
	opWrite                    // ino, off, data
	opTruncate                 // ino, size
	opSync                     // ino (path: its name then)
	opRename                   // path → to
	opRemove                   // path
	opSyncDir
)

type fsOp struct {
	kind     fsOpKind
	path, to string
	ino      int
	off      int64
	data     []byte
}

func newRecFS() *recFS { return &recFS{inode: map[string]int{}} }

// call counts a call that changes a file and kills the process at the
// killAt-th. r.mu is held.
func (r *recFS) call(kind string) {
	r.calls++
	r.kinds = append(r.kinds, kind)
	if r.killAt > 0 && r.calls == r.killAt {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}

// callKinds lists the calls that change a file made so far, by kind.
func (r *recFS) callKinds() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.kinds)
}

// Len is the trace's length: a crash point.
func (r *recFS) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ops)
}

func (r *recFS) OpenFile(name string, flag int, perm os.FileMode) (fsFile, error) {
	if r.onOpen != nil {
		r.onOpen(name)
	}
	if flag&(os.O_WRONLY|os.O_RDWR) == 0 {
		return r.osFS.OpenFile(name, flag, perm)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.call("open")
	f, err := r.osFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	ino, ok := r.inode[name]
	if !ok {
		r.nino++
		ino = r.nino
		r.inode[name] = ino
		r.ops = append(r.ops, fsOp{kind: opCreate, path: name, ino: ino})
	} else if flag&os.O_TRUNC != 0 {
		r.ops = append(r.ops, fsOp{kind: opTruncate, ino: ino})
	}
	return &recFile{fsFile: f, r: r, ino: ino}, nil
}

func (r *recFS) Rename(oldpath, newpath string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.call("rename")
	if err := r.osFS.Rename(oldpath, newpath); err != nil {
		return err
	}
	r.inode[newpath] = r.inode[oldpath]
	delete(r.inode, oldpath)
	r.ops = append(r.ops, fsOp{kind: opRename, path: oldpath, to: newpath})
	return nil
}

func (r *recFS) Remove(name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.call("remove")
	if err := r.osFS.Remove(name); err != nil {
		return err
	}
	delete(r.inode, name)
	r.ops = append(r.ops, fsOp{kind: opRemove, path: name})
	return nil
}

func (r *recFS) SyncDir(dir string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.call("syncdir")
	if err := r.osFS.SyncDir(dir); err != nil {
		return err
	}
	r.ops = append(r.ops, fsOp{kind: opSyncDir})
	return nil
}

type recFile struct {
	fsFile
	r   *recFS
	ino int
	pos int64
}

func (f *recFile) Write(p []byte) (int, error) {
	f.r.mu.Lock()
	defer f.r.mu.Unlock()
	f.r.call("write")
	n, err := f.fsFile.Write(p)
	if n > 0 {
		f.r.ops = append(f.r.ops, fsOp{kind: opWrite, ino: f.ino, off: f.pos, data: append([]byte(nil), p[:n]...)})
		f.pos += int64(n)
	}
	return n, err
}

func (f *recFile) Seek(off int64, whence int) (int64, error) {
	f.r.mu.Lock()
	defer f.r.mu.Unlock()
	n, err := f.fsFile.Seek(off, whence)
	if err == nil {
		f.pos = n
	}
	return n, err
}

func (f *recFile) Truncate(size int64) error {
	f.r.mu.Lock()
	defer f.r.mu.Unlock()
	f.r.call("ftruncate")
	if err := f.fsFile.Truncate(size); err != nil {
		return err
	}
	f.r.ops = append(f.r.ops, fsOp{kind: opTruncate, ino: f.ino, off: size})
	return nil
}

func (f *recFile) Sync() error {
	f.r.mu.Lock()
	defer f.r.mu.Unlock()
	f.r.call("fsync")
	if err := f.fsFile.Sync(); err != nil {
		return err
	}
	f.r.ops = append(f.r.ops, fsOp{kind: opSync, ino: f.ino, path: f.Name()})
	return nil
}

// A crash state: the files a crash leaves, by name (base names), and how
// it was made.
type crashState struct {
	how   string
	files map[string][]byte
}

// inodeState is a file's content as fsynced, and the writes and cuts
// made to it since.
type inodeState struct {
	durable []byte
	pending []fsOp
}

func applyData(b []byte, o fsOp) []byte {
	switch o.kind {
	case opWrite:
		end := o.off + int64(len(o.data))
		if int64(len(b)) < end {
			b = append(b, make([]byte, end-int64(len(b)))...)
		}
		copy(b[o.off:], o.data)
	case opTruncate:
		if int64(len(b)) > o.off {
			b = b[:o.off]
		} else {
			b = append(b, make([]byte, o.off-int64(len(b)))...)
		}
	}
	return b
}

func applyName(ns map[string]int, o fsOp) {
	switch o.kind {
	case opCreate:
		ns[filepath.Base(o.path)] = o.ino
	case opRename:
		if ino, ok := ns[filepath.Base(o.path)]; ok {
			ns[filepath.Base(o.to)] = ino
			delete(ns, filepath.Base(o.path))
		}
	case opRemove:
		delete(ns, filepath.Base(o.path))
	}
}

// states builds the states a crash of the machine after the trace's
// first k ops can leave, n of them at most: what was fsynced (names as of
// the last directory fsync, contents as of each file's last fsync), and
// what a kill -9 leaves (every op), then with rng: in-order prefixes and
// random subsets of the unsynced writes of each file and of the unsynced
// changes of names, 4 KiB page mixes of each file's fsynced and written
// contents, and a write torn at 512 B or at any byte.
func (r *recFS) states(k int, rng *rand.Rand, n int) []crashState {
	r.mu.Lock()
	ops := r.ops[:k:k]
	r.mu.Unlock()
	inodes := map[int]*inodeState{}
	durableNS := map[string]int{}
	var pendingNS []fsOp
	for _, o := range ops {
		switch o.kind {
		case opCreate:
			inodes[o.ino] = &inodeState{}
			pendingNS = append(pendingNS, o)
		case opRename, opRemove:
			pendingNS = append(pendingNS, o)
		case opSyncDir:
			for _, p := range pendingNS {
				applyName(durableNS, p)
			}
			pendingNS = nil
		case opWrite, opTruncate:
			in := inodes[o.ino]
			in.pending = append(in.pending, o)
		case opSync:
			in := inodes[o.ino]
			for _, p := range in.pending {
				in.durable = applyData(in.durable, p)
			}
			in.pending = nil
		}
	}
	build := func(how string, nsOps int, content func(*inodeState) []byte) crashState {
		ns := map[string]int{}
		for k, v := range durableNS {
			ns[k] = v
		}
		for _, p := range pendingNS[:nsOps] {
			applyName(ns, p)
		}
		st := crashState{how: how, files: map[string][]byte{}}
		for name, ino := range ns {
			st.files[name] = content(inodes[ino])
		}
		return st
	}
	full := func(in *inodeState, upto int) []byte {
		b := append([]byte(nil), in.durable...)
		for _, p := range in.pending[:upto] {
			b = applyData(b, p)
		}
		return b
	}
	out := []crashState{
		build("fsynced", 0, func(in *inodeState) []byte { return full(in, 0) }),
		build("kill", len(pendingNS), func(in *inodeState) []byte { return full(in, len(in.pending)) }),
	}
	for len(out) < n {
		nsOps := rng.IntN(len(pendingNS) + 1)
		switch v := rng.IntN(5); v {
		case 0:
			out = append(out, build(fmt.Sprintf("prefix (names %d/%d)", nsOps, len(pendingNS)), nsOps, func(in *inodeState) []byte {
				return full(in, rng.IntN(len(in.pending)+1))
			}))
		case 1:
			out = append(out, build(fmt.Sprintf("subset (names %d/%d)", nsOps, len(pendingNS)), nsOps, func(in *inodeState) []byte {
				b := append([]byte(nil), in.durable...)
				for _, p := range in.pending {
					if p.kind == opTruncate || rng.IntN(2) == 0 {
						b = applyData(b, p)
					}
				}
				return b
			}))
		case 2:
			out = append(out, build(fmt.Sprintf("pages (names %d/%d)", nsOps, len(pendingNS)), nsOps, func(in *inodeState) []byte {
				d, w := in.durable, full(in, len(in.pending))
				size := len(w)
				if rng.IntN(2) == 0 {
					size = len(d)
				}
				b := make([]byte, size)
				for p := 0; p < size; p += 4096 {
					src := w
					if rng.IntN(2) == 0 {
						src = d
					}
					if p < len(src) {
						copy(b[p:min(p+4096, size)], src[p:min(p+4096, len(src))])
					}
				}
				return b
			}))
		default:
			sector := v == 3
			how := "torn anywhere"
			if sector {
				how = "torn at 512 B"
			}
			out = append(out, build(fmt.Sprintf("%s (names %d/%d)", how, nsOps, len(pendingNS)), nsOps, func(in *inodeState) []byte {
				i := rng.IntN(len(in.pending) + 1)
				b := full(in, i)
				if i < len(in.pending) && in.pending[i].kind == opWrite {
					o := in.pending[i]
					cut := rng.IntN(len(o.data) + 1)
					if sector {
						cut = int((o.off+int64(cut))/512*512 - o.off)
						cut = max(cut, 0)
					}
					o.data = o.data[:cut]
					b = applyData(b, o)
				}
				return b
			}))
		}
	}
	return out
}

// materialize writes st's files into dir.
func (st crashState) materialize(dir string) error {
	for name, b := range st.files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// durableAt returns, for each crash point k (0..len), the trace index of
// the last fsync before k of the newest log segment then, its name on
// the disk by k too (-1 if none): every record written before it is on
// the disk.
func (r *recFS) durableAt() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]int, len(r.ops)+1)
	last, pending, newest := -1, -1, uint64(0)
	named := map[string]bool{} // names on the disk
	var renamed []fsOp         // since the last directory fsync
	for i, o := range r.ops {
		out[i] = last
		var seq uint64
		switch o.kind {
		case opCreate, opRename, opRemove:
			renamed = append(renamed, o)
			p := o.path
			if o.kind == opRename {
				p = o.to
			}
			if o.kind != opRemove && scanName(filepath.Base(p), "wal-%016x.log", &seq) {
				newest = max(newest, seq)
			}
		case opSyncDir:
			for _, p := range renamed {
				switch p.kind {
				case opCreate:
					named[filepath.Base(p.path)] = true
				case opRename:
					delete(named, filepath.Base(p.path))
					named[filepath.Base(p.to)] = true
				case opRemove:
					delete(named, filepath.Base(p.path))
				}
			}
			renamed = nil
			if pending >= 0 {
				last, pending = max(last, pending), -1
			}
		case opSync:
			if scanName(filepath.Base(o.path), "wal-%016x.log", &seq) && seq >= newest {
				if named[filepath.Base(o.path)] {
					last = i
				} else {
					pending = i
				}
			}
		}
	}
	out[len(r.ops)] = last
	return out
}

// summary counts the trace's ops by kind, and the checkpoints renamed in
// and recycled segments reused.
func (r *recFS) summary() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n [opSyncDir + 1]int
	ckpts, reused := 0, 0
	for _, o := range r.ops {
		n[o.kind]++
		if o.kind == opRename {
			var seq uint64
			switch {
			case scanName(filepath.Base(o.to), "checkpoint-%016x.ckpt", &seq):
				ckpts++
			case scanName(filepath.Base(o.to), "wal-%016x.log", &seq):
				reused++
			}
		}
	}
	return fmt.Sprintf("%d creates, %d writes, %d cuts, %d fsyncs, %d renames, %d removes, %d directory fsyncs; %d checkpoints, %d segments reused",
		n[opCreate], n[opWrite], n[opTruncate], n[opSync], n[opRename], n[opRemove], n[opSyncDir], ckpts, reused)
}

// around returns the crash points around every op that is neither a
// write nor an fsync (creates, cuts, renames, removes, directory
// fsyncs: where segments and checkpoints change hands).
func (r *recFS) around() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ks []int
	for i, o := range r.ops {
		if o.kind != opWrite && o.kind != opSync {
			for k := max(i-1, 0); k <= min(i+2, len(r.ops)); k++ {
				ks = append(ks, k)
			}
		}
	}
	return ks
}
