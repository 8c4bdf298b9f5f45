package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getfelix/felix-go/cluster"
)

// fakeAdmin serves canned cluster documents the way a member's admin
// endpoint does, to a bearer token "tok".
type fakeAdmin struct {
	mu       sync.Mutex
	statuses []cluster.Status // successive GET /debug/cluster answers; the last repeats
	trees    cluster.Trees
	drains   []string // the node of each POST /debug/cluster/drain
}

func (f *fakeAdmin) start(t *testing.T) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/cluster", func(w http.ResponseWriter, _ *http.Request) {
		f.mu.Lock()
		st := f.statuses[0]
		if len(f.statuses) > 1 {
			f.statuses = f.statuses[1:]
		}
		f.mu.Unlock()
		json.NewEncoder(w).Encode(st)
	})
	mux.HandleFunc("GET /debug/cluster/actors", func(w http.ResponseWriter, _ *http.Request) {
		json.NewEncoder(w).Encode(f.trees)
	})
	mux.HandleFunc("POST /debug/cluster/drain", func(w http.ResponseWriter, r *http.Request) {
		node := r.URL.Query().Get("node")
		if node == "node-9" {
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(map[string]string{"error": "no member node-9"})
			return
		}
		f.mu.Lock()
		f.drains = append(f.drains, node)
		f.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
		json.NewEncoder(w).Encode(map[string]string{"node_id": node})
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(http.StatusUnauthorized)
			json.NewEncoder(w).Encode(map[string]string{"error": "unauthenticated: no token"})
			return
		}
		// As the real endpoint: a change must say JSON, body or none.
		if r.Method != http.MethodGet && r.Header.Get("Content-Type") != "application/json" {
			w.WriteHeader(http.StatusUnsupportedMediaType)
			json.NewEncoder(w).Encode(map[string]string{"error": r.Method + " " + r.URL.Path + " needs Content-Type: application/json"})
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func twoMembers(node2Shards, node2Durable int) cluster.Status {
	joined := time.Now().Add(-3 * time.Minute)
	return cluster.Status{Cluster: "felix", NodeID: "node-1", Ready: true, Members: []cluster.MemberStatus{
		{NodeID: "node-1", Addr: "127.0.0.1:7001", Admin: "127.0.0.1:7101", JoinedAt: joined, LeaseTTLLeft: 4200 * time.Millisecond,
			ShardsOwned: 12, DurableShardsOwned: 4, ActorMember: true, Zone: "eu-1a", Leads: 3, Replicas: 9},
		{NodeID: "node-2", Addr: "127.0.0.1:7002", Admin: "127.0.0.1:7102", JoinedAt: joined, LeaseTTLLeft: -1,
			ShardsOwned: node2Shards, DurableShardsOwned: node2Durable, Draining: true},
	}}
}

// TestClusterLs: felix cluster ls prints one member a line, and --json the
// status as the member sent it.
func TestClusterLs(t *testing.T) {
	t.Parallel()
	f := &fakeAdmin{statuses: []cluster.Status{twoMembers(3, 1)}}
	admin := f.start(t)

	r := runFelix(t, opts{}, "cluster", "ls", "--admin", admin, "--token", "tok")
	r.wantExit(t, 0)
	out := lines(r.stdout.String())
	if len(out) != 4 || out[0] != "cluster felix as node-1 sees it (ready)" {
		t.Fatalf("cluster ls printed\n%s\nwant a heading, a header and two members", r.stdout)
	}
	for i, want := range []string{
		`^node-1 eu-1a 127\.0\.0\.1:7001 127\.0\.0\.1:7101 - up 12 4 3 9 4\.2s 3m[0-9]s ago yes$`,
		`^node-2 - 127\.0\.0\.1:7002 127\.0\.0\.1:7102 - draining 3 1 0 0 \? 3m[0-9]s ago no$`,
	} {
		if got := strings.Join(strings.Fields(out[2+i]), " "); !regexp.MustCompile(want).MatchString(got) {
			t.Errorf("member line %d is %q, want it to match %s", i, got, want)
		}
	}

	r = runFelix(t, opts{}, "cluster", "ls", "--json", "--admin", admin, "--token", "tok")
	r.wantExit(t, 0)
	var st cluster.Status
	if err := json.Unmarshal(r.stdout.Bytes(), &st); err != nil {
		t.Fatalf("cluster ls --json printed %q: %v", r.stdout, err)
	}
	if len(st.Members) != 2 || st.Members[1].LeaseTTLLeft != -1 || st.Members[0].LeaseTTLLeft != 4200*time.Millisecond ||
		st.Members[0].Zone != "eu-1a" || st.Members[0].Leads != 3 || st.Members[0].Replicas != 9 {
		t.Errorf("cluster ls --json gave %+v, want the two members with their leases", st)
	}

	r = runFelix(t, opts{}, "cluster", "ls", "--admin", admin, "--token", "other")
	r.wantExit(t, 1)
	if !strings.Contains(r.stderr.String(), "refused /debug/cluster: unauthenticated") {
		t.Errorf("cluster ls with a refused token: stderr %q, want the refusal explained", r.stderr)
	}
}

// TestPrintStatus pins the table's layout.
func TestPrintStatus(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	st := cluster.Status{Cluster: "felix", NodeID: "node-2", Members: []cluster.MemberStatus{
		{NodeID: "node-1", Addr: "127.0.0.1:7001", Admin: "127.0.0.1:7101", PeerAddr: "127.0.0.1:41000", JoinedAt: now.Add(-90 * time.Second),
			LeaseTTLLeft: 4960 * time.Millisecond, ShardsOwned: 12, DurableShardsOwned: 4, ActorMember: true, Zone: "rack-1", Replicas: 1},
		{NodeID: "node-2", Addr: "127.0.0.1:7002", LeaseTTLLeft: -1, Zone: "rack-2", Leads: 1, Replicas: 1},
		{NodeID: "node-3", Addr: "127.0.0.1:7003", Admin: "127.0.0.1:7103", JoinedAt: now.Add(-time.Hour), LeaseTTLLeft: -1,
			Down: true, LastSeen: now.Add(-42 * time.Second), Replicas: 1},
	}, Shards: []cluster.ShardStatus{
		{Stream: "default/default/demo", Shard: 0, Kind: "in-memory", Owner: "node-1"},
		{Stream: "default/default/ledger", Shard: 0, Kind: "durable", Home: "node-3"},
		{Stream: "default/default/orders", Shard: 0, Kind: "replicated", Owner: "node-2", Replicas: []string{"node-2", "node-1", "node-3"}},
	}}
	var b bytes.Buffer
	printStatus(&b, st, now)
	printShards(&b, st.Shards)
	want := `cluster felix as node-2 sees it (not ready: it has not joined yet)
NODE    ZONE    ADDR            ADMIN           PEER             STATE                     SHARDS  DURABLE  LEADS  REPLICAS  LEASE LEFT  JOINED      ACTOR MEMBER
node-1  rack-1  127.0.0.1:7001  127.0.0.1:7101  127.0.0.1:41000  up                        12      4        0      1         5s          1m30s ago   yes
node-2  rack-2  127.0.0.1:7002  -               -                up                        0       0        1      1         ?           -           no
node-3  -       127.0.0.1:7003  127.0.0.1:7103  -                DOWN (last seen 42s ago)  0       0        0      1         -           1h0m0s ago  no

STREAM                  SHARD  KIND        OWNER     HOME/REPLICAS
default/default/demo    0      in-memory   node-1    -
default/default/ledger  0      durable     none now  node-3
default/default/orders  0      replicated  node-2    node-2,node-1,node-3
`
	if b.String() != want {
		t.Errorf("printStatus printed\n%s\nwant\n%s", b.String(), want)
	}
}

// TestClusterArgs: mistakes in the command line exit 2 before any request.
func TestClusterArgs(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"cluster"}, "cluster needs ls, drain NODE or certs"},
		{[]string{"cluster", "rm"}, `cluster needs ls, drain NODE, move-replica or certs, got "rm"`},
		{[]string{"cluster", "ls", "--nodes", "a"}, "--dir, --nodes and --etcd-hosts are certs'"},
		{[]string{"cluster", "certs", "--nodes", "a"}, "certs asks no broker"},
		{[]string{"cluster", "ls", "node-1"}, "ls takes no arguments"},
		{[]string{"cluster", "ls", "--wait=false"}, "--wait is drain's"},
		{[]string{"cluster", "drain"}, "drain needs exactly one NODE"},
		{[]string{"cluster", "drain", "a", "b"}, "drain needs exactly one NODE"},
		{[]string{"cluster", "drain", "node-2", "--json"}, "--json is ls's"},
		{[]string{"cluster", "move-replica", "t/ns/s", "0", "a"}, "move-replica needs TENANT/NAMESPACE/STREAM SHARD FROM TO"},
		{[]string{"cluster", "move-replica", "s", "0", "a", "b"}, "move-replica's stream is TENANT/NAMESPACE/STREAM"},
		{[]string{"cluster", "move-replica", "t/ns/s", "x", "a", "b"}, "move-replica's SHARD is a number"},
	} {
		r := runFelix(t, opts{}, append(tt.args, "--admin", "127.0.0.1:1")...)
		r.wantExit(t, 2)
		if !strings.Contains(r.stderr.String(), tt.want) {
			t.Errorf("felix %q: stderr %q, want it to contain %q", tt.args, r.stderr, tt.want)
		}
	}
}

