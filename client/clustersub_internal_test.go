package client

import (
	"context"
	"testing"
)

// TestClusterSubscriptionResumesALostMember: a subscription that ended
// with ErrClosed because its member's client was marked closed (a lost
// connection does so before the connection's context ends) is subscribed
// again; CI saw Next return ErrClosed from that window.
func TestClusterSubscriptionResumesALostMember(t *testing.T) {
	member := &Client{}
	member.lost.Store(true)
	member.closed.Store(true)
	cs := &ClusterSubscription{cc: &ClusterClient{}}
	if !cs.resumable(context.Background(), &Subscription{c: member}, ErrClosed) {
		t.Fatal("a subscription whose member client was lost is not resumed")
	}
	cs.cc.mu.closed = true
	if cs.resumable(context.Background(), &Subscription{c: member}, ErrClosed) {
		t.Fatal("a closed ClusterClient's subscription is resumed")
	}
}
