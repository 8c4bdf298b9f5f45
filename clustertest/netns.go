package clustertest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Network namespaces (Options.NetNS): each member runs in a namespace of
// its own, joined to a bridge in the test's namespace by a veth pair. etcd
// and the test's clients are on the bridge, so Partition can cut members
// off from each other (blackhole routes in their namespaces, both ways)
// while etcd and clients still reach every member: the partition a
// replicated shard's leader must survive without acknowledging anything.
// It needs Linux, root and iproute2 (`ip`); everything it makes is named
// with a random id and removed when the test ends.

// RequireNetNSEnv, set to 1, makes a test that asks for namespaces fail
// rather than skip where they cannot be made (CI sets it). Not FELIX_:
// brokers refuse FELIX_ variables they do not know, and some tests start
// brokers with the test's environment.
const RequireNetNSEnv = "FELIXTEST_REQUIRE_NETNS"

// lab is the namespaces, veth pairs and bridge of one cluster.
type lab struct {
	id     string // random, in every name
	subnet string // "10.<a>.<b>": the bridge is .1, member i .(11+i)
	nodes  int
}

// newLab makes the bridge and one namespace per member, or says why it
// cannot.
func newLab(nodes int) (*lab, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, errors.New("network namespaces need iproute2's ip command (apt-get install -y iproute2)")
	}
	var r [3]byte
	if _, err := rand.Read(r[:]); err != nil {
		return nil, err
	}
	l := &lab{id: hex.EncodeToString(r[:2]), subnet: fmt.Sprintf("10.%d.%d", 64+r[2]%64, r[0]), nodes: nodes}
	if err := l.build(); err != nil {
		l.close()
		return nil, err
	}
	return l, nil
}

func (l *lab) bridge() string    { return "fx" + l.id + "b" }
func (l *lab) ns(i int) string   { return "fx" + l.id + "n" + fmt.Sprint(i) }
func (l *lab) veth(i int) string { return "fx" + l.id + "h" + fmt.Sprint(i) }

// hostIP is the test namespace's address on the bridge (etcd, clients).
func (l *lab) hostIP() string { return l.subnet + ".1" }

// memberIP is member i's address in its namespace.
func (l *lab) memberIP(i int) string { return fmt.Sprintf("%s.%d", l.subnet, 11+i) }

func (l *lab) build() error {
	steps := [][]string{
		{"link", "add", l.bridge(), "type", "bridge"},
		{"addr", "add", l.hostIP() + "/24", "dev", l.bridge()},
		{"link", "set", l.bridge(), "up"},
	}
	for i := range l.nodes {
		steps = append(steps,
			[]string{"netns", "add", l.ns(i)},
			[]string{"link", "add", l.veth(i), "type", "veth", "peer", "name", "eth0", "netns", l.ns(i)},
			[]string{"link", "set", l.veth(i), "master", l.bridge(), "up"},
			[]string{"-n", l.ns(i), "addr", "add", l.memberIP(i) + "/24", "dev", "eth0"},
			[]string{"-n", l.ns(i), "link", "set", "eth0", "up"},
			[]string{"-n", l.ns(i), "link", "set", "lo", "up"},
		)
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			return err
		}
	}
	return nil
}

// close removes everything build made; what is already gone is skipped.
func (l *lab) close() {
	for i := range l.nodes {
		_ = ip("netns", "del", l.ns(i))
		_ = ip("link", "del", l.veth(i))
	}
	_ = ip("link", "del", l.bridge())
}

// cut adds (or, with del, removes) blackhole routes between member i and
// each of others, in both members' namespaces.
func (l *lab) cut(i int, others []int, del bool) error {
	verb := "add"
	if del {
		verb = "del"
	}
	for _, o := range others {
		if err := ip("-n", l.ns(i), "route", verb, "blackhole", l.memberIP(o)+"/32"); err != nil {
			return err
		}
		if err := ip("-n", l.ns(o), "route", verb, "blackhole", l.memberIP(i)+"/32"); err != nil {
			return err
		}
	}
	return nil
}

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("clustertest: ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// startLab makes the namespaces for a cluster of nodes, skipping the test
// when they cannot be made (failing it under RequireNetNSEnv).
func startLab(t testing.TB, nodes int) *lab {
	t.Helper()
	l, err := newLab(nodes)
	if err != nil {
		if os.Getenv(RequireNetNSEnv) == "1" {
			t.Fatalf("clustertest: %v (%s=1 requires them)", err, RequireNetNSEnv)
		}
		t.Skipf("clustertest: %v; set %s=1 to fail instead", err, RequireNetNSEnv)
	}
	return l
}

// Partition cuts m off from every other member, both ways; etcd and
// clients still reach it. Heal undoes it.
func (c *Cluster) Partition(t testing.TB, m *Member) {
	t.Helper()
	c.partition(t, m, false)
}

// Heal ends the partition Partition made of m.
func (c *Cluster) Heal(t testing.TB, m *Member) {
	t.Helper()
	c.partition(t, m, true)
}

func (c *Cluster) partition(t testing.TB, m *Member, heal bool) {
	t.Helper()
	if c.lab == nil {
		t.Fatal("clustertest: Partition needs Options.NetNS")
	}
	var others []int
	for i, o := range c.members {
		if o != m {
			others = append(others, i)
		}
	}
	if err := c.lab.cut(m.index, others, heal); err != nil {
		t.Fatal(err)
	}
}

// InNetNS says the members run in network namespaces (Options.NetNS).
func (c *Cluster) InNetNS() bool { return c.lab != nil }
