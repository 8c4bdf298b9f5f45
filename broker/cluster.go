package broker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/getfelix/felix-go/cluster"
	"github.com/getfelix/felix-go/defstore"
	"github.com/getfelix/felix-go/member"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/wire"
)

// A broker with cluster_etcd set is a cluster member: its stream
// definitions, shard placement and owner leases live in etcd (package
// cluster), and its registry asks the member, before a shard serves here,
// whether this member owns it. A shard another member owns is refused
// not_leader naming the owner; clients talk to owners directly.

// clustered reports whether this broker was configured as a cluster member.
func (b *Broker) clustered() bool { return b.cfg.ClusterEtcd != "" }

// startCluster makes the member and starts joining in the background, once
// the listener (the address clients are sent to) and the admin endpoint
// are up.
func (b *Broker) startCluster() error {
	if !b.clustered() {
		return nil
	}
	id, err := b.nodeID()
	if err != nil {
		return err
	}
	addr := b.cfg.ClusterAdvertise
	if addr == "" {
		addr = b.Addr().String()
	}
	admin := ""
	if a := b.AdminAddr(); a != nil {
		admin = a.String()
	}
	certs, err := b.clusterTLS()
	if err != nil {
		return err
	}
	// Before the node joins, so the member record carries the peer address.
	peerAddr, err := b.startPeers(id, certs)
	if err != nil {
		return err
	}
	system := b.system
	if b.noActorCluster {
		system = nil
	}
	etcdTLS, err := b.cfg.EtcdTLS()
	if err != nil {
		return err
	}
	etcdPassword, err := b.cfg.EtcdPassword()
	if err != nil {
		return err
	}
	node, err := cluster.New(cluster.Config{
		Name: b.cfg.ClusterName, Prefix: b.cfg.ClusterEtcdPrefix, Endpoints: splitList(b.cfg.ClusterEtcd),
		EtcdTLS: etcdTLS, EtcdUser: b.cfg.ClusterEtcdUser, EtcdPassword: etcdPassword,
		NodeID: id, Addr: addr, Admin: admin, PeerAddr: peerAddr, KafkaAddr: b.kafkaAdvertise(), Zone: b.cfg.ClusterZone, LeaseTTL: b.cfg.ClusterLeaseTTL,
		Log: b.log.With().Str("component", "cluster").Logger(), System: system, TLS: certs,
		Tree:       func() ([]byte, error) { return json.Marshal(map[string]any{"actors": b.Actors()}) },
		Hooks:      b.clusterHooks(),
		RaftLeader: b.member.RaftLeader,
	})
	if err != nil {
		return err
	}
	b.node.Store(node)
	node.Start()
	go func() {
		select {
		case err := <-node.Fatal():
			b.reportFatal(err)
		case <-b.stopping:
		}
	}()
	b.log.Info().Str("node", id).Str("advertise", addr).Str("etcd", b.cfg.ClusterEtcd).Msg("joining the cluster")
	return nil
}

func (b *Broker) clusterHooks() cluster.Hooks {
	root := b.system.Root
	return cluster.Hooks{
		Defs: func(put []cluster.StreamDef, deleted []wire.Scope) {
			msg := &streams.DefsChanged{Deleted: deleted}
			for _, d := range put {
				def, err := defstore.FromCluster(d)
				if err != nil {
					b.log.Warn().Err(err).Str("stream", d.Scope().String()).Msg("unreadable definition in etcd; ignored")
					continue
				}
				msg.Put = append(msg.Put, def)
			}
			root.Send(b.registry, msg)
		},
		Lost: func(key cluster.ShardKey, _ *wire.Owner) {
			root.Send(b.registry, &streams.StopShard{Scope: key.Scope, Shard: key.Shard})
		},
		Members:       func(n int) { b.metrics.NodeCount.Set(float64(n)) },
		Owned:         func(n int) { b.metrics.ShardsOwned.Set(float64(n)) },
		NotZoneSpread: func(n int) { b.metrics.NotZoneSpread.Set(float64(n)) },
		Moved:         func(direction string) { b.metrics.ShardMoves.WithLabelValues(direction).Inc() },
		Producer:      b.producers.Add,
		Joined:        b.serving,
		Replica: func(key cluster.ShardKey) {
			root.Send(b.registry, &streams.HostReplica{Scope: key.Scope, Shard: key.Shard})
		},
	}
}

