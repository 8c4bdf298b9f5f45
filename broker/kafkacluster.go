package broker

import (
	"github.com/getfelix/felix-go/cluster"
	"github.com/getfelix/felix-go/wire"
)

// kafkaCluster is the Kafka listener's view of the cluster
// (kafka.Cluster): the member's mirror of etcd, once the member exists.
// The listener starts before the member does (the member record carries
// the listener's address), so each call loads the node.
type kafkaCluster struct{ b *Broker }

func (k kafkaCluster) Self() string {
	if node := k.b.node.Load(); node != nil && node.Ready() {
		return node.ID()
	}
	return ""
}

func (k kafkaCluster) KafkaMembers() map[string]string {
	if node := k.b.node.Load(); node != nil {
		return node.KafkaMembers()
	}
	return map[string]string{}
}

func (k kafkaCluster) Replicas(scope wire.Scope, shard uint32) []string {
	node := k.b.node.Load()
	if node == nil {
		return nil
	}
	set, ok := node.ReplicaSet(cluster.ShardKey{Scope: scope, Shard: shard})
	if !ok {
		return nil
	}
	nodes := make([]string, len(set.Members))
	for i, r := range set.Members {
		nodes[i] = r.Node
	}
	return nodes
}

// kafkaAdvertise is the Kafka address other members give clients for this
// one: kafka_advertise, or the bound address; "" without a listener.
func (b *Broker) kafkaAdvertise() string {
	if b.kafka == nil {
		return ""
	}
	if b.cfg.KafkaAdvertise != "" {
		return b.cfg.KafkaAdvertise
	}
	return b.kafka.Addr().String()
}
