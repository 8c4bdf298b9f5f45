package errorfs_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/getfelix/felix-go/persistence"
	"github.com/getfelix/felix-go/persistence/errorfs"
)

// TestFailing: while failing, every change to the disk (create, write,
// sync, truncate, rename, remove, mkdir, directory sync) fails with EIO
// and changes nothing, on files opened before as after; reads and
// listings keep working; once working again, so do the changes.
func TestFailing(t *testing.T) {
	dir := t.TempDir()
	d := errorfs.Wrap(persistence.OSFS)
	path := filepath.Join(dir, "seg")
	f, err := d.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte("kept"), 0); err != nil {
		t.Fatal(err)
	}

	d.SetFailing(true)
	if !d.Failing() {
		t.Fatal("Failing() = false after SetFailing(true)")
	}
	eio := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, syscall.EIO) {
			t.Errorf("%s while failing: %v, want EIO", what, err)
		}
	}
	_, err = f.WriteAt([]byte("lost"), 0)
	eio("write", err)
	eio("sync", f.Sync())
	eio("truncate", f.Truncate(0))
	_, err = d.OpenFile(filepath.Join(dir, "new"), os.O_RDWR|os.O_CREATE, 0o644)
	eio("create", err)
	eio("rename", d.Rename(path, path+".old"))
	eio("remove", d.Remove(path))
	eio("mkdir", d.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	eio("sync dir", d.SyncDir(dir))

	buf := make([]byte, 4)
	if _, err := f.ReadAt(buf, 0); err != nil || string(buf) != "kept" {
		t.Errorf("read while failing: %q %v, want %q", buf, err, "kept")
	}
	r, err := d.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		t.Fatalf("open to read while failing: %v", err)
	}
	r.Close()
	if entries, err := d.ReadDir(dir); err != nil || len(entries) != 1 {
		t.Errorf("list while failing: %v %v, want the one file", entries, err)
	}

	d.SetFailing(false)
	if _, err := f.WriteAt([]byte("back"), 0); err != nil {
		t.Errorf("write after working again: %v", err)
	}
	if err := f.Sync(); err != nil {
		t.Errorf("sync after working again: %v", err)
	}
	if err := d.Rename(path, path+".old"); err != nil {
		t.Errorf("rename after working again: %v", err)
	}
}
