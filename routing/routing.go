// Package routing maps a record's key to a shard of its stream: the one
// function the broker and a client that routes by itself must agree on
// (its vectors are pinned in the tests). It imports nothing of Felix.
package routing

import "fmt"

// Routing maps a key to a shard of a stream. It is chosen when the stream is
// created and never changes: changing it would move keys between shards and
// break per-key order.
type Routing uint8

const (
	// RouteModulo is finalize(fnv1a64(key)) % shards, the default.
	RouteModulo Routing = iota
	// RouteJump is Lamping and Veach's jump consistent hash of the same key
	// hash: adding shards moves only 1/n of the keys.
	RouteJump
)

// String returns the routing's configuration name.
func (r Routing) String() string {
	if r == RouteJump {
		return "jump"
	}
	return "modulo"
}

// Parse reads a routing name: modulo or jump.
func Parse(s string) (Routing, error) {
	switch s {
	case "modulo", "":
		return RouteModulo, nil
	case "jump", "jump-hash", "jump_hash":
		return RouteJump, nil
	}
	return RouteModulo, fmt.Errorf("routing: unknown routing %q (want modulo or jump)", s)
}

// ShardFor returns the shard of key among shards. No key goes to shard 0,
// so an unkeyed stream is totally ordered on one shard.
func (r Routing) ShardFor(key []byte, shards uint32) uint32 {
	if key == nil || shards <= 1 {
		return 0
	}
	h := KeyHash(key)
	if r == RouteJump {
		return uint32(jumpHash(h, int32(shards)))
	}
	return uint32(h % uint64(shards))
}

// KeyHash is FNV-1a 64 followed by the splitmix64 finalizer, written out by
// hand so the key-to-shard mapping cannot shift with a library or toolchain
// change (hash/fnv would do the first half; the finalizer mixes the low bits
// that % shards reads).
func KeyHash(key []byte) uint64 {
	const (
		offset64 = 14695981039346656037
		prime64  = 1099511628211
	)
	h := uint64(offset64)
	for _, c := range key {
		h ^= uint64(c)
		h *= prime64
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// jumpHash is Lamping and Veach, "A Fast, Minimal Memory, Consistent Hash
// Algorithm" (2014), verbatim.
func jumpHash(key uint64, buckets int32) int32 {
	var b, j int64 = -1, 0
	for j < int64(buckets) {
		b = j
		key = key*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((key>>33)+1)))
	}
	return int32(b)
}
