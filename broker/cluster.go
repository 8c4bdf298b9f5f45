package broker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/cluster"
	"github.com/getfelix/felix-go/routing"
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
	// Before the node joins, so the member record carries the peer address.
	peerAddr, err := b.startPeers(id)
	if err != nil {
		return err
	}
	system := b.system
	if b.noActorCluster {
		system = nil
	}
	node, err := cluster.New(cluster.Config{
		Name: b.cfg.ClusterName, Prefix: b.cfg.ClusterEtcdPrefix, Endpoints: splitList(b.cfg.ClusterEtcd),
		NodeID: id, Addr: addr, Admin: admin, PeerAddr: peerAddr, KafkaAddr: b.kafkaAdvertise(), LeaseTTL: b.cfg.ClusterLeaseTTL,
		Log: b.log.With().Str("component", "cluster").Logger(), System: system,
		Tree:  func() ([]byte, error) { return json.Marshal(map[string]any{"actors": b.Actors()}) },
		Hooks: b.clusterHooks(),
	})
	if err != nil {
		return err
	}
	b.node.Store(node)
	node.Start()
	b.log.Info().Str("node", id).Str("advertise", addr).Str("etcd", b.cfg.ClusterEtcd).Msg("joining the cluster")
	return nil
}

func (b *Broker) clusterHooks() cluster.Hooks {
	root := b.system.Root
	return cluster.Hooks{
		Defs: func(put []cluster.StreamDef, deleted []wire.Scope) {
			msg := &streams.DefsChanged{Deleted: deleted}
			for _, d := range put {
				def, err := fromCluster(d)
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
		Members:  func(n int) { b.metrics.NodeCount.Set(float64(n)) },
		Owned:    func(n int) { b.metrics.ShardsOwned.Set(float64(n)) },
		Moved:    func(direction string) { b.metrics.ShardMoves.WithLabelValues(direction).Inc() },
		Producer: b.producers.add,
		Replica: func(key cluster.ShardKey) {
			root.Send(b.registry, &streams.HostReplica{Scope: key.Scope, Shard: key.Shard})
		},
	}
}

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

// Fatal reports a cluster configuration error found at join (another
// cluster's name under the etcd prefix): the member never joins, and the
// process should exit with it. Nil for a single broker.
func (b *Broker) Fatal() <-chan error {
	if node := b.node.Load(); node != nil {
		return node.Fatal()
	}
	return nil
}

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

// clusterDefs keeps a member's stream definitions in etcd (the registry's
// DefStore): explicit and implicit ones, since every member must agree on
// a stream a first publish made.
type clusterDefs struct{ b *Broker }

var _ streams.ImplicitStore = clusterDefs{}

func (s clusterDefs) node() (*cluster.Node, error) {
	if n := s.b.node.Load(); n != nil {
		return n, nil
	}
	return nil, wire.NewError(wire.CodeShardUnavailable, "not_ready: this member is still starting; try another member")
}

func (s clusterDefs) PutStream(d streams.Def) error {
	n, err := s.node()
	if err != nil {
		return err
	}
	stored, err := n.CreateDef(context.Background(), toCluster(d))
	if err != nil {
		return err
	}
	if got, err := fromCluster(stored); err == nil && !got.Implicit && !sameSpec(got, d) {
		return wire.NewError(wire.CodeInvalidRequest, "stream %s exists with other settings (%d shards, %s routing, durable %t); delete it first or create it with the same settings", d.Scope, got.Shards, got.Routing, got.Durable)
	}
	return nil
}

func (s clusterDefs) PutImplicit(d streams.Def) (streams.Def, error) {
	n, err := s.node()
	if err != nil {
		return streams.Def{}, err
	}
	stored, err := n.CreateDef(context.Background(), toCluster(d))
	if err != nil {
		return streams.Def{}, err
	}
	return fromCluster(stored)
}

func (s clusterDefs) DeleteStream(d streams.Def) error {
	n, err := s.node()
	if err != nil {
		return err
	}
	return n.DeleteDef(context.Background(), d.Scope)
}

func sameSpec(a, b streams.Def) bool {
	return a.Shards == b.Shards && a.Routing == b.Routing && a.Durable == b.Durable &&
		a.RetentionBytes == b.RetentionBytes && a.RetentionAge == b.RetentionAge &&
		max(a.Replicas, 1) == max(b.Replicas, 1)
}

func toCluster(d streams.Def) cluster.StreamDef {
	return cluster.StreamDef{
		Tenant: d.Scope.Tenant, Namespace: d.Scope.Namespace, Stream: d.Scope.Stream,
		Shards: d.Shards, Routing: d.Routing.String(), Durable: d.Durable,
		RetentionBytes: d.RetentionBytes, RetentionAgeMS: d.RetentionAge.Milliseconds(),
		Replicas: d.Replicas, Implicit: d.Implicit, CreatedAt: d.CreatedAt,
	}
}

func fromCluster(d cluster.StreamDef) (streams.Def, error) {
	r, err := routing.Parse(d.Routing)
	if err != nil {
		return streams.Def{}, err
	}
	return streams.Def{
		Scope: d.Scope(), Shards: d.Shards, Routing: r, Durable: d.Durable,
		RetentionBytes: d.RetentionBytes, RetentionAge: time.Duration(d.RetentionAgeMS) * time.Millisecond,
		Replicas: d.Replicas, Implicit: d.Implicit, CreatedAt: d.CreatedAt,
	}, nil
}

// The admin endpoint's cluster routes.

func (b *Broker) handleClusterStatus(w http.ResponseWriter, r *http.Request) {
	node := b.node.Load()
	if node == nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "this broker is not a cluster member (start it with --cluster-etcd)"})
		return
	}
	writeJSON(w, http.StatusOK, node.Status(r.Context()))
}

func (b *Broker) handleClusterDrain(w http.ResponseWriter, r *http.Request) {
	node := b.node.Load()
	if node == nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "this broker is not a cluster member (start it with --cluster-etcd)"})
		return
	}
	id := r.URL.Query().Get("node")
	if id == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "name the member to drain: ?node=ID (felix cluster ls lists them)"})
		return
	}
	if err := node.Drain(r.Context(), id); err != nil {
		status := http.StatusServiceUnavailable
		if errors.Is(err, wire.ErrNotFound) {
			status = http.StatusNotFound
		}
		writeJSON(w, status, map[string]string{"error": err.Error()})
		return
	}
	b.log.Warn().Str("member", id).Msg("drain requested: the member hands its in-memory shards to the others")
	writeJSON(w, http.StatusAccepted, map[string]string{"node_id": id})
}

func (b *Broker) handleClusterActors(w http.ResponseWriter, r *http.Request) {
	node := b.node.Load()
	if node == nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "this broker is not a cluster member (start it with --cluster-etcd)"})
		return
	}
	writeJSON(w, http.StatusOK, node.Trees(r.Context()))
}

// clusterRoutes registers the cluster routes on the admin endpoint.
func (b *Broker) clusterRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/cluster", b.requireNode(auth.ActionNodeView, b.handleClusterStatus))
	mux.HandleFunc("POST /debug/cluster/drain", b.requireNode(auth.ActionNodeManage, b.handleClusterDrain))
	mux.HandleFunc("GET /debug/cluster/actors", b.requireNode(auth.ActionNodeView, b.handleClusterActors))
	mux.HandleFunc("GET /debug/cluster/replicas", b.requireNode(auth.ActionNodeView, b.handleReplicaSet))
	mux.HandleFunc("POST /debug/cluster/move-replica", b.requireNode(auth.ActionNodeManage, b.handleMoveReplica))
}
