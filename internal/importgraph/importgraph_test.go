package importgraph

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/getfelix/felix-go"

// layers is the layering of this module: for each package (relative to the
// module path), the packages of this module it may import, and why. Every
// package of the module must have a row, so a new package fails until
// someone decides where it sits; an import missing from a row fails naming
// the importer, the import and the reason. Only non-test imports count:
// tests may reach for anything (client's tests start a broker).
//
// Rows list what a package may use, not only what it uses today
// (actors may use wire). Rows run from the bottom layer up, and a row may
// name only packages of rows above it, so no package imports one above
// its own layer and the graph has no cycle.
var layers = []struct {
	pkg string
	may []string
	why string
}{
	// Leaves: the protocol, knobs and stores that know no other package.
	{"wire", nil,
		"the protocol is the leaf every side shares, so it depends on none of them"},
	{"config", []string{"wire"},
		"knobs and defaults: read by the broker and the CLI; it checks names (kafka_default_namespace) by the wire's rules and reads nothing else"},
	{"metadata", nil,
		"the bbolt store of stream definitions: the broker adapts it for the registry"},
	{"routing", nil,
		"key to shard: the one function the broker and a client routing by itself share; it depends on nothing"},
	{"cache", nil,
		"a cache's state machine: the key index over a shard's records and their encoding, no I/O; the shard owns an index and feeds it what commits"},
	{"peerlink", nil,
		"the link between members carries opaque messages per group over QUIC with mutual TLS; it knows no raft, shard or wire"},
	{"internal/probe", nil,
		"the data path's latency probes: a leaf every hop may mark, empty unless built with -tags felixprobe"},
	{"internal/clustercerts", nil,
		"mints the cluster CA and member certificates of the peer link, for operators (felix cluster certs), felix dev cluster and tests; standard library only"},
	{"persistence", nil,
		"the log knows no actors and no wire: a shard reaches it through streams.Log, which the broker adapts"},
	{"persistence/errorfs", []string{"persistence"},
		"a failing disk over persistence's FS for chaos and tests: it knows the file system interface and nothing above it"},
	{"replication", []string{"persistence"},
		"raft over a shard's log, which is raft's log: it uses persistence's types and reaches the log through its own EntryLog; it knows no actor, stream or wire"},

	// The actor kit and the core's actors.
	{"actors", []string{"wire"},
		"the actor kit is generic: no stream, subscriber, lane or storage notion"},
	{"metrics", []string{"actors"},
		"the collector reads live mailbox depths from actors.Directory"},
	{"lanes", []string{"actors", "internal/probe", "wire"},
		"lanes and connection writers sit below the shard and the feeders"},
	{"streams", []string{"actors", "cache", "internal/probe", "routing", "wire"},
		"the shard reaches storage through its own streams.Log, never persistence, and sends to feeders by mailbox"},
	{"subscribers", []string{"actors", "internal/probe", "lanes", "streams", "wire"},
		"a feeder takes envelopes from a shard and hands them to a lane"},

	// The service boundary and what sits at it.
	{"internal/quicconf", []string{"wire"},
		"shared QUIC and TLS settings: broker and client both use them, so they use neither"},
	{"quota", []string{"wire"},
		"admission limits (connections, tenant rates and counts): the broker calls them at its service boundary; refusals are wire errors, counted by the broker through a hook"},
	{"auth", []string{"wire"},
		"tokens, keys and grants: the broker calls it at the service boundary; it knows no broker, transport, stream or actor"},
	{"service", []string{"wire"},
		"the protocol-neutral broker API: domain types and the interfaces front ends call; it knows no actor, stream or storage"},
	{"authgate", []string{"auth", "quota", "service", "wire"},
		"the service boundary's authentication and principal checks: it verifies with auth, limits failed attempts with quota and counts refusals through the broker's hooks; it knows no actor, stream or front end"},
	{"producers", []string{"metadata", "wire"},
		"the idempotent producer ids given out and their tenants; where an id is stored is the caller's"},
	{"durable", []string{"persistence", "streams", "wire"},
		"a broker's durable shard logs on disk: persistence adapted to streams.Log; it knows no actor and no cluster"},
	{"sessions", []string{"actors", "lanes", "service", "streams", "wire"},
		"a connection's session actor: it knows the writers and feeders it ends, never how a subscription was built"},
	{"cachefront", []string{"actors", "auth", "cache", "service", "streams", "wire"},
		"a connection's cache calls: checks, a key routed to its shard, the shard asked; what a connection knows comes through its Conn"},
	{"streamfront", []string{"auth", "authgate", "routing", "service", "streams", "wire"},
		"a connection's stream administration: requests checked at the boundary and asked of the registry through its Conn; it knows no actor"},
	{"readfront", []string{"auth", "persistence", "service", "streams", "wire"},
		"a connection's range reads, time lookups and commit watches: it reads a durable shard's log from the caller's goroutine and decodes the log's record attributes (persistence's encoding); what a connection knows comes through its Conn"},
	{"groups", []string{"actors", "auth", "metrics", "service", "streams", "wire"},
		"a group actor reads its data shard's log and writes its state through the state shard, both handed to it by the broker; its front checks a connection's group calls through the connection's own lookups (Conn)"},
	{"cluster", []string{"actors", "wire"},
		"membership, definitions, placement and owner leases in etcd: the broker asks it who owns a shard and it tells the broker what it gained and lost; it asks other members for their actor trees with the actor kit's one request (actors.Request), and knows no stream or storage"},

	// Front ends: each reaches the broker only through service.Service.
	{"transport", []string{"internal/probe", "internal/quicconf", "service", "wire"},
		"felix/1 is a front end: it converts the wire to service types and reaches the broker only through service.Service"},
	{"kafka", []string{"service", "wire"},
		"the Kafka front end: like transport, it converts its protocol to service types and reaches the broker only through service.Service"},
	{"webfront", []string{"internal/quicconf", "service", "wire"},
		"the browser front end: like transport and kafka, it converts its framing to service types and reaches the broker only through service.Service; its WebTransport listener takes felix/1's QUIC settings"},
	{"js", nil,
		"the JavaScript client's modules, embedded for the admin pages; its Go tests drive a broker, its code imports nothing"},
	{"admin", []string{"actors", "auth", "cluster", "js", "service", "wire"},
		"the admin HTTP endpoint, its token checks and the live pages: it reaches the broker through service.Service and admin.Member, which it defines and the broker implements, and never imports the broker"},

	{"scramlogin", []string{"admin", "auth", "metadata", "service", "wire"},
		"the Kafka SCRAM users a broker keeps: logins checked against stored credentials, and the credentials the admin routes add, list and remove, in admin's types (it implements that part of admin.Member); the limiter and the session a login opens are the broker's"},

	// A cluster member's raft and peer side.
	{"defstore", []string{"cluster", "metadata", "routing", "streams", "wire"},
		"where stream definitions are kept: metadata.db or etcd, and streams.Def converted to each store's record"},
	{"member", []string{"cluster", "metrics", "peerlink", "persistence", "replication", "service", "streams", "wire"},
		"a member's replicas run raft over their shards' logs and talk over the peer link; it reaches the broker only through its own Host, and knows no actor tree, transport or front end"},

	// Assembly.
	{"broker", []string{"actors", "admin", "auth", "authgate", "cache", "cachefront", "cluster", "config", "defstore", "durable", "groups", "internal/quicconf", "kafka", "lanes", "member", "metadata", "metrics", "persistence", "persistence/errorfs", "producers", "quota", "readfront", "routing", "scramlogin", "service", "sessions", "streamfront", "streams", "subscribers", "transport", "webfront", "wire"},
		"the broker assembles the tree, the transport and the member; raft and the peer link it reaches only through member, and it never uses the client or the test helpers"},

	// The other end of the wire, and what drives a broker from outside.
	{"client", []string{"internal/probe", "internal/quicconf", "routing", "wire"},
		"the client is the other end of the wire: it shares the protocol and the QUIC settings, nothing of the broker"},
	{"internal/testcerts", []string{"internal/clustercerts"},
		"test certificates for mutual TLS (a CA and its leaves): clustercerts with a test's failure handling"},
	{"brokertest", []string{"actors", "auth", "broker", "client", "config", "internal/quicconf", "metrics", "wire"},
		"test helpers drive a real broker through the client and raw QUIC, as net/http/httptest drives a server"},
	{"clustertest", []string{"auth", "client", "cluster", "internal/clustercerts", "internal/quicconf", "wire"},
		"test helpers run an embedded etcd and real broker processes, and drive them through the client; the members share one signing key (auth) and one certificate (quicconf), as a client of them all needs"},
	{"loadgen", []string{"auth", "broker", "client", "config", "internal/quicconf", "wire"},
		"the load generator drives a broker (embedded or remote) through the client and reads its metrics"},
	{"cmd/felix", []string{"admin", "auth", "broker", "client", "cluster", "config", "internal/clustercerts", "internal/quicconf", "loadgen", "metadata", "persistence", "wire"},
		"the CLI runs a broker or a client, never the actors directly; its offline log tools (felix log verify/repair) read logs with persistence, under metadata's data-directory lock; felix kafka user speaks the admin endpoint's user routes in admin's types"},
	{"examples/embed", []string{"actors", "auth", "broker", "client", "config", "transport"},
		"an example uses only what a program outside this module can import: nothing under internal/"},

	// Tests and benchmarks with code of their own.
	{"cluster/e2e", nil,
		"end-to-end tests only: they import the client and the harness in their test files"},
	{"cluster/linearizable", nil,
		"the Jepsen-style tests only: they import the client, the harness and porcupine in their test files"},
	{"admin/ui/browsertest", nil,
		"the browser tests' chromedp helpers drive a page in Chromium; they know nothing of Felix's packages"},
	{"bench/quicraw", []string{"internal/quicconf"},
		"the raw quic-go ceiling uses Felix's QUIC settings and nothing else of Felix"},
	{"bench/chart", nil,
		"the chart tool reads result files only"},
	{"bench/procstat", nil,
		"the CPU time a benchmark tool charges a process, read from /proc: shared by the tools in modules of their own"},
	{"bench/groupbench", []string{"client", "wire"},
		"the Felix side of compare.sh's consumer group row: a client of a broker it does not start"},
	{"bench/soak", []string{"client", "internal/quicconf", "wire"},
		"the soak benchmark runs felix as a child process and drives it from outside: the client, and raw QUIC speaking wire frames for its hostile clients"},
	{"bench/latprobe", []string{"brokertest", "client", "internal/probe", "internal/quicconf", "wire"},
		"the hop-by-hop latency breakdown: a broker and its client in one process, so the probes share one clock; raw quic-go for the crossing it is compared with"},
	{"internal/importgraph", nil,
		"this test's package has no code"},
}

