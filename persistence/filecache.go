package persistence

import (
	"container/list"
	"io/fs"
	"os"
	"sync"
)

// FileCache bounds the descriptors many logs keep open together (before it,
// each durable shard held its segment, two indexes and its mark open for
// ever, and one client took a broker to its 20000-descriptor limit in 11 s).
// A log opened WithFileCache opens its files through the cache: a file not
// in use (no read, write, fsync or truncate running on it) may be closed,
// least recently used first, whenever another file needs a descriptor and
// the cache is at its bound; the next operation on it opens it again by its
// current name (the cache follows renames made through the log's FS).
//
// The bound is soft in one direction only: files in use are never closed,
// so while more operations run at once than the bound allows, the cache
// holds one descriptor per running operation, and gives the excess back as
// each ends.
//
// Closing a file with unsynced writes and fsyncing it later through a new
// descriptor is safe: fsync covers the file, not the descriptor, and Linux
// (since 4.16, errseq "report once") reports a writeback error that no
// descriptor has seen yet to the next fsync, so a failure is still seen
// and still poisons the log.
type FileCache struct {
	max int

	mu struct {
		sync.Mutex
		open int        // descriptors held, in use or idle
		idle *list.List // of *cachedFile: open and not in use, least recently used first
		// byPath finds the files a rename moves.
		byPath map[string]map[*cachedFile]struct{}
	}
}

// NewFileCache returns a cache that keeps at most maxOpen descriptors open
// while they are idle. maxOpen below 4 is raised to 4: one appending log
// needs its segment, two indexes and its mark at once.
func NewFileCache(maxOpen int) *FileCache {
	c := &FileCache{max: max(maxOpen, 4)}
	c.mu.idle = list.New()
	c.mu.byPath = make(map[string]map[*cachedFile]struct{})
	return c
}

// WithFileCache makes the log open its files through c, which may be shared
// by many logs.
func WithFileCache(c *FileCache) Option { return func(o *options) { o.cache = c } }

// Open is how many descriptors the cache holds now.
func (c *FileCache) Open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.open
}

// evictLocked takes idle files off their descriptors until room more fit
// under the bound, and returns the descriptors for the caller to close
// once it let go of c.mu. REQUIRES: c.mu is held.
func (c *FileCache) evictLocked(room int) []File {
	var out []File
	for c.mu.open+room > c.max && c.mu.idle.Len() > 0 {
		h := c.mu.idle.Remove(c.mu.idle.Front()).(*cachedFile)
		h.elem = nil
		out = append(out, h.f)
		h.f = nil
		c.mu.open--
	}
	return out
}

// closeEvicted closes descriptors evictLocked took. Their errors are
// dropped: nothing was written through them since their last use, and a
// writeback error reaches the file's next fsync (see FileCache).
func closeEvicted(fs []File) {
	for _, f := range fs {
		_ = f.Close()
	}
}

// cachingFS opens files through a FileCache and makes renames follow them.
type cachingFS struct {
	FS
	c *FileCache
}

func (cf cachingFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	c := cf.c
	c.mu.Lock()
	victims := c.evictLocked(1)
	c.mu.open++ // the slot is ours while we open
	c.mu.Unlock()
	closeEvicted(victims)
	f, err := cf.FS.OpenFile(name, flag, perm)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.mu.open--
		return nil, err
	}
	// A reopen must not create, truncate or refuse an existing file.
	h := &cachedFile{c: c, fs: cf.FS, path: name, flag: flag &^ (os.O_CREATE | os.O_EXCL | os.O_TRUNC), f: f}
	h.elem = c.mu.idle.PushBack(h)
	c.addPathLocked(h)
	return h, nil
}

func (cf cachingFS) Rename(oldname, newname string) error {
	if err := cf.FS.Rename(oldname, newname); err != nil {
		return err
	}
	c := cf.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for h := range c.mu.byPath[oldname] {
		c.removePathLocked(h)
		h.path = newname
		c.addPathLocked(h)
	}
	return nil
}

