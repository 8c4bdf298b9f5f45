package broker

import (
	"encoding/json"
	"io/fs"
	"net/http"
	"sync/atomic"
	"syscall"

	"github.com/getfelix/felix-go/persistence"
)

// chaosDisk is the durable logs' file system under --chaos: the operating
// system's, until a chaos request makes every write, fsync, truncate,
// rename and removal fail with EIO, as a failing disk does; another request
// makes it work again. Reads keep working. It is how a test fails one
// replica's disk and watches the shard go on from the others.
type chaosDisk struct{ failing atomic.Bool }

var _ persistence.FS = (*chaosDisk)(nil)

func (d *chaosDisk) fail(op, name string) error {
	if d.failing.Load() {
		return &fs.PathError{Op: op, Path: name, Err: syscall.EIO}
	}
	return nil
}

func (d *chaosDisk) OpenFile(name string, flag int, perm fs.FileMode) (persistence.File, error) {
	if flag&(syscall.O_CREAT|syscall.O_TRUNC) != 0 {
		if err := d.fail("open", name); err != nil {
			return nil, err
		}
	}
	f, err := persistence.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return chaosFile{File: f, d: d, name: name}, nil
}

func (d *chaosDisk) ReadDir(name string) ([]fs.DirEntry, error) {
	return persistence.OSFS.ReadDir(name)
}

func (d *chaosDisk) MkdirAll(name string, perm fs.FileMode) error {
	if err := d.fail("mkdir", name); err != nil {
		return err
	}
	return persistence.OSFS.MkdirAll(name, perm)
}

func (d *chaosDisk) Rename(oldname, newname string) error {
	if err := d.fail("rename", oldname); err != nil {
		return err
	}
	return persistence.OSFS.Rename(oldname, newname)
}

func (d *chaosDisk) Remove(name string) error {
	if err := d.fail("remove", name); err != nil {
		return err
	}
	return persistence.OSFS.Remove(name)
}

func (d *chaosDisk) SyncDir(name string) error {
	if err := d.fail("sync", name); err != nil {
		return err
	}
	return persistence.OSFS.SyncDir(name)
}

// chaosFile fails what changes the file while its disk is failing.
type chaosFile struct {
	persistence.File
	d    *chaosDisk
	name string
}

func (f chaosFile) WriteAt(b []byte, off int64) (int, error) {
	if err := f.d.fail("write", f.name); err != nil {
		return 0, err
	}
	return f.File.WriteAt(b, off)
}

func (f chaosFile) Sync() error {
	if err := f.d.fail("sync", f.name); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f chaosFile) Truncate(size int64) error {
	if err := f.d.fail("truncate", f.name); err != nil {
		return err
	}
	return f.File.Truncate(size)
}

// DiskRequest asks POST /debug/chaos/disk to make the durable logs' disk
// fail (Fail true) or work again.
type DiskRequest struct {
	Fail bool `json:"fail"`
}

// FailDisk makes every durable log's writes fail (or work again), as a
// failing disk would. Only with --chaos (ErrChaosOff otherwise).
func (b *Broker) FailDisk(fail bool) error {
	if !b.cfg.Chaos {
		return ErrChaosOff
	}
	b.disk.failing.Store(fail)
	b.log.Warn().Bool("failing", fail).Msg("chaos: the durable logs' disk fails writes")
	return nil
}

func (b *Broker) handleDisk(w http.ResponseWriter, r *http.Request) {
	var req DiskRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<10)).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": `body must be JSON {"fail": true|false}: ` + err.Error()})
		return
	}
	if err := b.FailDisk(req.Fail); err != nil {
		writeJSON(w, http.StatusForbidden, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, req)
}