// TestImportGraph checks every package of the module against layers.
func TestImportGraph(t *testing.T) {
	graph, err := moduleGraph()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range violations(graph) {
		t.Error(v)
	}
}

// TestViolationsNameTheImport: the check reports a forbidden import by
// importer and import, with the row's reason; a package with no row and a
// row with no package are reported too, and so is a row that names a
// package whose row is below it.
func TestViolationsNameTheImport(t *testing.T) {
	graph := map[string][]string{}
	for _, l := range layers {
		graph[l.pkg] = l.may
	}
	if got := violations(graph); len(got) != 0 {
		t.Fatalf("the table's own graph has violations: %q", got)
	}
	graph["transport"] = []string{"wire", "streams"}
	graph["newpkg"] = nil
	delete(graph, "bench/chart")
	saved := layers
	defer func() { layers = saved }()
	layers = slices.Clone(layers)
	layers = append(layers[1:], layers[0]) // wire's row below everything that uses it
	graph["wire"] = nil
	got := strings.Join(violations(graph), "\n")
	for _, want := range []string{
		"transport imports streams; transport may import only [internal/probe internal/quicconf service wire]: felix/1 is a front end",
		"newpkg has no row in layers",
		"layers has a row for bench/chart",
		"actors may import wire, whose row is not above it",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("violations are\n%s\nwant one containing %q", got, want)
		}
	}
}

