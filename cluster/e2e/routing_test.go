package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/clustertest"
)

// Routing to a replicated shard's leader when etcd, which holds the owner
// records, is away: raft keeps the shard served, and routing must too.

// outageTimeout bounds each client call during and after the outage: a
// fresh client finds the leader in well under a second; the bound only
// keeps a hang from passing for slowness on a loaded machine.
const outageTimeout = 15 * time.Second

// freshPublishRead dials a new ClusterClient seeded with seeds, as `felix
// pub` or a restarted application would, publishes payload to the
// replicated stream and reads it back from the leader.
func freshPublishRead(t *testing.T, c *clustertest.Cluster, seeds []string, payload string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), outageTimeout)
	defer cancel()
	o := clientOptions(c)
	o.DialTimeout = time.Second
	cc, err := client.DialCluster(ctx, seeds, o)
	if err != nil {
		t.Fatalf("%s: dial: %v", payload, err)
	}
	defer func() { _ = cc.Close(context.Background()) }()
	res, err := cc.PublishResult(ctx, replicatedStream, [][]byte{[]byte(payload)}, client.PublishOptions{})
	if err != nil {
		t.Fatalf("%s: a fresh client's publish: %v", payload, err)
	}
	page, err := cc.Read(ctx, replicatedStream, res.Offset, client.ReadOptions{MaxRecords: 1})
	if err != nil {
		t.Fatalf("%s: a fresh client's read at %d: %v", payload, res.Offset, err)
	}
	if len(page.Records) != 1 || string(page.Records[0].Payload) != payload {
		t.Fatalf("%s: read at %d gave %v, want the record just acknowledged", payload, res.Offset, page.Records)
	}
}

