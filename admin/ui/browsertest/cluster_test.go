package browsertest_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/getfelix/felix-go/admin/ui/browsertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/clustertest"
)

// The tree page of a cluster member, in a real browser: the members are
// broker processes (clustertest), each with its own actor remote, which
// gathers the other members' trees; in-process members run without it.

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
	setToken(p, c.Token())

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

	checkReplicatedStream(t, ctx, c, p)
}

// checkReplicatedStream: a replicated stream's page on the member that
// leads shard 0 shows every shard with its raft view (each member runs a
// replica of each shard at three replicas); shard 0 as served here with
// its followers' progress, and, after publishes to it, its next offset
// grown to what was published; a shard led elsewhere names its owner.
func checkReplicatedStream(t *testing.T, ctx context.Context, c *clustertest.Cluster, p *browsertest.Page) {
	t.Helper()
	cc, err := client.DialCluster(ctx, c.Addrs(), c.ClientOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close(context.Background()) })
	st := client.Stream{Name: "orders"}
	if _, err := cc.CreateStream(ctx, st, client.StreamConfig{Shards: 3, Durable: true, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	// The members hand leaderships over until each leads one of the three
	// shards; the page is opened on shard 0's leader once they have, so
	// the balancer does not move shard 0 away under the checks.
	top := balancedOwners(ctx, t, cc, st)
	leader := c.Member(top.Owners[0].Owner.NodeID)
	p.Do("open the stream page on shard 0's leader", chromedp.Navigate("http://"+leader.Admin+"/ui/stream?tenant=default&ns=default&stream=orders"))
	setToken(p, c.Token())
	p.Await("three shards, each with a leader", func() bool {
		return browsertest.Eval[int](p, `[...document.querySelectorAll("tr.shard td.repl")].filter(td => /leader node-\d · term [1-9]/.test(td.textContent)).length`) == 3
	})
	const shard0 = `tr.shard[data-shard="0"]`
	p.Await("shard 0 served here, with every replica's progress", func() bool {
		return browsertest.Eval[bool](p, `(() => { const r = document.querySelector('`+shard0+`');
			return r.querySelector("td.owner").textContent.includes("this broker") && (r.querySelector("td.repl").textContent.match(/node-\d (lag \d+|NOT HEARD FROM)/g) || []).length === 3 })()`)
	})
	const records = 30
	for i, n := 0, 0; n < records; i++ {
		key := []byte(fmt.Sprint(i))
		if top.ShardFor(key) != 0 {
			continue
		}
		if err := cc.Publish(ctx, st, key, client.PublishOptions{Key: key}); err != nil {
			t.Fatal(err)
		}
		n++
	}
	p.Await(fmt.Sprintf("shard 0's next offset %d", records), func() bool {
		return p.CellInt(shard0, `r.querySelector("td.next").dataset.next`) == records
	})
	others := browsertest.Eval[[]string](p, `[...document.querySelectorAll("tr.shard")].filter(r => !r.querySelector("td.owner").textContent.includes("this broker")).map(r => r.querySelector("td.owner").textContent)`)
	for _, o := range others {
		if o == leader.NodeID || c.Member(o) == nil {
			t.Errorf("a shard led elsewhere names its owner %q", o)
		}
	}
	browsertest.Screenshot(t, p, "ui-stream-replicated.png")
}

// balancedOwners waits until each of the stream's shards has a leader
// and no two share one, and returns that topology.
func balancedOwners(ctx context.Context, t *testing.T, cc *client.ClusterClient, st client.Stream) client.Topology {
	t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last client.Topology
	for {
		top, err := cc.ShardOwners(ctx, st)
		if err == nil {
			last = top
			leaders := map[string]bool{}
			for _, o := range top.Owners {
				if o.Owner.NodeID != "" {
					leaders[o.Owner.NodeID] = true
				}
			}
			if len(leaders) == len(top.Owners) {
				return top
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("the shards' leaders did not spread one to a member (last topology %+v, error %v)", last.Owners, err)
		}
	}
}

// setToken puts the token in the page's field (replacing what the tab's
// session kept from another page of the same member), where its next poll
// reads it.
func setToken(p *browsertest.Page, token string) {
	browsertest.Eval[bool](p, fmt.Sprintf(`(() => { document.getElementById("token").value = %q; return true })()`, token))
}
