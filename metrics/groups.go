package metrics

import "github.com/prometheus/client_golang/prometheus"

// GroupMetrics count consumer groups' work, by tenant; the lag
// gauge is per group and shard, set when a group writes its cursor.
type GroupMetrics struct {
	Polls        *prometheus.CounterVec // tenant
	Handed       *prometheus.CounterVec // tenant: records handed out
	Settled      *prometheus.CounterVec // tenant, op (ack, nack, extend, dead_letter)
	Redeliveries *prometheus.CounterVec // tenant
	DeadLetters  *prometheus.CounterVec // tenant
	Lag          *prometheus.GaugeVec   // tenant, namespace, stream, group, shard
}

// NewGroupMetrics registers the group metrics in r.
func NewGroupMetrics(r *prometheus.Registry) *GroupMetrics {
	vec := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		r.MustRegister(c)
		return c
	}
	lag := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "felix_group_lag",
		Help: "Records between a group's cursor and its shard's committed end, when the group last wrote its cursor.",
	}, []string{"tenant", "namespace", "stream", "group", "shard"})
	r.MustRegister(lag)
	return &GroupMetrics{
		Polls:        vec("felix_group_polls_total", "Group polls answered, by tenant.", "tenant"),
		Handed:       vec("felix_group_records_handed_total", "Records handed out by group polls (redeliveries included), by tenant.", "tenant"),
		Settled:      vec("felix_group_settled_total", "Claims settled, by tenant and op (ack, nack, extend, dead_letter).", "tenant", "op"),
		Redeliveries: vec("felix_group_redeliveries_total", "Records handed out again (visibility expired, nacked, redriven), by tenant.", "tenant"),
		DeadLetters:  vec("felix_group_dead_letters_total", "Records that became dead letters, by tenant.", "tenant"),
		Lag:          lag,
	}
}