// violations checks graph (package -> the module packages it imports, both
// relative to the module path) against layers.
func violations(graph map[string][]string) []string {
	var out []string
	rows := make(map[string]bool, len(layers))
	for _, l := range layers {
		for _, may := range l.may {
			if !rows[may] {
				out = append(out, fmt.Sprintf("%s may import %s, whose row is not above it: move %s's row up, or the import out", l.pkg, may, may))
			}
		}
		rows[l.pkg] = true
		imports, ok := graph[l.pkg]
		if !ok {
			out = append(out, fmt.Sprintf("layers has a row for %s, which is not a package of %s: remove or rename the row", l.pkg, module))
			continue
		}
		for _, imp := range imports {
			if !slices.Contains(l.may, imp) {
				out = append(out, fmt.Sprintf("%s imports %s; %s may import only %v: %s", l.pkg, imp, l.pkg, l.may, l.why))
			}
		}
	}
	for pkg := range graph {
		if !rows[pkg] {
			out = append(out, fmt.Sprintf("%s has no row in layers: add one saying which packages of %s it may import", pkg, module))
		}
	}
	slices.Sort(out)
	return out
}

// moduleGraph lists every package of the module with the module packages it
// imports (not counting tests), through go list: it applies build
// constraints exactly as the build does.
func moduleGraph() (map[string][]string, error) {
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w\n%s", err, stderr.Bytes())
	}
	graph := make(map[string][]string)
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("decode go list output: %w", err)
		}
		pkg, ok := relative(p.ImportPath)
		if !ok {
			continue
		}
		imports := []string{}
		for _, imp := range p.Imports {
			if rel, ok := relative(imp); ok {
				imports = append(imports, rel)
			}
		}
		graph[pkg] = imports
	}
	if len(graph) == 0 {
		return nil, fmt.Errorf("go list found no package of %s", module)
	}
	return graph, nil
}

func relative(path string) (string, bool) {
	return strings.CutPrefix(path, module+"/")
}
