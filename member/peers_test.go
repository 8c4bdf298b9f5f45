package member_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/cluster"
	"github.com/getfelix/felix-go/config"
	"github.com/getfelix/felix-go/internal/clustercerts"
	"github.com/getfelix/felix-go/member"
)

// peerMsg is what a test handler got.
type peerMsg struct{ from, data string }

// inbox is a handler that posts to a buffered channel without blocking,
// as a shard's would post to its mailbox.
func inbox() (chan peerMsg, func(string, []byte)) {
	ch := make(chan peerMsg, 16)
	return ch, func(from string, data []byte) {
		select {
		case ch <- peerMsg{from, string(data)}:
		default:
		}
	}
}

func peerMember(t *testing.T, etcd, id string, files *clustercerts.Files) config.Config {
	cfg := brokertest.Config(t)
	cfg.Auth = "none"
	cfg.ClusterEtcd = etcd
	cfg.ClusterNodeID = id
	cfg.ClusterLeaseTTL = 2 * time.Second
	if files != nil {
		cfg.ClusterTLSCA, cfg.ClusterTLSCert, cfg.ClusterTLSKey = files.CA, files.Cert, files.Key
	}
	return cfg
}

// peerCluster starts an etcd for the test's members and mints the peer
// certificates of nodes with one CA.
func peerCluster(t *testing.T, nodes ...string) (etcd string, certs map[string]clustercerts.Files) {
	t.Helper()
	e, err := cluster.StartEtcd(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	if certs, err = clustercerts.Ensure(t.TempDir(), nodes); err != nil {
		t.Fatal(err)
	}
	return e.Endpoint(), certs
}

// sendUntilQueued sends until the sender knows the receiver's peer
// address (its member record arrives through etcd's watch, which has no
// hook to wait on) and the message is queued.
func sendUntilQueued(t *testing.T, p *member.Peers, to, group, data string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !p.Send(to, group, []byte(data)) {
		if time.Now().After(deadline) {
			t.Fatalf("no peer address for %s after 20 s", to)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func receive(t *testing.T, ch chan peerMsg, want peerMsg) {
	t.Helper()
	select {
	case got := <-ch:
		if got != want {
			t.Fatalf("received %+v, want %+v", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%+v never arrived", want)
	}
}

// TestPeersCarryGroupsBothWays: two members with certificates of one CA
// reach each other by node id and group; a message for a group nobody here
// handles is counted and dropped; a member without certificates has no
// peer link, says so in its member record, and is not reachable.
func TestPeersCarryGroupsBothWays(t *testing.T) {
	etcd, files := peerCluster(t, "a", "b")
	fa, fb := files["a"], files["b"]
	cfgA := peerMember(t, etcd, "a", &fa)
	cfgA.Admin = "127.0.0.1:0"
	a := brokertest.Start(t, cfgA, broker.WithoutActorCluster())
	b := brokertest.Start(t, peerMember(t, etcd, "b", &fb), broker.WithoutActorCluster())
	c := brokertest.Start(t, peerMember(t, etcd, "c", nil), broker.WithoutActorCluster())
	if a.Peers() == nil || b.Peers() == nil {
		t.Fatal("a member with cluster_tls_* set has no peer link")
	}
	if c.Peers() != nil {
		t.Fatal("a member without cluster_tls_* has a peer link")
	}
	const group = "t/ns/s/0"
	inA, hA := inbox()
	inB, hB := inbox()
	if _, err := a.Peers().Register(group, hA); err != nil {
		t.Fatal(err)
	}
	unregB, err := b.Peers().Register(group, hB)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Peers().Register(group, hB); !errors.Is(err, member.ErrGroupRegistered) {
		t.Fatalf("second Register of a live group = %v, want ErrGroupRegistered", err)
	}

	sendUntilQueued(t, a.Peers(), "b", group, "hello")
	receive(t, inB, peerMsg{"a", "hello"})
	sendUntilQueued(t, b.Peers(), "a", group, "world")
	receive(t, inA, peerMsg{"b", "world"})

	// One connection carries both, in order: once "after" is in, "nope"
	// was read and dropped.
	a.Peers().Send("b", "t/ns/s/9", []byte("nope"))
	a.Peers().Send("b", group, []byte("after"))
	receive(t, inB, peerMsg{"a", "after"})
	wantMetric(t, b, "felix_peer_unknown_group_total", "", 1)
	wantMetric(t, b, "felix_peer_messages_received_total", "", 3)
	wantMetric(t, a, "felix_peer_connected", "b", 1)

	// c is a member without a peer address: nothing is sent, and it counts.
	if a.Peers().Send("c", group, []byte("x")) || a.Peers().Send("ghost", group, []byte("x")) {
		t.Fatal("Send to a member without a peer address reported queued")
	}
	wantMetric(t, a, "felix_peer_messages_dropped_total", "ghost", 1)
	st := membersStatus(t, a, 3)
	for _, m := range st.Members {
		want := map[string]string{"a": a.Peers().Addr(), "b": b.Peers().Addr(), "c": ""}[m.NodeID]
		if m.PeerAddr != want || (want != "" && !strings.HasPrefix(want, "127.0.0.1:")) {
			t.Errorf("status of %s: peer_addr %q, want %q on 127.0.0.1", m.NodeID, m.PeerAddr, want)
		}
	}

	unregB()
	unregB() // a second call does nothing
	if _, err := b.Peers().Register(group, hB); err != nil {
		t.Fatalf("Register after unregister: %v", err)
	}
	if _, err := b.Peers().Register("", hB); err == nil {
		t.Fatal("Register of an empty group accepted")
	}
}

// TestPeerCertificateOfAnotherCARefusedAtStart: a member whose certificate
// does not chain to cluster_tls_ca does not start, and says which knob.
func TestPeerCertificateOfAnotherCARefusedAtStart(t *testing.T) {
	etcd, one := peerCluster(t, "a")
	other, err := clustercerts.Ensure(filepath.Join(t.TempDir(), "other"), []string{"a"})
	if err != nil {
		t.Fatal(err)
	}
	f := one["a"]
	f.CA = other["a"].CA
	b, err := broker.New(peerMember(t, etcd, "a", &f), broker.WithoutActorCluster())
	if err != nil {
		t.Fatal(err)
	}
	err = b.Start()
	if err == nil {
		_ = b.Stop(context.Background())
		t.Fatal("a member whose peer certificate another CA signed started")
	}
	if !errors.Is(err, config.ErrPeerTLS) || !strings.Contains(err.Error(), "does not chain to cluster_tls_ca") {
		t.Fatalf("Start = %v, want ErrPeerTLS naming cluster_tls_ca", err)
	}
}

// membersStatus polls b's /debug/cluster until it lists n members: the
// others' records reach it through etcd's watch, which has no hook.
func membersStatus(t *testing.T, b *broker.Broker, n int) cluster.Status {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	deadline := time.Now().Add(20 * time.Second)
	for {
		var st cluster.Status
		res, err := hc.Get("http://" + b.AdminAddr().String() + "/debug/cluster")
		if err == nil {
			err = json.NewDecoder(res.Body).Decode(&st)
			res.Body.Close()
		}
		if err == nil && len(st.Live()) == n {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("/debug/cluster: %v, %d members up; want %d", err, len(st.Live()), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// wantMetric checks one sample of b's registry; peer "" is an unlabelled
// metric.
func wantMetric(t *testing.T, b *broker.Broker, name, peer string, want float64) {
	t.Helper()
	got, ok := sample(b.Metrics().Registry, name, peer)
	if !ok || got != want {
		t.Errorf("%s{peer=%q} = %v (found %t), want %v", name, peer, got, ok, want)
	}
}

func sample(r *prometheus.Registry, name, peer string) (float64, bool) {
	fams, err := r.Gather()
	if err != nil {
		return 0, false
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			label := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "peer" {
					label = l.GetValue()
				}
			}
			if label != peer {
				continue
			}
			if m.Counter != nil {
				return m.GetCounter().GetValue(), true
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// TestPeersBeatToEachOther: two members with no replicated shard hear
// from each other again and again over the peer link, by the beats alone:
// what tells a quiet raft group that a member is still there.
func TestPeersBeatToEachOther(t *testing.T) {
	etcd, files := peerCluster(t, "a", "b")
	fa, fb := files["a"], files["b"]
	a := brokertest.Start(t, peerMember(t, etcd, "a", &fa), broker.WithoutActorCluster())
	b := brokertest.Start(t, peerMember(t, etcd, "b", &fb), broker.WithoutActorCluster())
	heardAdvances := func(p *member.Peers, from string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		var first time.Time
		for {
			at := p.HeardAt(from)
			switch {
			case first.IsZero():
				first = at
			case at.After(first):
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("heard from %s last at %v, first at %v: no beats for 20 s", from, at, first)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	heardAdvances(a.Peers(), "b")
	heardAdvances(b.Peers(), "a")
	if got := a.Peers().HeardAt("ghost"); !got.IsZero() {
		t.Errorf("heard from a member that does not exist at %v", got)
	}
}