// addPathLocked REQUIRES: c.mu is held.
func (c *FileCache) addPathLocked(h *cachedFile) {
	m := c.mu.byPath[h.path]
	if m == nil {
		m = make(map[*cachedFile]struct{})
		c.mu.byPath[h.path] = m
	}
	m[h] = struct{}{}
}

// removePathLocked REQUIRES: c.mu is held.
func (c *FileCache) removePathLocked(h *cachedFile) {
	if m := c.mu.byPath[h.path]; m != nil {
		delete(m, h)
		if len(m) == 0 {
			delete(c.mu.byPath, h.path)
		}
	}
}

// cachedFile is a File whose descriptor the cache may close while it is
// idle; every operation reopens it if needed and holds it meanwhile.
type cachedFile struct {
	c       *FileCache
	fs      FS
	flag    int
	opening sync.Mutex // one reopen at a time

	// Guarded by c.mu.
	path   string
	f      File          // nil while closed by the cache
	users  int           // operations running
	elem   *list.Element // in c.mu.idle while open and unused
	closed bool          // Close was called
}

// acquire returns the descriptor, opening it again if the cache closed it,
// and keeps it open until release.
func (h *cachedFile) acquire() (File, error) {
	c := h.c
	c.mu.Lock()
	if h.closed {
		c.mu.Unlock()
		return nil, os.ErrClosed
	}
	h.users++
	if h.elem != nil {
		c.mu.idle.Remove(h.elem)
		h.elem = nil
	}
	if f := h.f; f != nil {
		c.mu.Unlock()
		return f, nil
	}
	c.mu.Unlock()

	h.opening.Lock()
	defer h.opening.Unlock()
	c.mu.Lock()
	if f := h.f; f != nil { // another operation reopened it meanwhile
		c.mu.Unlock()
		return f, nil
	}
	victims := c.evictLocked(1)
	c.mu.open++
	path := h.path
	c.mu.Unlock()
	closeEvicted(victims)
	f, err := h.fs.OpenFile(path, h.flag, 0)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.mu.open--
		h.users--
		return nil, err
	}
	h.f = f
	return f, nil
}

// release ends an operation; the last one makes the file idle, and gives
// back descriptors held past the bound while too many were in use.
func (h *cachedFile) release() {
	c := h.c
	c.mu.Lock()
	h.users--
	if h.users == 0 && h.f != nil && !h.closed {
		h.elem = c.mu.idle.PushBack(h)
	}
	victims := c.evictLocked(0)
	c.mu.Unlock()
	closeEvicted(victims)
}

func (h *cachedFile) ReadAt(b []byte, off int64) (int, error) {
	f, err := h.acquire()
	if err != nil {
		return 0, err
	}
	defer h.release()
	return f.ReadAt(b, off)
}

func (h *cachedFile) WriteAt(b []byte, off int64) (int, error) {
	f, err := h.acquire()
	if err != nil {
		return 0, err
	}
	defer h.release()
	return f.WriteAt(b, off)
}

func (h *cachedFile) Sync() error {
	f, err := h.acquire()
	if err != nil {
		return err
	}
	defer h.release()
	return f.Sync()
}

func (h *cachedFile) Truncate(size int64) error {
	f, err := h.acquire()
	if err != nil {
		return err
	}
	defer h.release()
	return f.Truncate(size)
}

func (h *cachedFile) Stat() (fs.FileInfo, error) {
	f, err := h.acquire()
	if err != nil {
		return nil, err
	}
	defer h.release()
	return f.Stat()
}

// Close closes the descriptor if the cache has it open and forgets the
// file. The log closes a file only when nothing uses it.
func (h *cachedFile) Close() error {
	c := h.c
	c.mu.Lock()
	if h.closed {
		c.mu.Unlock()
		return os.ErrClosed
	}
	h.closed = true
	if h.elem != nil {
		c.mu.idle.Remove(h.elem)
		h.elem = nil
	}
	f := h.f
	h.f = nil
	if f != nil {
		c.mu.open--
	}
	c.removePathLocked(h)
	c.mu.Unlock()
	if f != nil {
		return f.Close()
	}
	return nil
}
