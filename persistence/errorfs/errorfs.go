// Package errorfs owns a failing disk: an FS that wraps persistence's file
// system interface and, on request, makes every write, fsync, truncate,
// rename, removal and directory creation fail with EIO, as a failing disk
// does, until told to work again. Reads keep working throughout. The broker
// holds one under --chaos for its durable logs, so a test can fail one
// replica's disk and watch the shard go on from the others.
package errorfs

import (
	"io/fs"
	"sync/atomic"
	"syscall"

	"github.com/getfelix/felix-go/persistence"
)

// FS is a persistence.FS that fails what changes the disk while it is
// failing. Its methods are safe for concurrent use.
type FS struct {
	base    persistence.FS
	failing atomic.Bool
}

var _ persistence.FS = (*FS)(nil)

// Wrap returns an FS over base that works until SetFailing(true).
func Wrap(base persistence.FS) *FS { return &FS{base: base} }

// SetFailing makes the disk fail (true) or work again (false). A file
// opened before keeps its handle and follows the switch too.
func (d *FS) SetFailing(failing bool) { d.failing.Store(failing) }

// Failing reports whether the disk fails now.
func (d *FS) Failing() bool { return d.failing.Load() }

func (d *FS) fail(op, name string) error {
	if d.failing.Load() {
		return &fs.PathError{Op: op, Path: name, Err: syscall.EIO}
	}
	return nil
}

// OpenFile fails only an open that would create or truncate: opening a
// file to read it is a read.
func (d *FS) OpenFile(name string, flag int, perm fs.FileMode) (persistence.File, error) {
	if flag&(syscall.O_CREAT|syscall.O_TRUNC) != 0 {
		if err := d.fail("open", name); err != nil {
			return nil, err
		}
	}
	f, err := d.base.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return file{File: f, d: d, name: name}, nil
}

func (d *FS) ReadDir(name string) ([]fs.DirEntry, error) {
	return d.base.ReadDir(name)
}

func (d *FS) MkdirAll(name string, perm fs.FileMode) error {
	if err := d.fail("mkdir", name); err != nil {
		return err
	}
	return d.base.MkdirAll(name, perm)
}

func (d *FS) Rename(oldname, newname string) error {
	if err := d.fail("rename", oldname); err != nil {
		return err
	}
	return d.base.Rename(oldname, newname)
}

func (d *FS) Remove(name string) error {
	if err := d.fail("remove", name); err != nil {
		return err
	}
	return d.base.Remove(name)
}

func (d *FS) SyncDir(name string) error {
	if err := d.fail("sync", name); err != nil {
		return err
	}
	return d.base.SyncDir(name)
}

// file fails what changes the file while its disk is failing.
type file struct {
	persistence.File
	d    *FS
	name string
}

func (f file) WriteAt(b []byte, off int64) (int, error) {
	if err := f.d.fail("write", f.name); err != nil {
		return 0, err
	}
	return f.File.WriteAt(b, off)
}

func (f file) Sync() error {
	if err := f.d.fail("sync", f.name); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f file) Truncate(size int64) error {
	if err := f.d.fail("truncate", f.name); err != nil {
		return err
	}
	return f.File.Truncate(size)
}
