// Package metadata owns the broker's metadata store: stream definitions
// today, consumer group cursors and producer state later. It is an embedded
// bbolt file in the data directory, written in one transaction per change
// and fsync'd by bbolt before Put returns.
package metadata

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// FileName is the store's file in the data directory.
const FileName = "metadata.db"

var bucketStreams = []byte("streams")

// StreamDef is a stream's definition: what it was created with.
type StreamDef struct {
	Tenant         string        `json:"tenant"`
	Namespace      string        `json:"namespace"`
	Stream         string        `json:"stream"`
	Shards         uint32        `json:"shards"`
	Durable        bool          `json:"durable"`
	Routing        string        `json:"routing"`
	RetentionBytes int64         `json:"retention_bytes,omitempty"`
	RetentionAge   time.Duration `json:"retention_age,omitempty"`
	CreatedAt      time.Time     `json:"created_at"`
}

func (d StreamDef) key() []byte { return []byte(d.Tenant + "/" + d.Namespace + "/" + d.Stream) }

// Store is the metadata store. It is safe for concurrent use.
type Store struct {
	db *bolt.DB
}

// ErrLocked means another broker holds the data directory.
var ErrLocked = errors.New("metadata: the data directory is in use by another broker")

// Open opens (creating if needed) the store in dataDir.
func Open(dataDir string) (*Store, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("metadata: data dir %s: %w (choose a writable --data-dir)", dataDir, err)
	}
	path := filepath.Join(dataDir, FileName)
	// bbolt takes an exclusive flock; a short timeout turns "another broker
	// has it" into an error instead of a hang.
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("%w: %s", ErrLocked, path)
	}
	if err != nil {
		return nil, fmt.Errorf("metadata: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucketStreams)
		return err
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("metadata: init %s: %w", path, err)
	}
	return &Store{db: db}, nil
}

// Close closes the store.
func (s *Store) Close() error { return s.db.Close() }

// PutStream records a stream definition (create or replace).
func (s *Store) PutStream(d StreamDef) error {
	v, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("metadata: encode stream %s: %w", d.key(), err)
	}
	if err := s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketStreams).Put(d.key(), v) }); err != nil {
		return fmt.Errorf("metadata: put stream %s: %w", d.key(), err)
	}
	return nil
}

// DeleteStream forgets a stream definition.
func (s *Store) DeleteStream(d StreamDef) error {
	if err := s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketStreams).Delete(d.key()) }); err != nil {
		return fmt.Errorf("metadata: delete stream %s: %w", d.key(), err)
	}
	return nil
}

// Streams returns every recorded stream, in key order.
func (s *Store) Streams() ([]StreamDef, error) {
	var out []StreamDef
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketStreams).ForEach(func(k, v []byte) error {
			var d StreamDef
			if err := json.Unmarshal(v, &d); err != nil {
				return fmt.Errorf("metadata: stream %s is unreadable: %w", k, err)
			}
			out = append(out, d)
			return nil
		})
	})
	return out, err
}
