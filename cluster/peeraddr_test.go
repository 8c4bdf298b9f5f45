package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestPeerAddrFromMemberRecords: a member's peer address travels in its
// member record; PeerAddr answers it for live members, false for a member
// without a peer link and for one that left.
func TestPeerAddrFromMemberRecords(t *testing.T) {
	ep := startEtcd(t)
	a := startNode(t, ep, "a", "felix", &recorder{})
	b, err := New(Config{
		Name: "felix", Prefix: "/felix", Endpoints: []string{ep}, NodeID: "b", Addr: "127.0.0.1:b",
		PeerAddr: "127.0.0.1:7201", LeaseTTL: 2 * time.Second, Log: zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	b.Start()
	eventually(t, "a sees b", func() bool { _, ok := a.PeerAddr("b"); return ok })
	if addr, _ := a.PeerAddr("b"); addr != "127.0.0.1:7201" {
		t.Fatalf("a.PeerAddr(b) = %q, want b's", addr)
	}
	if addr, ok := b.PeerAddr("a"); ok || addr != "" {
		t.Fatalf("b.PeerAddr(a) = %q, %t for a member without a peer link", addr, ok)
	}
	st := a.Status(context.Background())
	for _, m := range st.Members {
		if want := map[string]string{"a": "", "b": "127.0.0.1:7201"}[m.NodeID]; m.PeerAddr != want {
			t.Errorf("status of %s: peer_addr %q, want %q", m.NodeID, m.PeerAddr, want)
		}
	}
	if err := b.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a forgets b", func() bool { _, ok := a.PeerAddr("b"); return !ok })
}
