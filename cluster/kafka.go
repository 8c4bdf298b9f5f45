package cluster

// KafkaMembers is the Kafka listener address of every live member that
// has one, by node id, as the mirror has it. The Kafka listener lists them
// as brokers in Metadata.
func (n *Node) KafkaMembers() map[string]string {
	n.mu.RLock()
	defer n.mu.RUnlock()
	out := make(map[string]string, len(n.state.members))
	for id, m := range n.state.members {
		if m.KafkaAddr != "" {
			out[id] = m.KafkaAddr
		}
	}
	return out
}
