// Package metadata owns a single broker's metadata store: explicit stream
// definitions, idempotent producer ids and Kafka SCRAM users, each with
// its tenant. It is an
// embedded bbolt file in the data directory, written in one transaction per
// change and fsync'd by bbolt before Put returns; its file lock keeps a
// second broker (or felix log repair) off the directory. Consumer group
// state is not here: it is records of each durable stream's state stream.
// A cluster member keeps definitions and producer ids in etcd instead and
// ignores the ones it finds here (with a warning).
package metadata

import (
	"encoding/binary"
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

var (
	bucketStreams   = []byte("streams")
	bucketProducers = []byte("producers")
)

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
	LogAppendTime  bool          `json:"log_append_time,omitempty"`
	Compression    string        `json:"compression,omitempty"`
	CreatedAt      time.Time     `json:"created_at"`
	// Cache, when set, makes the stream a cache.
	Cache *CacheDef `json:"cache,omitempty"`
}

// CacheDef is a cache's settings in its stream definition.
type CacheDef struct {
	TTL time.Duration `json:"ttl,omitempty"`
	// History: absent in a definition written before it, which opens as
	// one change per key.
	History int `json:"history,omitempty"`
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
	if err := createIfMissing(path); err != nil {
		return nil, err
	}
	// bbolt takes an exclusive flock; a short timeout turns "another broker
	// has it" into an error instead of a hang.
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("%w: %s", ErrLocked, path)
	}
	if err != nil {
		return nil, fmt.Errorf("metadata: open %s: %w", path, err)
	}
	// A store made before createIfMissing existed may lack a bucket.
	if err := db.Update(createBuckets); err != nil {
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

// ProducerDef is an idempotent producer id the broker gave out, and the
// tenant it belongs to. The sequences are the shards' (kept in their logs);
// the store only says whose the id is.
type ProducerDef struct {
	ID        uint64    `json:"-"`
	Tenant    string    `json:"tenant"`
	CreatedAt time.Time `json:"created_at"`
}

// ErrProducerExists is returned by PutProducer for an id already recorded.
var ErrProducerExists = errors.New("metadata: producer id already recorded")

// PutProducer records a new producer id; an id already recorded is
// ErrProducerExists (ids are random: the caller draws another).
func (s *Store) PutProducer(p ProducerDef) error {
	v, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("metadata: encode producer %d: %w", p.ID, err)
	}
	k := binary.BigEndian.AppendUint64(nil, p.ID)
	err = s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketProducers)
		if b.Get(k) != nil {
			return ErrProducerExists
		}
		return b.Put(k, v)
	})
	if errors.Is(err, ErrProducerExists) {
		return err
	}
	if err != nil {
		return fmt.Errorf("metadata: put producer %d: %w", p.ID, err)
	}
	return nil
}

// Producers returns every recorded producer id, in id order.
func (s *Store) Producers() ([]ProducerDef, error) {
	var out []ProducerDef
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketProducers).ForEach(func(k, v []byte) error {
			if len(k) != 8 {
				return fmt.Errorf("metadata: producer key %x is not 8 bytes", k)
			}
			p := ProducerDef{ID: binary.BigEndian.Uint64(k)}
			if err := json.Unmarshal(v, &p); err != nil {
				return fmt.Errorf("metadata: producer %d is unreadable: %w", p.ID, err)
			}
			out = append(out, p)
			return nil
		})
	})
	return out, err
}
