package file

import (
	"io"
	"os"
)

// fileSystem is every call the engine makes on its directory's files
// (but for its lock): the os package's, through osFS. Tests put a
// recorder here to learn what a crash can leave (what was written,
// renamed, cut and fsynced, in order), and to kill the process at any
// one call.
type fileSystem interface {
	OpenFile(name string, flag int, perm os.FileMode) (fsFile, error)
	Rename(oldpath, newpath string) error
	Remove(name string) error
	ReadDir(name string) ([]os.DirEntry, error)
	// SyncDir fsyncs a directory, so that the names created, renamed or
	// removed in it outlive a crash of the machine.
	SyncDir(name string) error
}

// fsFile is an open file of a fileSystem (an *os.File).
type fsFile interface {
	io.Reader
	io.ReaderAt
	io.Writer
	Seek(offset int64, whence int) (int64, error)
	Truncate(size int64) error
	Sync() error
	Close() error
	Name() string
	Stat() (os.FileInfo, error)
}

type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm os.FileMode) (fsFile, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (osFS) Rename(oldpath, newpath string) error       { return os.Rename(oldpath, newpath) }
func (osFS) Remove(name string) error                   { return os.Remove(name) }
func (osFS) ReadDir(name string) ([]os.DirEntry, error) { return os.ReadDir(name) }

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// defaultFS is the fileSystem an engine opened now uses: osFS, but in
// tests.
var defaultFS fileSystem = osFS{}
