package member

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/cluster"
	"github.com/getfelix/felix-go/metrics"
	"github.com/getfelix/felix-go/persistence"
	"github.com/getfelix/felix-go/replication"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/wire"
)

// fakeHost keeps logs under one directory and has no cluster node: a
// single broker's, as far as the member can tell.
type fakeHost struct {
	dir     string
	metrics *metrics.Metrics
}

func newFakeHost(t *testing.T) fakeHost {
	return fakeHost{dir: t.TempDir(), metrics: metrics.New(actors.NewDirectory(), actors.NewByteBudget(0))}
}

func (h fakeHost) LogDir(def streams.Def, shard uint32) string {
	return filepath.Join(h.dir, def.Scope.Tenant, def.Scope.Namespace, def.Scope.Stream, fmt.Sprint(shard))
}

func (h fakeHost) LogConfig(streams.Def) (persistence.Config, error) {
	return persistence.Config{}, nil
}
func (h fakeHost) Node() *cluster.Node       { return nil }
func (h fakeHost) Metrics() *metrics.Metrics { return h.metrics }
func (h fakeHost) Log() zerolog.Logger       { return zerolog.Nop() }

var testScope = wire.Scope{Tenant: "t", Namespace: "ns", Stream: "s"}

// TestRemoveShardDataTakesItsStagedCopy: a moved replica's data goes, a
// copy of its leader's segments staged beside it too, and nothing is left
// renamed away.
func TestRemoveShardDataTakesItsStagedCopy(t *testing.T) {
	h := newFakeHost(t)
	m := New(h)
	dir := h.LogDir(streams.Def{Scope: testScope}, 1)
	for _, d := range []string{dir, dir + replication.StagedSuffix} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "00000000000000000000.log"), []byte("batches"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	m.RemoveShardData(testScope, 1)
	left, err := os.ReadDir(filepath.Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		t.Errorf("%s is left in %s after RemoveShardData", e.Name(), filepath.Dir(dir))
	}
}

// TestReplicationMetricsReadTheLeadersViews: the felix_replication_*
// gauges sum the views this member leads (those with replicas' progress),
// and Statuses gives the views of a stream's shards in shard order.
func TestReplicationMetricsReadTheLeadersViews(t *testing.T) {
	h := newFakeHost(t)
	m := New(h)
	m.status.put(cluster.ShardKey{Scope: testScope, Shard: 2}, wire.ShardReplication{Shard: 2, Leader: "b"})
	m.status.put(cluster.ShardKey{Scope: testScope, Shard: 0}, wire.ShardReplication{Shard: 0, Leader: "a", Replicas: []wire.ReplicaProgress{
		{Node: "a", Active: true},
		{Node: "b", LagRecords: 5, Active: true},
		{Node: "c", LagRecords: 2},
	}})
	for name, want := range map[string]float64{
		"felix_replication_lag_records": 7,
		"felix_shards_under_replicated": 1,
		"felix_replication_shards_led":  1,
	} {
		if v := gauge(t, h.metrics, name); v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
	got := m.Statuses(testScope, 3)
	if len(got) != 2 || got[0].Shard != 0 || got[1].Shard != 2 {
		t.Fatalf("Statuses of 3 shards = %+v, want shards 0 and 2 in order", got)
	}
	m.status.remove(cluster.ShardKey{Scope: testScope, Shard: 0})
	if got := m.Statuses(testScope, 3); len(got) != 1 || got[0].Shard != 2 {
		t.Fatalf("Statuses after removing shard 0 = %+v, want shard 2 alone", got)
	}
}

func gauge(t *testing.T, m *metrics.Metrics, name string) float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("%s not gathered", name)
	return 0
}

// TestReplicasWithoutACluster: off a cluster (no node, no peer link) a
// durable stream gets one copy unless it asked for more, which is refused
// as a request the member cannot serve; a stream in memory is never
// replicated.
func TestReplicasWithoutACluster(t *testing.T) {
	m := New(newFakeHost(t))
	tests := []struct {
		give    service.StreamSpec
		want    int
		refused bool
	}{
		{give: service.StreamSpec{Durable: true}, want: 0},
		{give: service.StreamSpec{Durable: true, Replicas: 1}, want: 0},
		{give: service.StreamSpec{Durable: true, Replicas: 3}, refused: true},
		{give: service.StreamSpec{Replicas: 2}, refused: true},
		{give: service.StreamSpec{Durable: true, Replicas: -1}, refused: true},
		{give: service.StreamSpec{}, want: 0},
	}
	for _, tt := range tests {
		got, err := m.ReplicasFor(&tt.give)
		if tt.refused {
			if !errors.Is(err, wire.ErrInvalidRequest) {
				t.Errorf("ReplicasFor(%+v) = %d, %v; want invalid_request", tt.give, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ReplicasFor(%+v) = %d, %v; want %d", tt.give, got, err, tt.want)
		}
	}
	if _, err := m.OpenReplica(streams.Def{Scope: testScope, Durable: true, Replicas: 3}, 0, nil, nil); !errors.Is(err, errNoPeerLink) {
		t.Fatalf("OpenReplica without a peer link = %v, want errNoPeerLink", err)
	}
}
