package routing

import (
	"fmt"
	"testing"
)

// The mapping is a wire contract: a client that routes by itself must agree
// with the broker forever. These vectors pin it; if one changes, every
// existing multi-shard stream would reorder its keys.
func TestKeyHashVectors(t *testing.T) {
	tests := []struct {
		give           string
		want           uint64
		modulo8, jump8 uint32
	}{
		{give: "", want: 0xf52a15e9a9b5e89b, modulo8: 3, jump8: 5},
		{give: "a", want: 0x2c0bdbf481420f8, modulo8: 0, jump8: 1},
		{give: "order-17", want: 0xa2b13ff1a62e905e, modulo8: 6, jump8: 5},
		{give: "user:42", want: 0xd68cb863fc5e0c34, modulo8: 4, jump8: 6},
	}
	for _, tt := range tests {
		if got := KeyHash([]byte(tt.give)); got != tt.want {
			t.Errorf("KeyHash(%q) = %#x, want %#x", tt.give, got, tt.want)
		}
		if got := RouteModulo.ShardFor([]byte(tt.give), 8); got != tt.modulo8 {
			t.Errorf("modulo shard of %q among 8 = %d, want %d", tt.give, got, tt.modulo8)
		}
		if got := RouteJump.ShardFor([]byte(tt.give), 8); got != tt.jump8 {
			t.Errorf("jump shard of %q among 8 = %d, want %d", tt.give, got, tt.jump8)
		}
	}
	// FNV-1a of "a" is 0xaf63dc4c8601ec8c before the finalizer (a published
	// test vector): checks the first half independently of our own output.
	h := uint64(14695981039346656037)
	h ^= 'a'
	h *= 1099511628211
	if h != 0xaf63dc4c8601ec8c {
		t.Fatalf("FNV-1a(\"a\") = %#x, want the published 0xaf63dc4c8601ec8c", h)
	}
}

func TestShardForProperties(t *testing.T) {
	for _, r := range []Routing{RouteModulo, RouteJump} {
		t.Run(r.String(), func(t *testing.T) {
			if got := r.ShardFor(nil, 8); got != 0 {
				t.Fatalf("no key went to shard %d, want 0", got)
			}
			counts := make([]int, 8)
			for i := range 8000 {
				k := []byte(fmt.Sprintf("key-%d", i))
				s := r.ShardFor(k, 8)
				if s >= 8 {
					t.Fatalf("key %q went to shard %d of 8", k, s)
				}
				if again := r.ShardFor(k, 8); again != s {
					t.Fatalf("key %q went to %d then %d", k, s, again)
				}
				counts[s]++
			}
			for s, n := range counts {
				if n < 700 || n > 1300 {
					t.Fatalf("shard %d got %d of 8000 keys; the hash is badly spread: %v", s, n, counts)
				}
			}
		})
	}
}

// Jump hash moves only the keys that must move when a shard is added.
func TestJumpMovesFewKeys(t *testing.T) {
	moved := 0
	for i := range 10000 {
		k := []byte(fmt.Sprintf("key-%d", i))
		a, b := RouteJump.ShardFor(k, 10), RouteJump.ShardFor(k, 11)
		if a != b {
			if b != 10 {
				t.Fatalf("key %q moved from %d to %d, not to the new shard", k, a, b)
			}
			moved++
		}
	}
	if moved < 500 || moved > 1400 {
		t.Fatalf("%d of 10000 keys moved from 10 to 11 shards, want about 1/11", moved)
	}
}
