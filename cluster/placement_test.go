package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestReplicaSetsPlacedInBatches: a stream of 300 replicated shards is
// placed in a bounded number of etcd transactions, each within the
// server's --max-txn-ops (here 16: batches of 127 are refused and halved
// down to 15), rather than one transaction per shard. Every write of one
// transaction carries its revision, so the distinct revisions of the sets
// count the transactions that wrote them.
func TestReplicaSetsPlacedInBatches(t *testing.T) {
	e, err := StartEtcd(t.TempDir(), withMaxTxnOps(16))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	var nodes []*Node
	for i := range 3 {
		nodes = append(nodes, startNode(t, e.Endpoint(), fmt.Sprintf("n%d", i+1), "felix", &recorder{}))
	}
	eventually(t, "three ready members", func() bool {
		for _, n := range nodes {
			if !n.Ready() || n.memberCount() != 3 {
				return false
			}
		}
		return true
	})
	const shards = 300
	def := StreamDef{Tenant: "t", Namespace: "ns", Stream: "s", Shards: shards, Routing: "modulo",
		Durable: true, Replicas: 3, CreatedAt: time.Now()}
	if _, err := nodes[0].CreateDef(context.Background(), def); err != nil {
		t.Fatal(err)
	}
	cli := etcdClient(t, e)
	var res *clientv3.GetResponse
	eventually(t, "every replica set written", func() bool {
		res, err = cli.Get(context.Background(), nodes[0].keys.streamReplicas(def.Scope()), clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		return len(res.Kvs) == shards
	})
	perRev := map[int64]int{}
	for _, kv := range res.Kvs {
		perRev[kv.ModRevision]++
	}
	for rev, n := range perRev {
		if n > 15 {
			t.Fatalf("revision %d wrote %d sets, more than etcd's limit allows", rev, n)
		}
	}
	// 20 full batches of 15; members racing may split a few of them.
	if len(perRev) > 40 {
		t.Fatalf("%d sets written in %d transactions, want at most 40", shards, len(perRev))
	}
	for _, n := range nodes {
		if got := n.setBatch.Load(); got != 15 && got != setsPerTxn {
			t.Fatalf("member %s writes %d sets a transaction, want 15 (or the default, had it written none)", n.ID(), got)
		}
	}
}
