package admin

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/cluster"
	"github.com/getfelix/felix-go/wire"
)

// The cluster routes: a member's view of the cluster, every member's
// tree, a drain, and a replicated shard's replica set and its move. A
// single broker answers each 404.

// clusterRoutes registers the cluster routes on the admin endpoint.
func (rt *routes) clusterRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/cluster", rt.requireNode(auth.ActionNodeView, rt.handleClusterStatus))
	mux.HandleFunc("POST /debug/cluster/drain", rt.requireNode(auth.ActionNodeManage, rt.handleClusterDrain))
	mux.HandleFunc("GET /debug/cluster/actors", rt.requireNode(auth.ActionNodeView, rt.handleClusterActors))
	mux.HandleFunc("GET /debug/cluster/replicas", rt.requireStream(auth.ActionNodeView, streamTenant, rt.handleReplicaSet))
	mux.HandleFunc("POST /debug/cluster/move-replica", rt.requireStream(auth.ActionNodeManage, streamTenant, rt.handleMoveReplica))
}

// member is the broker's membership, or nil after answering 404 for a
// single broker.
func (rt *routes) member(w http.ResponseWriter) Cluster {
	node := rt.m.Cluster()
	if node == nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "this broker is not a cluster member (start it with --cluster-etcd)"})
	}
	return node
}

func (rt *routes) handleClusterStatus(w http.ResponseWriter, r *http.Request) {
	node := rt.member(w)
	if node == nil {
		return
	}
	writeJSON(w, http.StatusOK, node.Status(r.Context()))
}

func (rt *routes) handleClusterDrain(w http.ResponseWriter, r *http.Request) {
	node := rt.member(w)
	if node == nil {
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
	rt.cfg.Log.Warn().Str("member", id).Msg("drain requested: the member hands its in-memory shards to the others")
	writeJSON(w, http.StatusAccepted, map[string]string{"node_id": id})
}

func (rt *routes) handleClusterActors(w http.ResponseWriter, r *http.Request) {
	node := rt.member(w)
	if node == nil {
		return
	}
	writeJSON(w, http.StatusOK, node.Trees(r.Context()))
}

// streamTenant is the tenant of a stream named ?stream=TENANT/NS/STREAM;
// "" when it names none, which the token check then treats as the node as
// a whole (the stricter check) before the handler answers 400.
func streamTenant(r *http.Request) string {
	tenant, _, ok := strings.Cut(r.URL.Query().Get("stream"), "/")
	if !ok {
		return ""
	}
	return tenant
}

// shardKeyOf reads ?stream=TENANT/NS/STREAM&shard=N.
func shardKeyOf(r *http.Request) (cluster.ShardKey, error) {
	parts := strings.Split(r.URL.Query().Get("stream"), "/")
	if len(parts) != 3 {
		return cluster.ShardKey{}, fmt.Errorf("name the stream: ?stream=TENANT/NAMESPACE/STREAM")
	}
	scope := wire.Scope{Tenant: parts[0], Namespace: parts[1], Stream: parts[2]}
	if err := scope.Validate(); err != nil {
		return cluster.ShardKey{}, err
	}
	shard, err := strconv.ParseUint(r.URL.Query().Get("shard"), 10, 32)
	if err != nil {
		return cluster.ShardKey{}, fmt.Errorf("name the shard: ?shard=N (%v)", err)
	}
	return cluster.ShardKey{Scope: scope, Shard: uint32(shard)}, nil
}

// handleReplicaSet answers GET /debug/cluster/replicas: a shard's replica
// set, with its move while one is under way.
func (rt *routes) handleReplicaSet(w http.ResponseWriter, r *http.Request) {
	node, key, ok := rt.replicaRequest(w, r)
	if !ok {
		return
	}
	set, found := node.ReplicaSet(key)
	if !found {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": key.String() + " has no replica set (not a replicated shard, or not placed yet)"})
		return
	}
	writeJSON(w, http.StatusOK, set)
}

// handleMoveReplica answers POST /debug/cluster/move-replica: it starts
// moving a shard's replica from one member to another (&from=A&to=B).
func (rt *routes) handleMoveReplica(w http.ResponseWriter, r *http.Request) {
	node, key, ok := rt.replicaRequest(w, r)
	if !ok {
		return
	}
	from, to := r.URL.Query().Get("from"), r.URL.Query().Get("to")
	if from == "" || to == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "name both members: &from=A&to=B (felix cluster ls lists them)"})
		return
	}
	if err := node.MoveReplica(r.Context(), key, from, to); err != nil {
		status := http.StatusServiceUnavailable
		if errors.Is(err, cluster.ErrMoveRefused) {
			status = http.StatusConflict
		}
		writeJSON(w, status, map[string]string{"error": err.Error()})
		return
	}
	rt.cfg.Log.Warn().Str("shard", key.String()).Str("from", from).Str("to", to).Msg("replica move requested")
	writeJSON(w, http.StatusAccepted, map[string]string{"shard": key.String(), "from": from, "to": to})
}

func (rt *routes) replicaRequest(w http.ResponseWriter, r *http.Request) (Cluster, cluster.ShardKey, bool) {
	node := rt.member(w)
	if node == nil {
		return nil, cluster.ShardKey{}, false
	}
	key, err := shardKeyOf(r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return nil, cluster.ShardKey{}, false
	}
	return node, key, true
}
