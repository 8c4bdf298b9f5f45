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
// (actors may use wire).
var layers = []struct {
	pkg string
	may []string
	why string
}{
	{"wire", nil,
		"the protocol is the leaf every side shares, so it depends on none of them"},
	{"actors", []string{"wire"},
		"the actor kit is generic: no stream, subscriber, lane or storage notion"},
	{"config", nil,
		"knobs and defaults: read by the broker and the CLI, reads nobody"},
	{"metadata", nil,
		"the bbolt store of stream definitions: the broker adapts it for the registry"},
	{"persistence", nil,
		"the log knows no actors and no wire: a shard reaches it through streams.Log, which broker/durable.go adapts"},
	{"replication", []string{"persistence"},
		"raft over a shard's log, which is raft's log: it uses persistence's types and reaches the log through its own EntryLog; it knows no actor, stream or wire, and the shard will drive its Replica"},
	{"metrics", []string{"actors"},
		"the collector reads live mailbox depths from actors.Directory"},
	{"lanes", []string{"actors", "internal/probe", "wire"},
		"lanes and connection writers sit below the shard and the feeders"},
	{"routing", nil,
		"key to shard: the one function the broker and a client routing by itself share; it depends on nothing"},
	{"streams", []string{"actors", "internal/probe", "routing", "wire"},
		"the shard reaches storage through its own streams.Log, never persistence, and sends to feeders by mailbox"},
	{"groups", []string{"actors", "service", "streams", "wire"},
		"a group actor reads its data shard's log and writes its state through the state shard, both handed to it by the broker"},
	{"subscribers", []string{"actors", "internal/probe", "lanes", "streams", "wire"},
		"a feeder takes envelopes from a shard and hands them to a lane"},
	{"internal/quicconf", []string{"wire"},
		"shared QUIC and TLS settings: broker and client both use them, so they use neither"},
	{"quota", []string{"wire"},
		"admission limits (connections, tenant rates and counts): the broker calls them at its service boundary; refusals are wire errors, counted by the broker through a hook"},
	{"auth", []string{"wire"},
		"tokens, keys and grants: the broker calls it at the service boundary; it knows no broker, transport, stream or actor"},
	{"service", []string{"wire"},
		"the protocol-neutral broker API: domain types and the interfaces front ends call; it knows no actor, stream or storage"},
	{"transport", []string{"internal/probe", "internal/quicconf", "service", "wire"},
		"felix/1 is a front end: it converts the wire to service types and reaches the broker only through service.Service"},
	{"client", []string{"internal/probe", "internal/quicconf", "routing", "wire"},
		"the client is the other end of the wire: it shares the protocol and the QUIC settings, nothing of the broker"},
	{"internal/clustercerts", nil,
		"mints the cluster CA and member certificates of the peer link, for operators (felix cluster certs), felix dev cluster and tests; standard library only"},
	{"internal/testcerts", []string{"internal/clustercerts"},
		"test certificates for mutual TLS (a CA and its leaves): clustercerts with a test's failure handling"},
	{"peerlink", nil,
		"the link between members carries opaque messages per group over QUIC with mutual TLS; it knows no raft, shard or wire"},
	{"cluster", []string{"wire"},
		"membership, definitions, placement and owner leases in etcd: the broker asks it who owns a shard and it tells the broker what it gained and lost; it knows no actor tree, stream or storage"},
	{"internal/clustertest", []string{"auth", "client", "cluster", "internal/clustercerts", "internal/quicconf", "wire"},
		"test helpers run an embedded etcd and real broker processes, and drive them through the client; the members share one signing key (auth) and one certificate (quicconf), as a client of them all needs"},
	{"cluster/e2e", nil,
		"end-to-end tests only: they import the client and the harness in their test files"},
	{"kafka", []string{"service", "wire"},
		"the Kafka front end: like transport, it converts its protocol to service types and reaches the broker only through service.Service"},
	{"broker", []string{"actors", "auth", "cluster", "config", "groups", "internal/quicconf", "kafka", "lanes", "metadata", "metrics", "peerlink", "persistence", "quota", "replication", "routing", "service", "streams", "subscribers", "transport", "wire"},
		"the broker assembles the tree and the transport; it never uses the client or the test helpers"},
	{"internal/brokertest", []string{"actors", "auth", "broker", "client", "config", "internal/quicconf", "metrics", "wire"},
		"test helpers drive a real broker through the client and raw QUIC"},
	{"loadgen", []string{"auth", "broker", "client", "config", "internal/quicconf", "wire"},
		"the load generator drives a broker (embedded or remote) through the client and reads its metrics"},
	{"cmd/felix", []string{"auth", "broker", "client", "cluster", "config", "internal/clustercerts", "internal/quicconf", "loadgen", "metadata", "persistence", "wire"},
		"the CLI runs a broker or a client, never the actors directly; its offline log tools (felix log verify/repair) read logs with persistence, under metadata's data-directory lock"},
	{"examples/embed", []string{"actors", "auth", "broker", "client", "config", "transport"},
		"an example uses only what a program outside this module can import: nothing under internal/"},
	{"bench/quicraw", []string{"internal/quicconf"},
		"the raw quic-go ceiling uses Felix's QUIC settings and nothing else of Felix"},
	{"bench/chart", nil,
		"the chart tool reads result files only"},
	{"bench/groupbench", []string{"client", "wire"},
		"the Felix side of compare.sh's consumer group row: a client of a broker it does not start"},
	{"bench/soak", []string{"client", "internal/quicconf", "wire"},
		"the soak benchmark runs felix as a child process and drives it from outside: the client, and raw QUIC speaking wire frames for its hostile clients"},
	{"broker/ui/browsertest", nil,
		"the browser tests' chromedp helpers drive a page in Chromium; they know nothing of Felix's packages"},
	{"internal/probe", nil,
		"the latency probes of issue #17: a leaf every hop of the data path may mark, empty unless built with -tags felixprobe"},
	{"bench/latprobe", []string{"client", "internal/brokertest", "internal/probe", "internal/quicconf", "wire"},
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
// row with no package are reported too.
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
	got := strings.Join(violations(graph), "\n")
	for _, want := range []string{
		"transport imports streams; transport may import only [internal/probe internal/quicconf service wire]: felix/1 is a front end",
		"newpkg has no row in layers",
		"layers has a row for bench/chart",
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
