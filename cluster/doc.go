// Package cluster makes brokers one cluster on etcd: membership (protoactor-go's
// cluster with its etcd provider, and this package's member records), stream
// definitions, shard placement and the owner leases that fence a shard's
// owner. See ARCHITECTURE.md, "The cluster".
package cluster