// TestClusterDrain: drain posts, then follows the node's in-memory shards
// down to 0; --wait=false returns at once; --timeout bounds the wait.
func TestClusterDrain(t *testing.T) {
	t.Parallel()
	t.Run("waits", func(t *testing.T) {
		t.Parallel()
		f := &fakeAdmin{statuses: []cluster.Status{twoMembers(5, 2), twoMembers(4, 2), twoMembers(2, 2)}}
		admin := f.start(t)
		r := runFelix(t, opts{}, "cluster", "drain", "node-2", "--admin", admin, "--token", "tok")
		r.wantExit(t, 0)
		if got, want := r.stdout.String(), "node-2 drained: no in-memory shard left; 2 durable shards stay on it\n"; got != want {
			t.Errorf("drain printed %q, want %q", got, want)
		}
		for _, want := range []string{"draining node-2", "node-2: 3 in-memory shards left to move", "node-2: 2 in-memory shards left to move"} {
			if !strings.Contains(r.stderr.String(), want) {
				t.Errorf("drain's progress %q does not say %q", r.stderr, want)
			}
		}
		if !slices.Equal(f.drains, []string{"node-2"}) {
			t.Errorf("the endpoint was asked to drain %q, want node-2 once", f.drains)
		}
	})
	t.Run("no wait", func(t *testing.T) {
		t.Parallel()
		f := &fakeAdmin{statuses: []cluster.Status{twoMembers(5, 2)}}
		admin := f.start(t)
		r := runFelix(t, opts{}, "cluster", "drain", "node-2", "--wait=false", "--admin", admin, "--token", "tok")
		r.wantExit(t, 0)
		if want := "drain of node-2 requested; follow it with felix cluster ls --admin " + admin; !strings.Contains(r.stdout.String(), want) {
			t.Errorf("drain --wait=false printed %q, want %q", r.stdout, want)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		f := &fakeAdmin{statuses: []cluster.Status{twoMembers(5, 2)}}
		admin := f.start(t)
		r := runFelix(t, opts{}, "cluster", "drain", "node-2", "--timeout", "1s", "--admin", admin, "--token", "tok")
		r.wantExit(t, 1)
		if want := "node-2 still has 3 in-memory shards after 1s; the drain goes on"; !strings.Contains(r.stderr.String(), want) {
			t.Errorf("drain past --timeout: stderr %q, want %q", r.stderr, want)
		}
	})
	t.Run("unknown node", func(t *testing.T) {
		t.Parallel()
		f := &fakeAdmin{statuses: []cluster.Status{twoMembers(5, 2)}}
		admin := f.start(t)
		r := runFelix(t, opts{}, "cluster", "drain", "node-9", "--admin", admin, "--token", "tok")
		r.wantExit(t, 1)
		if !strings.Contains(r.stderr.String(), "felix: no member node-9") {
			t.Errorf("drain of an unknown node: stderr %q, want the endpoint's error", r.stderr)
		}
	})
}

// TestTreeCluster: felix tree --cluster prints each member's tree under its
// heading, a member without one says why, --kind filters each.
func TestTreeCluster(t *testing.T) {
	t.Parallel()
	doc := `{"actors":[` +
		`{"path":"felix/lanes","kind":"supervisor","capacity":4096,"policy":"block"},` +
		`{"path":"felix/lanes/lane-0","kind":"lane","parent":"felix/lanes","capacity":64,"policy":"block","labels":{"lane":"0"}}]}`
	f := &fakeAdmin{trees: cluster.Trees{Members: []cluster.MemberTree{
		{NodeID: "node-1", Actors: json.RawMessage(doc)},
		{NodeID: "node-2", Error: "no answer within 2s"},
		{NodeID: "node-3", Error: "down: its member record vanished", Down: true, LastSeen: time.Now().Add(-time.Hour)},
	}}}
	admin := f.start(t)

	r := runFelix(t, opts{}, "tree", "--cluster", "--admin", admin, "--token", "tok")
	r.wantExit(t, 0)
	want := `== node-1 ==
felix/lanes [supervisor] depth 0/4096 block
  lane-0 [lane] depth 0/64 block lane=0

== node-2: no tree: no answer within 2s ==

== node-3: DOWN, last seen 1h0m0s ago ==
`
	if r.stdout.String() != want {
		t.Errorf("tree --cluster printed\n%s\nwant\n%s", r.stdout, want)
	}

	r = runFelix(t, opts{}, "tree", "--cluster", "--kind", "lane", "--admin", admin, "--token", "tok")
	r.wantExit(t, 0)
	if want := "== node-1 ==\nfelix/lanes/lane-0 [lane] depth 0/64 block lane=0\n"; !strings.HasPrefix(r.stdout.String(), want) {
		t.Errorf("tree --cluster --kind lane printed\n%s\nwant it to start\n%s", r.stdout, want)
	}

	r = runFelix(t, opts{}, "tree", "--cluster", "--json", "--kind", "lane", "--admin", admin, "--token", "tok")
	r.wantExit(t, 0)
	var trees cluster.Trees
	if err := json.Unmarshal(r.stdout.Bytes(), &trees); err != nil {
		t.Fatalf("tree --cluster --json printed %q: %v", r.stdout, err)
	}
	if len(trees.Members) != 3 || strings.Contains(string(trees.Members[0].Actors), "supervisor") || trees.Members[1].Error == "" ||
		!trees.Members[2].Down || trees.Members[2].LastSeen.IsZero() {
		t.Errorf("tree --cluster --json --kind lane gave %+v, want node-1's lanes only, node-2's error and node-3 down", trees)
	}
}
