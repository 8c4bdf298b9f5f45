package metrics

import "github.com/prometheus/client_golang/prometheus"

// Admission is what the admission gauges read at each scrape: the
// connections in each of the broker's pools, felix/1 and Kafka together,
// and the addresses the failed-authentication limiter remembers.
type Admission struct {
	PreAuth, Authenticated int
	FailingAddresses       int
}

// WatchAdmission registers felix_connections_preauth,
// felix_connections_authenticated and felix_auth_failure_addresses, read
// from read at scrape time. A broker calls it once.
func (m *Metrics) WatchAdmission(read func() Admission) {
	gauge := func(name, help string, v func(Admission) int) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return float64(v(read())) })
	}
	m.Registry.MustRegister(
		gauge("felix_connections_preauth", "Client connections not yet authenticated (bounded by max_preauth_connections).", func(a Admission) int { return a.PreAuth }),
		gauge("felix_connections_authenticated", "Authenticated client connections (bounded by max_client_connections).", func(a Admission) int { return a.Authenticated }),
		gauge("felix_auth_failure_addresses", "Addresses the failed-authentication limiter remembers (bounded by auth_failure_max_addresses).", func(a Admission) int { return a.FailingAddresses }),
	)
}
