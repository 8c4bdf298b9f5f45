package metadata

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

var (
	bucketKafkaUsers = []byte("kafka_users")
	bucketSecrets    = []byte("secrets")
)

// KafkaUser is a Kafka SCRAM user's credential for one mechanism (RFC
// 5802): the salt, the iteration count and the two keys derived from the
// password, never the password itself. A user may hold one credential
// per mechanism; each carries the user's grants.
type KafkaUser struct {
	Tenant     string    `json:"tenant"`
	User       string    `json:"user"`
	Mechanism  string    `json:"mechanism"`
	Salt       []byte    `json:"salt"`
	Iterations int       `json:"iterations"`
	StoredKey  []byte    `json:"stored_key"`
	ServerKey  []byte    `json:"server_key"`
	Grants     []string  `json:"grants"`
	CreatedAt  time.Time `json:"created_at"`
}

// Tenant, user and mechanism names have no '/' (wire.ValidateName; the
// mechanisms are SCRAM-SHA-*), so the key splits back unambiguously.
func kafkaUserKey(tenant, user, mechanism string) []byte {
	return []byte(tenant + "/" + user + "/" + mechanism)
}

// PutKafkaUser records u's credential for its mechanism, replacing one
// the user had for it.
func (s *Store) PutKafkaUser(u KafkaUser) error {
	v, err := json.Marshal(u)
	if err != nil {
		return fmt.Errorf("metadata: encode kafka user %s/%s: %w", u.Tenant, u.User, err)
	}
	k := kafkaUserKey(u.Tenant, u.User, u.Mechanism)
	if err := s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketKafkaUsers).Put(k, v) }); err != nil {
		return fmt.Errorf("metadata: put kafka user %s: %w", k, err)
	}
	return nil
}

// KafkaUser returns user's credential for mechanism; false when it has
// none.
func (s *Store) KafkaUser(tenant, user, mechanism string) (KafkaUser, bool, error) {
	var u KafkaUser
	var found bool
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketKafkaUsers).Get(kafkaUserKey(tenant, user, mechanism))
		if v == nil {
			return nil
		}
		found = true
		return json.Unmarshal(v, &u)
	})
	if err != nil {
		return KafkaUser{}, false, fmt.Errorf("metadata: kafka user %s/%s: %w", tenant, user, err)
	}
	return u, found, nil
}

// KafkaUsers returns every credential of tenant's users (of every tenant
// when it is ""), in tenant, user and mechanism order.
func (s *Store) KafkaUsers(tenant string) ([]KafkaUser, error) {
	var out []KafkaUser
	prefix := ""
	if tenant != "" {
		prefix = tenant + "/"
	}
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketKafkaUsers).Cursor()
		for k, v := c.Seek([]byte(prefix)); k != nil && strings.HasPrefix(string(k), prefix); k, v = c.Next() {
			var u KafkaUser
			if err := json.Unmarshal(v, &u); err != nil {
				return fmt.Errorf("metadata: kafka user %s is unreadable: %w", k, err)
			}
			out = append(out, u)
		}
		return nil
	})
	return out, err
}

// DeleteKafkaUser forgets every credential of user; false when it had
// none.
func (s *Store) DeleteKafkaUser(tenant, user string) (bool, error) {
	prefix := []byte(tenant + "/" + user + "/")
	deleted := false
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketKafkaUsers)
		var keys [][]byte
		c := b.Cursor()
		for k, _ := c.Seek(prefix); k != nil && strings.HasPrefix(string(k), string(prefix)); k, _ = c.Next() {
			keys = append(keys, append([]byte(nil), k...))
		}
		for _, k := range keys {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		deleted = len(keys) > 0
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("metadata: delete kafka user %s/%s: %w", tenant, user, err)
	}
	return deleted, nil
}

// secretLen is the size of a secret Secret makes: 256 bits.
const secretLen = 32

// Secret returns the store's secret called name, making a random one the
// first time it is asked for: a key that must stay the same across the
// broker's restarts and never leaves it.
func (s *Store) Secret(name string) ([]byte, error) {
	var out []byte
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSecrets)
		if v := b.Get([]byte(name)); v != nil {
			if len(v) != secretLen {
				return fmt.Errorf("secret %q is %d bytes, want %d", name, len(v), secretLen)
			}
			out = append([]byte(nil), v...)
			return nil
		}
		out = make([]byte, secretLen)
		if _, err := rand.Read(out); err != nil {
			return err
		}
		return b.Put([]byte(name), out)
	})
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	return out, nil
}
