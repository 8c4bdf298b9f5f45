package clustertest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/cluster"
)

func TestMain(m *testing.M) { Main(m) }

// TestStartServes: every member serves felix/1 and its admin endpoint on
// 127.0.0.1, trusting the shared token and serving the shared certificate.
func TestStartServes(t *testing.T) {
	c := Start(t, Options{Nodes: 2, LeaseTTL: 2 * time.Second})
	if got := len(c.Members()); got != 2 {
		t.Fatalf("Start with Nodes 2 made %d members", got)
	}
	for i, m := range c.Members() {
		if want := []string{"node-1", "node-2"}[i]; m.NodeID != want {
			t.Errorf("member %d is %q, want %q", i, m.NodeID, want)
		}
		if !strings.HasPrefix(m.Addr, "127.0.0.1:") || !strings.HasPrefix(m.Admin, "127.0.0.1:") {
			t.Errorf("%s: Addr %q, Admin %q, want both on 127.0.0.1", m.NodeID, m.Addr, m.Admin)
		}
		if c.Member(m.NodeID) != m {
			t.Errorf("Member(%q) is not the member of that id", m.NodeID)
		}
		dialClose(t, c, m)
		wantAdminAnswers(t, c, m)
	}
	if got := strings.Join(c.Addrs(), ","); got != c.Members()[0].Addr+","+c.Members()[1].Addr {
		t.Errorf("Addrs() = %s, want the members' addresses in order", got)
	}
	logged, err := os.ReadFile(c.Members()[0].LogFile)
	if err != nil || !strings.Contains(string(logged), "--cluster-node-id node-1") {
		t.Errorf("node-1's log (%v) does not start with its command line:\n%s", err, logged)
	}
}

// TestMemberLifecycle: Freeze, Thaw, Kill, Restart on the same addresses,
// and a clean Stop.
func TestMemberLifecycle(t *testing.T) {
	c := Start(t, Options{Nodes: 1})
	m := c.Members()[0]
	addr, admin := m.Addr, m.Admin

	m.Freeze(t)
	if !m.Frozen() || !m.Running() {
		t.Fatalf("after Freeze: Frozen %t, Running %t, want both", m.Frozen(), m.Running())
	}
	if waiting := c.notReady(1); len(waiting) != 1 || !strings.Contains(waiting[0], "no member is running and unfrozen") {
		t.Errorf("notReady with the only member frozen = %q, want it to say none is live", waiting)
	}
	m.Thaw(t)
	if m.Frozen() {
		t.Fatal("Frozen after Thaw")
	}
	wantAdminAnswers(t, c, m)

	m.Kill()
	if m.Running() {
		t.Fatal("Running after Kill")
	}
	m.Kill() // a dead member stays dead, without complaint
	m.Restart(t)
	if m.Addr != addr || m.Admin != admin {
		t.Errorf("after Restart: Addr %s, Admin %s, want the same as before: %s, %s", m.Addr, m.Admin, addr, admin)
	}
	dialClose(t, c, m)

	m.Freeze(t) // Stop thaws a frozen member so it can act on SIGTERM
	m.Stop(t)
	if m.Running() {
		t.Fatal("Running after Stop")
	}
}

// TestStatusDecodes: Status sends the token and decodes the document; an
// error answer fails naming the member and the answer.
func TestStatusDecodes(t *testing.T) {
	want := cluster.Status{Cluster: "felix", NodeID: "node-1", Ready: true,
		Members: []cluster.MemberStatus{{NodeID: "node-1", Addr: "127.0.0.1:7001", LeaseTTLLeft: 4 * time.Second, ShardsOwned: 3}}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if r.URL.Path != "/debug/cluster" {
			http.Error(w, `{"error":"not a cluster member"}`, http.StatusNotFound)
			return
		}
		json.NewEncoder(w).Encode(want)
	}))
	defer srv.Close()
	c := &Cluster{token: "tok", http: srv.Client()}
	m := &Member{NodeID: "node-1", Admin: strings.TrimPrefix(srv.URL, "http://")}

	got := c.Status(t, m)
	if got.NodeID != want.NodeID || !got.Ready || len(got.Members) != 1 || got.Members[0] != want.Members[0] {
		t.Errorf("Status = %+v, want %+v", got, want)
	}
	err := c.admin(m, http.MethodGet, "/debug/cluster/actors", &cluster.Trees{})
	if err == nil || !strings.Contains(err.Error(), "node-1: GET /debug/cluster/actors answered 404 Not Found") ||
		!strings.Contains(err.Error(), "not a cluster member") {
		t.Errorf("a 404 answer gave %v, want an error naming the member, the request, the status and the body", err)
	}
}

