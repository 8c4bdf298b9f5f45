package metrics

import "github.com/prometheus/client_golang/prometheus"

// Kafka is the Kafka listener's metrics (felix_kafka_*), registered only
// when the listener runs. Its methods are the listener's hooks.
type Kafka struct {
	connections *prometheus.CounterVec // event
	open        prometheus.Gauge
	requests    *prometheus.CounterVec // api, outcome
	bytes       *prometheus.CounterVec // direction
	limits      *prometheus.CounterVec // knob
}

// RegisterKafka registers the Kafka listener's metrics in m's registry.
func (m *Metrics) RegisterKafka() *Kafka {
	k := &Kafka{
		connections: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "felix_kafka_connections_total", Help: "Kafka listener connection events: accepted, closed."}, []string{"event"}),
		open:        prometheus.NewGauge(prometheus.GaugeOpts{Name: "felix_kafka_connections_open", Help: "Open Kafka connections."}),
		requests:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "felix_kafka_requests_total", Help: "Kafka requests by api and outcome (ok, a Kafka error name, or closed when the request closed the connection)."}, []string{"api", "outcome"}),
		bytes:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "felix_kafka_bytes_total", Help: "Record value bytes produced (in) and fetched (out) through the Kafka listener."}, []string{"direction"}),
		limits:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "felix_kafka_limits_total", Help: "Kafka requests that met a listener bound, by its knob (see OPERATIONS.md's limits table for what each does)."}, []string{"knob"}),
	}
	m.Registry.MustRegister(k.connections, k.open, k.requests, k.bytes, k.limits)
	return k
}

// Connection counts a connection event and keeps the open gauge.
func (k *Kafka) Connection(event string) {
	k.connections.WithLabelValues(event).Inc()
	switch event {
	case "accepted":
		k.open.Inc()
	case "closed":
		k.open.Dec()
	}
}

// Request counts one request's outcome.
func (k *Kafka) Request(api, outcome string) { k.requests.WithLabelValues(api, outcome).Inc() }

// Bytes counts record bytes in or out.
func (k *Kafka) Bytes(direction string, n int) {
	if n > 0 {
		k.bytes.WithLabelValues(direction).Add(float64(n))
	}
}

// Limit counts a request that met one of the listener's bounds.
func (k *Kafka) Limit(knob string) { k.limits.WithLabelValues(knob).Inc() }