// ownersNameLeader checks every member names leader as the shard's
// available owner (what `felix stream info` shows), within outageTimeout.
func ownersNameLeader(t *testing.T, c *clustertest.Cluster, leader *clustertest.Member, when string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), outageTimeout)
	defer cancel()
	for _, m := range c.Members() {
		var last string
		for {
			err := onMember(ctx, c, m, func(cl *client.Client) error {
				top, err := cl.ShardOwners(ctx, replicatedStream)
				if err == nil {
					last = fmt.Sprintf("%+v", top.Owners)
					if o := top.Owners[0]; !o.Available || o.Owner.NodeID != leader.NodeID {
						err = fmt.Errorf("owners %s", last)
					}
				}
				return err
			})
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("%s: %s does not name the leader %s as the shard's owner: %v", when, m.NodeID, leader.NodeID, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// rejoined waits until every member has joined again since the instant
// since, on a new lease: its old one, and its owner records, are gone.
func rejoined(t *testing.T, c *clustertest.Cluster, since time.Time) {
	t.Helper()
	deadline := time.Now().Add(outageTimeout)
	for {
		waiting := 0
		for _, m := range c.Members() {
			st := c.Status(t, m)
			back := false
			for _, ms := range st.Members {
				back = back || ms.NodeID == m.NodeID && st.Ready && ms.JoinedAt.After(since)
			}
			if !back {
				waiting++
			}
		}
		if waiting == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d members have not joined again within %s of etcd's return", waiting, outageTimeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestEtcdFrozenPastTheLeaseRoutesToTheLeader: etcd is frozen for three
// lease TTLs, so when it resumes every member's lease expires at once and
// takes its owner records with it. Raft never stopped: the shard's leader
// claims its record again on its new lease, and meanwhile every member
// answers who leads from its raft state. A client dialled during the
// outage and one dialled after it (seeded with every member, or with the
// leader alone as `felix pub --broker LEADER` is) publish and read at once,
// and every member names the leader (what `felix stream info` shows).
func TestEtcdFrozenPastTheLeaseRoutesToTheLeader(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Nodes: 3, LeaseTTL: leaseTTL})
	c.WaitReady(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createReplicated(ctx, t, dialAll(t, c))
	freshPublishRead(t, c, c.Addrs(), "before")

	c.Etcd().Freeze(t)
	frozenAt := time.Now()
	// The fault: etcd away for longer than every lease.
	time.Sleep(3*leaseTTL - time.Since(frozenAt))
	freshPublishRead(t, c, c.Addrs(), "during")
	thawedAt := time.Now()
	c.Etcd().Thaw(t)
	rejoined(t, c, thawedAt)
	freshPublishRead(t, c, c.Addrs(), "after")
	leader := leaderOf(ctx, t, c)
	freshPublishRead(t, c, []string{leader.Addr}, "after, seeded with the leader alone")
	ownersNameLeader(t, c, leader, "after the outage")
	recordNamesLeader(t, c, leader)
}

// recordNamesLeader waits until the shard's owner record (as every
// member's mirror has it: `felix cluster ls --shards`) names leader again:
// its claim on its new lease.
func recordNamesLeader(t *testing.T, c *clustertest.Cluster, leader *clustertest.Member) {
	t.Helper()
	deadline := time.Now().Add(outageTimeout)
	for _, m := range c.Members() {
		for {
			owner := ""
			for _, sh := range c.Status(t, m).Shards {
				if sh.Stream == "default/"+replicatedStream.Namespace+"/"+replicatedStream.Name && sh.Shard == 0 {
					owner = sh.Owner
				}
			}
			if owner == leader.NodeID {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s's mirror names %q the shard's owner of record, want the leader %s (claimed again on its new lease)", m.NodeID, owner, leader.NodeID)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// httpStatus is GET url's status code, 0 when nothing answers.
func httpStatus(url string) int {
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	res, err := hc.Get(url)
	if err != nil {
		return 0
	}
	_ = res.Body.Close()
	return res.StatusCode
}

// TestMemberServesOnlyOnceJoined: a member started while etcd is frozen
// is up (/live) but does not serve: no address file, /ready 503. Once etcd
// is back it joins, writes the file and answers /ready 200, and a stream
// created the moment the file appears is created (the file used to come
// first, and the create was refused not_ready).
func TestMemberServesOnlyOnceJoined(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Nodes: 3, LeaseTTL: leaseTTL})
	c.WaitReady(t, 3)
	m := c.Members()[2]
	m.Kill()
	c.Etcd().Freeze(t)
	m.Launch(t)
	deadline := time.Now().Add(outageTimeout)
	for httpStatus("http://"+m.Admin+"/live") != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatalf("%s's admin endpoint did not come up", m.NodeID)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The admin endpoint starts before the member joins, and etcd cannot
	// answer: the member has not joined.
	if m.Serving() {
		t.Fatalf("%s wrote its address file before joining", m.NodeID)
	}
	if got := httpStatus("http://" + m.Admin + "/ready"); got != http.StatusServiceUnavailable {
		t.Fatalf("%s's /ready before joining = %d, want 503", m.NodeID, got)
	}

	c.Etcd().Thaw(t)
	m.WaitServing(t)
	ctx, cancel := context.WithTimeout(context.Background(), outageTimeout)
	defer cancel()
	err := onMember(ctx, c, m, func(cl *client.Client) error {
		_, err := cl.CreateStream(ctx, client.Stream{Namespace: "e2e", Name: "first"}, client.StreamConfig{})
		return err
	})
	if err != nil {
		t.Fatalf("stream create at %s as its address file appeared: %v", m.NodeID, err)
	}
	if got := httpStatus("http://" + m.Admin + "/ready"); got != http.StatusOK {
		t.Fatalf("%s's /ready once joined = %d, want 200", m.NodeID, got)
	}
}

// TestLeaderKilledWhileEtcdFrozen: with etcd frozen, the shard's leader is
// killed. The survivors elect a new leader, which cannot write its owner
// record (etcd answers nothing), so the record still names the dead one;
// the members answer who leads from raft, whose term is later, and a
// fresh client publishes and reads at the new leader during the outage.
func TestLeaderKilledWhileEtcdFrozen(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Nodes: 3, LeaseTTL: leaseTTL})
	c.WaitReady(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createReplicated(ctx, t, dialAll(t, c))
	freshPublishRead(t, c, c.Addrs(), "before")
	old := leaderOf(ctx, t, c)

	c.Etcd().Freeze(t)
	old.Kill()
	freshPublishRead(t, c, c.Addrs(), "after the leader's kill, etcd frozen")
	if now := leaderOf(ctx, t, c); now == old {
		t.Fatalf("%s still leads after its kill", now.NodeID)
	}
	c.Etcd().Thaw(t)
	old.Restart(t)
	freshPublishRead(t, c, c.Addrs(), "after the outage")
}
