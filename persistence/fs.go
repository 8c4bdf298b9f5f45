package persistence

import (
	"io"
	"io/fs"
	"os"
)

// FS is the file system a log works through. The default is the operating
// system's (WithFS replaces it): tests wrap it to count fsyncs, fail one, or
// fill the disk, which is how the poisoning rules are tested at all.
type FS interface {
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	ReadDir(name string) ([]fs.DirEntry, error)
	MkdirAll(name string, perm fs.FileMode) error
	Rename(oldname, newname string) error
	Remove(name string) error
	// SyncDir makes the directory's entries (created, renamed and removed
	// files) durable.
	SyncDir(name string) error
}

// File is the part of *os.File a log uses. Writes are positional (WriteAt),
// never through a shared file offset, so readers and the writer never race
// on one.
type File interface {
	io.ReaderAt
	io.WriterAt
	Sync() error
	Truncate(size int64) error
	Stat() (fs.FileInfo, error)
	Close() error
}

// Option configures Open beyond Config: things a deployment does not tune.
type Option func(*options)

type options struct {
	fs    FS
	cache *FileCache
}

// WithFS makes the log use fsys instead of the operating system's files.
func WithFS(fsys FS) Option { return func(o *options) { o.fs = fsys } }

// OSFS is the operating system's file system, the default: a caller that
// wraps it (a fault-injecting file system) delegates to it.
var OSFS FS = osFS{}

// osFS is the operating system's file system.
type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err // a nil *os.File must not become a non-nil File
	}
	return f, nil
}

func (osFS) ReadDir(name string) ([]fs.DirEntry, error)   { return os.ReadDir(name) }
func (osFS) MkdirAll(name string, perm fs.FileMode) error { return os.MkdirAll(name, perm) }
func (osFS) Rename(oldname, newname string) error         { return os.Rename(oldname, newname) }
func (osFS) Remove(name string) error                     { return os.Remove(name) }

func (osFS) SyncDir(name string) error {
	d, err := os.Open(name)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
