// Package producers knows which tenant each idempotent producer id
// belongs to. An id is recorded where every broker that may see it will
// find it (metadata.db on a single broker, etcd in a cluster) before it is
// given out, and the registry is loaded at start, so a producer outlives
// a restart. The sequences themselves are the shards' (kept in their
// logs): the registry answers only "is this id known, and whose is it",
// once per publish, so a read lock is all the hot path takes.
//
// Ids are never forgotten: a record is a few dozen bytes, and a producer
// that comes back after a long pause must not be taken for an unknown one
// by the boundary (the shard, which remembers a bounded number, answers
// sequence_expired or unknown_producer itself).
package producers

import (
	"crypto/rand"
	"encoding/binary"
	"sync"

	"github.com/getfelix/felix-go/metadata"
	"github.com/getfelix/felix-go/wire"
)

// Registry is the ids given out and their tenants; safe from any
// goroutine.
type Registry struct {
	mu      sync.RWMutex
	tenants map[uint64]string
}

// Load replaces the registry's content with the store's.
func (r *Registry) Load(defs []metadata.ProducerDef) {
	m := make(map[uint64]string, len(defs))
	for _, d := range defs {
		m[d.ID] = d.Tenant
	}
	r.mu.Lock()
	r.tenants = m
	r.mu.Unlock()
}

// Tenant returns the tenant of producer id, or false when it was never
// given out (as far as this registry knows).
func (r *Registry) Tenant(id uint64) (string, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, ok := r.tenants[id]
	return t, ok
}

// Add records an id given out elsewhere (another cluster member).
func (r *Registry) Add(id uint64, tenant string) {
	r.mu.Lock()
	if r.tenants == nil {
		r.tenants = make(map[uint64]string)
	}
	r.tenants[id] = tenant
	r.mu.Unlock()
}

// Create draws a new random id for tenant, has record store it durably
// (false when the store already holds it: another draw is made), then
// adds it here: an id a client holds is always one a restarted broker
// knows.
func (r *Registry) Create(tenant string, record func(id uint64) (stored bool, err error)) (uint64, error) {
	for range 8 { // 64 random bits: a collision is a curiosity, eight a broken generator
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return 0, wire.NewError(wire.CodeInternal, "producer id: %v", err)
		}
		id := binary.BigEndian.Uint64(b[:])
		if _, taken := r.Tenant(id); taken {
			continue
		}
		stored, err := record(id)
		if err != nil {
			return 0, err
		}
		if stored {
			r.Add(id, tenant)
			return id, nil
		}
	}
	return 0, wire.NewError(wire.CodeInternal, "producer id: eight random ids in a row were taken")
}
