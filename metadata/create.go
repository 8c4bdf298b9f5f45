package metadata

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"
)

// createIfMissing makes a new, empty store at path by initialising it under
// a temporary name and renaming it into place, so path is either absent or
// a whole bbolt file. bbolt initialises a new file in place, and on a full
// disk that write fails part way: the file it left (4 or 8 KiB of a 16 KiB
// header) made every later start fail ("file size too small") or crash
// with SIGBUS mapping pages past its end, even after space was freed. A
// temporary file left by such a failure, or by a crash, is removed here and
// again on the next start.
func createIfMissing(path string) error {
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		return nil // there, or not ours to judge: bolt.Open reports it
	}
	tmp := path + ".new"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("metadata: remove %s: %w", tmp, err)
	}
	err := initStore(tmp)
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncParent(path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("metadata: create %s: %w", path, err)
	}
	return nil
}

// initStore writes a new store with its buckets at path.
func initStore(path string) error {
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		return err
	}
	err = db.Update(createBuckets)
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	return err
}

func createBuckets(tx *bolt.Tx) error {
	for _, name := range [][]byte{bucketStreams, bucketProducers, bucketKafkaUsers, bucketSecrets} {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return err
		}
	}
	return nil
}

// syncParent fsyncs the directory holding path, so the rename that put it
// there survives a power loss.
func syncParent(path string) error {
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
