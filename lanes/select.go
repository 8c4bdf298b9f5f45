package lanes

import (
	"fmt"
	"sync/atomic"
)

// Selection is the lane assignment policy (subscriber_lane_shard).
type Selection uint8

const (
	// SelectAuto is the same as SelectSubscriberHash.
	SelectAuto Selection = iota
	// SelectSubscriberHash spreads subscriptions by hash64(subscription id).
	SelectSubscriberHash
	// SelectConnectionHash keeps a connection's subscriptions on one lane.
	SelectConnectionHash
	// SelectRoundRobin assigns lanes in turn at subscribe time, pinned for life.
	SelectRoundRobin
)

// ParseSelection reads a subscriber_lane_shard value.
func ParseSelection(s string) (Selection, error) {
	switch s {
	case "auto", "":
		return SelectAuto, nil
	case "subscriber_id_hash":
		return SelectSubscriberHash, nil
	case "connection_id_hash":
		return SelectConnectionHash, nil
	case "round_robin_pin":
		return SelectRoundRobin, nil
	}
	return SelectAuto, fmt.Errorf("lanes: unknown lane selection %q (want auto, subscriber_id_hash, connection_id_hash or round_robin_pin)", s)
}

// Selector picks a lane for a new subscription.
type Selector struct {
	Lanes     int
	Policy    Selection
	SinglePer bool // subscriber_single_writer_per_conn: overrides Policy
	next      atomic.Uint64
}

// Select returns a lane index in [0, Lanes).
func (s *Selector) Select(subscriptionID, connectionID uint64) int {
	n := uint64(max(1, s.Lanes))
	if s.SinglePer {
		return int(Hash64(connectionID) % n)
	}
	switch s.Policy {
	case SelectConnectionHash:
		return int(Hash64(connectionID) % n)
	case SelectRoundRobin:
		return int((s.next.Add(1) - 1) % n)
	default:
		return int(Hash64(subscriptionID) % n)
	}
}

// Hash64 is the splitmix64 finalizer: a fixed, well-mixed hash of an id, so
// sequential ids do not land on sequential lanes in lockstep.
func Hash64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
