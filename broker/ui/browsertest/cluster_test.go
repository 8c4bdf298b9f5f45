package browsertest_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/getfelix/felix-go/broker/ui/browsertest"
	"github.com/getfelix/felix-go/internal/clustertest"
)

// The tree page of a cluster member, in a real browser: the members are
// broker processes (internal/clustertest), as protoactor's cluster, which
// gathers the other members' trees, cannot run several members in one
// process under the race detector (its gossip and grpc's logger race).

func TestMain(m *testing.M) { clustertest.Main(m) }

// TestUICluster: on a member of a three-member cluster the tree page shows
// one column per member, each with its own tree (its lanes), kill buttons
// only in this member's column (the kill route reaches only its own
// actors), and links to the other members' own pages.
func TestUICluster(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Nodes: 3, LeaseTTL: 2 * time.Second, ExtraArgs: []string{"--chaos"}})
	c.WaitReady(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	here := c.Members()[0]
	p := browsertest.OpenSized(t, ctx, "http://"+here.Admin+"/ui", 2450, 1000) // three columns side by side
	p.Do("type the token", chromedp.SendKeys(chromedp.CSS("#token"), c.Token()))

	want := []string{"node-1", "node-2", "node-3"}
	const columns = `[...document.querySelectorAll("section.member")].filter(s => s.querySelector('tr.actor[data-kind="lane"]')).map(s => s.dataset.node).sort()`
	p.Await("three members' trees", func() bool { return slices.Equal(browsertest.Eval[[]string](p, columns), want) })
	killable := browsertest.Eval[[]string](p, `[...new Set([...document.querySelectorAll("button.kill")].filter(b => b.offsetParent !== null).map(b => b.closest("section.member").dataset.node))]`)
	if !slices.Equal(killable, []string{here.NodeID}) {
		t.Errorf("kill buttons in the columns of %v, want only %s's", killable, here.NodeID)
	}
	p.Await("links to the other members' pages", func() bool {
		links := browsertest.Eval[[]string](p, `[...document.querySelectorAll("section.member h2 a.open")].filter(a => a.offsetParent !== null).map(a => a.href).sort()`)
		var others []string
		for _, m := range c.Members()[1:] {
			others = append(others, "http://"+m.Admin+"/ui")
		}
		slices.Sort(others)
		return slices.Equal(links, others)
	})
	// The filter applies to every column.
	p.Do("filter lanes", chromedp.SetValue(chromedp.CSS("#kind"), "lane"))
	browsertest.Eval[bool](p, `document.getElementById("kind").dispatchEvent(new Event("change"))`)
	visible := browsertest.Eval[[]string](p, `[...new Set([...document.querySelectorAll("tr.actor")].filter(r => r.offsetParent !== null).map(r => r.dataset.kind + "@" + r.closest("section.member").dataset.node))].sort()`)
	if !slices.Equal(visible, []string{"lane@node-1", "lane@node-2", "lane@node-3"}) {
		t.Errorf("with the kind filter lane the page shows %v", visible)
	}
	browsertest.Eval[bool](p, `(() => { const k = document.getElementById("kind"); k.value = ""; return k.dispatchEvent(new Event("change")) })()`)
	browsertest.Screenshot(t, p, "ui-cluster.png")
}
