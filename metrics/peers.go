package metrics

import "github.com/prometheus/client_golang/prometheus"

// PeerSample is one peer's outbound side of the peer link, as the link
// counts it.
type PeerSample struct {
	Peer          string
	Queued        int
	Sent, Dropped uint64
	Connected     bool
}

// PeerTotals is what the peer collector reads at each scrape: every peer's
// outbound counters, and the inbound ones (Unknown is the subset of
// Received whose group had no handler).
type PeerTotals struct {
	Peers             []PeerSample
	Received, Unknown uint64
}

var (
	peerSentDesc     = prometheus.NewDesc("felix_peer_messages_sent_total", "Messages written to a peer's peer-link connection.", []string{"peer"}, nil)
	peerDroppedDesc  = prometheus.NewDesc("felix_peer_messages_dropped_total", "Messages for a peer dropped: its queue was full, its connection failed under them, or it had no known peer address.", []string{"peer"}, nil)
	peerQueueDesc    = prometheus.NewDesc("felix_peer_queue_depth", "Messages waiting in a peer's outbound queue.", []string{"peer"}, nil)
	peerConnDesc     = prometheus.NewDesc("felix_peer_connected", "1 while this member's connection to the peer is up.", []string{"peer"}, nil)
	peerReceivedDesc = prometheus.NewDesc("felix_peer_messages_received_total", "Messages received from every peer.", nil, nil)
	peerUnknownDesc  = prometheus.NewDesc("felix_peer_unknown_group_total", "Received messages dropped because no shard here handles their group.", nil, nil)
)

// WatchPeers registers the peer link's metrics, read from read at scrape
// time so the link's data path pays nothing for them. A broker calls it
// once, when its peer link starts; without a peer link there are no
// felix_peer_* metrics.
func (m *Metrics) WatchPeers(read func() PeerTotals) {
	m.Registry.MustRegister(peerCollector(read))
}

type peerCollector func() PeerTotals

func (c peerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{peerSentDesc, peerDroppedDesc, peerQueueDesc, peerConnDesc, peerReceivedDesc, peerUnknownDesc} {
		ch <- d
	}
}

func (c peerCollector) Collect(ch chan<- prometheus.Metric) {
	t := c()
	for _, p := range t.Peers {
		connected := 0.0
		if p.Connected {
			connected = 1
		}
		ch <- prometheus.MustNewConstMetric(peerSentDesc, prometheus.CounterValue, float64(p.Sent), p.Peer)
		ch <- prometheus.MustNewConstMetric(peerDroppedDesc, prometheus.CounterValue, float64(p.Dropped), p.Peer)
		ch <- prometheus.MustNewConstMetric(peerQueueDesc, prometheus.GaugeValue, float64(p.Queued), p.Peer)
		ch <- prometheus.MustNewConstMetric(peerConnDesc, prometheus.GaugeValue, connected, p.Peer)
	}
	ch <- prometheus.MustNewConstMetric(peerReceivedDesc, prometheus.CounterValue, float64(t.Received))
	ch <- prometheus.MustNewConstMetric(peerUnknownDesc, prometheus.CounterValue, float64(t.Unknown))
}