// clusterTLS loads the member's certificate and the cluster CA
// (cluster_tls_*), which the peer link and the actor remote present and
// verify the other members against; nil when they are not configured.
func (b *Broker) clusterTLS() (*cluster.TLS, error) {
	if !b.cfg.PeerTLSSet() {
		return nil, nil
	}
	cert, pool, err := b.cfg.PeerTLS()
	if err != nil {
		return nil, err
	}
	return &cluster.TLS{Cert: cert, CAs: pool}, nil
}

// startPeers starts the member's peer link, before its node joins, and
// returns the address its member record advertises; "" when the
// certificates are not configured (there is then no link).
func (b *Broker) startPeers(nodeID string, certs *cluster.TLS) (string, error) {
	if certs == nil {
		b.log.Warn().Msg("no peer link: cluster_tls_ca, cluster_tls_cert and cluster_tls_key are not set, so this member cannot hold replicas of replicated streams (felix cluster certs makes the three files)")
		return "", nil
	}
	return b.member.StartPeers(member.PeerConfig{
		NodeID: nodeID, Cert: certs.Cert, CAs: certs.CAs,
		Listen: b.cfg.PeerListen(), Advertise: b.cfg.ClusterPeerAdvertise,
	})
}

// Peers is the broker's peer link, nil when the broker is not a cluster
// member or was started without cluster_tls_ca, cluster_tls_cert and
// cluster_tls_key.
func (b *Broker) Peers() *member.Peers { return b.member.Peers() }

// place is the registry's Place hook: a single broker owns every shard; a
// member asks the cluster. It never blocks.
func (b *Broker) place(def streams.Def, shard uint32) (streams.Fence, error) {
	if !b.clustered() {
		return nil, nil
	}
	node := b.node.Load()
	if node == nil {
		return nil, wire.NewError(wire.CodeShardUnavailable, "not_ready: this member is still starting; try another member")
	}
	if def.Replicated() {
		return nil, node.PlaceReplica(cluster.ShardKey{Scope: def.Scope, Shard: shard})
	}
	o, err := node.Place(cluster.ShardKey{Scope: def.Scope, Shard: shard}, def.Durable)
	if err != nil {
		return nil, err
	}
	return o, nil
}

// Fatal reports what ends the broker, once: a cluster configuration error
// found at join (another cluster's name under the etcd prefix: the member
// never joins, and the process should stop and exit with it), or
// ErrCoreActorStopped (the broker has stopped itself; corewatch.go).
func (b *Broker) Fatal() <-chan error { return b.fatal }

// stopCluster leaves the cluster: the lease is revoked, so the member's
// shards are placed elsewhere at once.
func (b *Broker) stopCluster(ctx context.Context) error {
	node := b.node.Load()
	if node == nil {
		return nil
	}
	return node.Stop(ctx)
}

// nodeID is cluster_node_id, or the id kept in the data directory, made
// on first start: a member keeps its id across restarts, so its durable
// shards (placed on it by id) come back to it.
func (b *Broker) nodeID() (string, error) {
	if b.cfg.ClusterNodeID != "" {
		return b.cfg.ClusterNodeID, nil
	}
	path := filepath.Join(b.cfg.DataDir, "node.id")
	if raw, err := os.ReadFile(path); err == nil {
		return strings.TrimSpace(string(raw)), nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("broker: read %s: %w", path, err)
	}
	var r [4]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", err
	}
	id := "node-" + hex.EncodeToString(r[:])
	if err := writeAddrFile(path, id); err != nil {
		return "", fmt.Errorf("broker: keep the node id: %w", err)
	}
	return id, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