func dialClose(t *testing.T, c *Cluster, m *Member) {
	t.Helper()
	cl, err := client.Dial(t.Context(), m.Addr, c.ClientOptions())
	if err != nil {
		t.Fatalf("dial %s at %s with the cluster's CA and token: %v", m.NodeID, m.Addr, err)
	}
	if err := cl.Close(t.Context()); err != nil {
		t.Errorf("close the client of %s: %v", m.NodeID, err)
	}
}

// wantAdminAnswers: the shared token is accepted on m's /debug.
func wantAdminAnswers(t *testing.T, c *Cluster, m *Member) {
	t.Helper()
	var actors struct {
		Actors []json.RawMessage `json:"actors"`
	}
	if err := c.admin(m, http.MethodGet, "/debug/actors", &actors); err != nil {
		t.Fatalf("the shared token on %s's admin endpoint: %v", m.NodeID, err)
	}
	if len(actors.Actors) == 0 {
		t.Errorf("%s's /debug/actors lists no actor", m.NodeID)
	}
}

// TestClusterForms: the members join one cluster, each answering Status
// with every member at the addresses the harness knows; a killed member
// leaves it when its lease runs out and joins again on Restart; a frozen
// one leaves and comes back on Thaw.
func TestClusterForms(t *testing.T) {
	c := Start(t, Options{Nodes: 3, LeaseTTL: 2 * time.Second})
	c.WaitReady(t, 3)
	st := c.Status(t, c.Members()[0])
	if st.NodeID != "node-1" || len(st.Members) != 3 {
		t.Fatalf("node-1's status: %+v, want node-1 answering with 3 members", st)
	}
	peers := map[string]string{}
	for _, ms := range st.Members {
		m := c.Member(ms.NodeID)
		if m == nil || ms.Addr != m.Addr || ms.Admin != m.Admin {
			t.Errorf("status lists %s at %s, admin %s; the harness has %+v", ms.NodeID, ms.Addr, ms.Admin, m)
		}
		// The harness gives every member peer certificates: each runs a
		// peer link and its member record says where.
		if !strings.HasPrefix(ms.PeerAddr, "127.0.0.1:") || peers[ms.PeerAddr] != "" {
			t.Errorf("status lists %s's peer link at %q (others: %v), want its own on 127.0.0.1", ms.NodeID, ms.PeerAddr, peers)
		}
		peers[ms.PeerAddr] = ms.NodeID
	}
	if trees := c.Trees(t, c.Members()[1]); len(trees.Members) != 3 {
		t.Errorf("node-2 gathered %d trees, want 3: %+v", len(trees.Members), trees)
	}

	node3 := c.Members()[2]
	node3.Kill()
	c.WaitReady(t, 2)
	node3.Restart(t)
	c.WaitReady(t, 3)
	for _, ms := range c.Status(t, c.Members()[0]).Members {
		if ms.NodeID == "node-3" && !strings.HasPrefix(ms.PeerAddr, "127.0.0.1:") {
			t.Errorf("after its restart node-3's peer link is at %q", ms.PeerAddr)
		}
	}

	node2 := c.Members()[1]
	node2.Freeze(t)
	c.WaitReady(t, 2)
	node2.Thaw(t)
	c.WaitReady(t, 3)

	c.Drain(t, c.Members()[0], "node-1")
}

// TestEtcdFreezeThaw: etcd runs in a process of its own; frozen, it
// answers nothing; thawed, it answers again with its keys.
func TestEtcdFreezeThaw(t *testing.T) {
	c := Start(t, Options{Nodes: 1})
	// etcd serves mutual TLS: the client presents node-1's certificate,
	// as the members do.
	f := c.PeerCerts("node-1")
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(f.CA)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.Etcd().Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	get := func(timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		_, err := cli.Get(ctx, "/felix/name")
		return err
	}
	if err := get(5 * time.Second); err != nil {
		t.Fatalf("get before the freeze: %v", err)
	}
	c.Etcd().Freeze(t)
	if err := get(500 * time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("get from a frozen etcd = %v, want it unanswered (deadline exceeded)", err)
	}
	c.Etcd().Thaw(t)
	if err := get(10 * time.Second); err != nil {
		t.Fatalf("get after the thaw: %v", err)
	}
	c.Etcd().Close()
	c.Etcd().Close() // a second Close does nothing
}
