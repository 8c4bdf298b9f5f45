package cluster_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/cluster"
	"github.com/getfelix/felix-go/wire"
)

// Brokers in one process on one embedded etcd: the broker side of the
// cluster (routing by owner, not_leader, shard_owners, definitions shared
// through etcd). Several processes are in the harness's tests.

func embeddedEtcd(t *testing.T) string {
	t.Helper()
	e, err := cluster.StartEtcd(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e.Endpoint()
}

func startMember(t *testing.T, etcd, id string) *broker.Broker {
	cfg := brokertest.Config(t)
	cfg.Auth = "none"
	cfg.ClusterEtcd = etcd
	cfg.ClusterNodeID = id
	cfg.ClusterLeaseTTL = 2 * time.Second
	// No actor remote: the members share this process's actor kit, and
	// the multi-process tests (clustertest) run the remote, over TLS.
	return brokertest.Start(t, cfg, broker.WithoutActorCluster())
}

func dialInsecure(t *testing.T, addr string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, addr, client.Options{Insecure: true, Tenant: "t"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func TestMembersRouteByOwner(t *testing.T) {
	etcd := embeddedEtcd(t)
	members := map[string]*broker.Broker{"a": startMember(t, etcd, "a"), "b": startMember(t, etcd, "b")}
	clients := map[string]*client.Client{}
	for id, b := range members {
		clients[id] = dialInsecure(t, b.Addr().String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := client.Stream{Tenant: "t", Namespace: "ns", Name: "s"}
	// Placement spreads over the members a sees live: a stream created
	// before a saw b would be placed on a alone.
	for brokertest.Value(t, members["a"], "felix_node_count") != 2 {
		if ctx.Err() != nil {
			t.Fatal("member a never saw b join")
		}
		time.Sleep(20 * time.Millisecond)
	}
	var err error
	for {
		// Until the member has joined it refuses, shard_unavailable not_ready.
		if _, err = clients["a"].CreateStream(ctx, st, client.StreamConfig{Shards: 8}); err == nil || !errors.Is(err, wire.ErrUnavailable) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	owned := map[string]int{}
	for shard := range uint32(8) {
		owner := ownerOf(ctx, t, clients["a"], st, shard)
		other := map[string]string{"a": "b", "b": "a"}[owner]
		owned[owner]++
		// At the owner the subscribe works; at the other member it is
		// refused not_leader, naming the owner and its address.
		sub, err := clients[owner].Subscribe(ctx, st, client.SubscribeOptions{Shard: shard})
		if err != nil {
			t.Fatalf("subscribe shard %d at its owner %s: %v", shard, owner, err)
		}
		_ = sub.Close(ctx)
		_, err = clients[other].Subscribe(ctx, st, client.SubscribeOptions{Shard: shard})
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != wire.CodeNotLeader || we.Owner == nil || we.Owner.NodeID != owner || we.Owner.Addr != members[owner].Addr().String() {
			t.Fatalf("subscribe shard %d at %s = %v, want not_leader naming %s at %s", shard, other, err, owner, members[owner].Addr())
		}
	}
	if owned["a"] == 0 || owned["b"] == 0 {
		t.Fatalf("8 shards placed %v: want both members to own some", owned)
	}
	// The metrics agree: two members, and each owns what it answered for.
	for id, b := range members {
		if n := brokertest.Value(t, b, "felix_node_count"); n != 2 {
			t.Errorf("%s: felix_node_count = %v, want 2", id, n)
		}
		if n := brokertest.Value(t, b, "felix_shards_owned"); int(n) != owned[id] {
			t.Errorf("%s: felix_shards_owned = %v, want %d", id, n, owned[id])
		}
	}
}

// ownerOf finds which member owns a shard by subscribing at one member:
// it works there, or not_leader names the owner. A shard being placed is
// asked again.
func ownerOf(ctx context.Context, t *testing.T, c *client.Client, st client.Stream, shard uint32) string {
	t.Helper()
	for ctx.Err() == nil {
		sub, err := c.Subscribe(ctx, st, client.SubscribeOptions{Shard: shard})
		if err == nil {
			_ = sub.Close(ctx)
			return "a"
		}
		var we *wire.Error
		if errors.As(err, &we) && we.Code == wire.CodeNotLeader && we.Owner != nil {
			return we.Owner.NodeID
		}
		if !errors.Is(err, wire.ErrUnavailable) {
			t.Fatalf("subscribe shard %d: %v", shard, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal(ctx.Err())
	return ""
}

// TestMemberStartsWithoutEtcd: a member whose etcd is down starts, serves
// nothing clustered (shard_unavailable not_ready: a stream it has not
// heard of yet is not "not found", nor read as empty), and joins once
// etcd answers.
func TestMemberStartsWithoutEtcd(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	b := startMember(t, "http://"+addr, "a")
	c := dialInsecure(t, b.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st := client.Stream{Tenant: "t", Namespace: "ns", Name: "s"}
	err = c.Publish(ctx, st, []byte("x"), client.PublishOptions{})
	if !errors.Is(err, wire.ErrUnavailable) || !strings.Contains(err.Error(), "not_ready") {
		t.Fatalf("publish with etcd down = %v, want shard_unavailable not_ready", err)
	}
	if _, err := c.StreamInfo(ctx, st); !errors.Is(err, wire.ErrUnavailable) || !strings.Contains(err.Error(), "not_ready") {
		t.Fatalf("stream info with etcd down = %v, want shard_unavailable not_ready", err)
	}
	if _, err := c.Read(ctx, st, 0, client.ReadOptions{}); !errors.Is(err, wire.ErrUnavailable) || !strings.Contains(err.Error(), "not_ready") {
		t.Fatalf("read with etcd down = %v, want shard_unavailable not_ready", err)
	}

	startEtcdAt(t, addr)
	for {
		err = c.Publish(ctx, st, []byte("x"), client.PublishOptions{})
		if err == nil {
			break
		}
		if !errors.Is(err, wire.ErrUnavailable) || ctx.Err() != nil {
			t.Fatalf("publish once etcd is up: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startEtcdAt runs an embedded etcd serving clients at addr.
func startEtcdAt(t *testing.T, addr string) {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Dir = t.TempDir()
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cu, _ := url.Parse("http://" + addr)
	pu, _ := url.Parse("http://127.0.0.1:0")
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	<-e.Server.ReadyNotify()
}

// TestMemberServesOnceJoined: a member whose etcd is down accepts
// connections but does not serve: no address file, /ready 503. Once it has
// joined it writes the file and answers /ready 200, and a stream created
// the moment the file appears is created (it was refused not_ready when
// the file came first).
func TestMemberServesOnceJoined(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	etcdAddr := ln.Addr().String()
	_ = ln.Close()
	cfg := brokertest.Config(t)
	cfg.Auth = "none"
	cfg.Admin = "127.0.0.1:0"
	cfg.AddrFile = filepath.Join(t.TempDir(), "addr")
	cfg.ClusterEtcd = "http://" + etcdAddr
	cfg.ClusterNodeID = "a"
	cfg.ClusterLeaseTTL = 2 * time.Second
	b := brokertest.Start(t, cfg, broker.WithoutActorCluster())
	ready := func() int {
		res, err := http.Get("http://" + b.AdminAddr().String() + "/ready")
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		return res.StatusCode
	}
	if _, err := os.Stat(cfg.AddrFile); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("before joining: the address file is there (stat: %v)", err)
	}
	if got := ready(); got != http.StatusServiceUnavailable {
		t.Fatalf("before joining: /ready %d, want 503", got)
	}

	startEtcdAt(t, etcdAddr)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(cfg.AddrFile); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no address file 30 s after etcd came up")
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := dialInsecure(t, b.Addr().String())
	if _, err := c.CreateStream(ctx, client.Stream{Tenant: "t", Namespace: "ns", Name: "first"}, client.StreamConfig{Shards: 2}); err != nil {
		t.Fatalf("stream create as the address file appears: %v", err)
	}
	if got := ready(); got != http.StatusOK {
		t.Fatalf("joined: /ready %d, want 200", got)
	}
}
